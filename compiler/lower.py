"""Lowering: checked values and networks to runtime objects. The only place that imports the runtime.

A `Built` value becomes its declaration's runtime target called with the arguments (renamed where the
declaration says `lower_as`); a network becomes a `daic.runtime` Sequential of layers, with residual and
concatenating blocks as `Residual` and `Concat`, and the sizes the checker inferred (input channels and
features) passed to the layers that need them.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from daic.compiler.checking.network import BlockNode, LayerNode, Network, Node
from daic.compiler.checking.values import UNKNOWN, Built
from daic.compiler.registry import Constructor


class LoweringError(Exception):
    """A value that cannot be built: the checker should have reported it first."""


def load_target(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def lower_value(value: object, **extra: object) -> object:
    if value is UNKNOWN:
        raise LoweringError("a value the checker could not determine")
    if isinstance(value, tuple):
        return [lower_value(v) for v in value]
    if not isinstance(value, Built):
        return value
    decl = value.decl
    if decl.target is None:
        raise LoweringError(f"`{decl.name}` has no runtime object")
    target = load_target(decl.target)
    if not decl.params and not inspect.isclass(target):
        return target  # a function value such as `relu`
    kwargs = {
        (p.lower_as or p.name): lower_value(value.args[p.name])
        for p in decl.params
        if p.lowered and p.name in value.args
    }
    if decl.dataset is not None:  # the loader checks the files it reads against the declared facts
        facts = decl.dataset.for_args(value.args)
        if facts is None:
            raise LoweringError(f"`{decl.name}` without the arguments that give its image shape and classes")
        kwargs.update(image=facts.shape, classes=facts.classes)
    kwargs.update(extra)
    return target(**kwargs)


def lower_dataset(data: Constructor | Built) -> Any:
    """The runtime loader of a data set: a declaration with its defaults (as `--dataset NAME` names it), or
    a checked application (`--dataset "ImageFolder(...)"`)."""
    return lower_value(data if isinstance(data, Built) else Built(data, {}))


def lower_network(network: Network) -> Any:
    """The runtime module of a checked network (its shapes must be known)."""
    from daic.runtime import Sequential

    state = {"affine_seen": False}
    return Sequential(*_lower_nodes(network.nodes, state))


def _lower_nodes(nodes: list[Node], state: dict[str, bool]) -> list[Any]:
    from daic.runtime import Concat, Residual

    modules = []
    for node in nodes:
        if isinstance(node, BlockNode):
            branches = [_lower_nodes(branch, state) for branch in node.branches]
            modules.append(Residual(*branches) if node.kind == "sum" else Concat(*branches, dim=node.dim))
            continue
        modules.append(_lower_layer(node, state))
    return modules


def _lower_layer(node: LayerNode, state: dict[str, bool]) -> Any:
    if node.built is None or node.in_shape is None:
        raise LoweringError(f"line {node.layer.span.line}: `{node.layer.kind}` was not checked")
    decl = node.built.decl
    facts = decl.layer
    extra = facts.inputs(node.in_shape, not state["affine_seen"]) if facts.inputs else {}
    state["affine_seen"] |= facts.affine
    return lower_value(node.built, **extra)
