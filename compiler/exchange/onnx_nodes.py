"""What the ONNX reader (`onnx_in`) and its operators (`onnx_ops`) share: the parts of an imported network,
the failure that names a node, and the attributes of nodes both read (Transpose's axes, Reshape's target)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from daic.errors import DaicError

if TYPE_CHECKING:
    import numpy as np


class ImportFailure(DaicError):
    """An ONNX file that daic cannot read as a network of its language; the message names the node."""


@dataclass
class ImportedLayer:
    """One line of the `.net` file: its layer, parameters, and the tensors of its runtime module."""

    kind: str
    params: dict[str, Any]
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    node: str = ""


@dataclass
class ImportedBlock:
    """A block of two branches (an empty branch is the identity): their sum (a residual block, `sum`) or
    their outputs joined along the channels (`cat`, DenseNet's)."""

    branches: tuple[list[ImportedLayer | ImportedBlock], list[ImportedLayer | ImportedBlock]]
    kind: str = "sum"


Item = ImportedLayer | ImportedBlock


@dataclass
class ImportedNetwork:
    """An ONNX network as daic's layers: its input's shape (C, H, W, or (F,)) and the layers in order.
    ``layout``: where the ONNX input is regrouped before its first layer (NHWC images transposed, a vector
    reshaped into an image), the ONNX input's flat index of each of daic's inputs (daic's flattened input
    is the ONNX input's flattened, taken at ``layout``); None where the two orders agree. ``onnx_shape``:
    the ONNX input's own shape, its batch axis included where it has one."""

    input_shape: tuple[int, ...]
    layers: list[Item]
    source: str
    layout: np.ndarray | None = None
    onnx_shape: tuple[int | str, ...] = ()


def transposed(node, order: np.ndarray, batched: bool) -> np.ndarray:
    """`order` (values without the batch axis) as the Transpose `node` moves them."""
    return order.transpose(transpose_axes(node, order.ndim, batched))


def transpose_axes(node, rank: int, batched: bool) -> list[int]:
    """A Transpose's `perm` over the `rank` axes but the batch (output axis i is input axis perm[i])."""
    from onnx import helper

    perm = next((list(helper.get_attribute_value(a)) for a in node.attribute if a.name == "perm"), None)
    perm = perm if perm is not None else list(range(rank + batched))[::-1]
    if batched and perm[0] != 0:
        raise ImportFailure(f"node {node_name(node)} (Transpose): perm {perm} moves the batch axis")
    return [p - 1 for p in perm[1:]] if batched else perm


def reshape_target(graph, node, before: tuple[int, ...]) -> tuple[int, ...] | None:
    """A Reshape's output shape (batch axis left out) from its target, where shape inference left it
    unknown but the target is a constant (computed from known shapes): 0 copies a dimension, -1 is what
    is left."""
    target = graph.constants.get(node.input[1]) if len(node.input) > 1 else None
    if target is None:
        return None
    full = [1, *before] if graph.batched else list(before)
    dims = [full[i] if int(d) == 0 else int(d) for i, d in enumerate(target.reshape(-1).tolist())]
    if dims.count(-1) == 1:
        known = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = math.prod(full) // max(1, known)
    if math.prod(dims) != math.prod(full) or any(d < 1 for d in dims):
        return None
    return tuple(dims[1:] if graph.batched else dims)


def node_name(node) -> str:
    return repr(node.name) if node.name else f"writing {node.output[0]!r}"
