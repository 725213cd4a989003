"""Reduced-width copies of networks, so that tests can run every paper network quickly."""

import math
from dataclasses import replace

from daic.dsl import ast as A


def narrow(layers: tuple[A.Layer, ...], last: A.Layer, factor: int = 8) -> tuple[A.Layer, ...]:
    """Widths (filters, out) divided by `factor`, the classifier `last` kept, input_shape dropped."""
    out = []
    for layer in layers:
        params = []
        for p in layer.params:
            if p.name == "input_shape":
                continue
            if p.name in ("filters", "out") and layer is not last and isinstance(p.value, A.Number):
                p = replace(p, value=A.Number(max(1, math.ceil(p.value.value / factor))))
            params.append(p)
        out.append(replace(layer, params=tuple(params), body=narrow(layer.body, last, factor)))
    return tuple(out)


def narrowed(tree: A.NetFile, factor: int = 8) -> A.NetFile:
    return A.NetFile(narrow(tree.layers, tree.layers[-1], factor))
