"""`daic import`: an ONNX network read as a network of daic's language and the weights it holds.

The graph is walked from its input along the data (constants and the subgraphs that compute shapes are
not data): each operator becomes a layer of a `.net` file (`ImportedLayer`), and where the data forks, the
two paths must meet again at an `Add`, which is a residual block (`ParNet1`/`ParNet2`/`ParSum`), or at a
`Concat` along the channels, a skip block (`SkipNet1`/`SkipNet2`/`SkipCat`, DenseNet's; either
path possibly empty). Runs of element-wise constant arithmetic (`Sub`, `Div`, `Mul`, `Add` of constants:
a normalisation) become one `Normalize`, as does a first layer of diagonal weight `diag(1 / std)` (a 1x1
convolution or a square linear layer: the form `daic export` writes), and the `Add` of a constant after a
`MatMul` is that linear layer's bias. Any other operator, or a graph of another shape, is an
`ImportFailure` naming the node.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daic.compiler.exchange.onnx_nodes import (
    ImportedBlock,
    ImportedNetwork,
    ImportFailure,
    Item,
    node_name,
    reshape_target,
    transposed,
)
from daic.compiler.exchange.onnx_ops import CONVERTERS

if TYPE_CHECKING:
    import numpy as np

SHAPE_OPS = ("Shape", "Size")
"""Operators that read only the shape of a value: what they (and what is computed from them) feed is not
data."""


def read_onnx(path: str | Path) -> ImportedNetwork:
    """The network of the ONNX file at `path` (checked by onnx's checker, its shapes inferred)."""
    try:
        import onnx
    except ImportError:
        raise ImportFailure("importing needs the onnx packages: pip install 'daic[onnx]'") from None
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
        model = onnx.shape_inference.infer_shapes(model)
    except FileNotFoundError:
        raise ImportFailure(f"{path} does not exist") from None
    except Exception as exc:  # onnx raises its own kinds, and protobuf's, for a file it cannot use
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ImportFailure(f"{path} is not an ONNX model onnx can read ({first})") from None
    graph = _Graph(model.graph)
    layers = _without_identities(graph.walk(graph.start, graph.output)[0])
    _no_pad_left(layers)
    return ImportedNetwork(graph.input_shape, layers, str(path), graph.layout, graph.onnx_shape)


def onnx_inputs(network: ImportedNetwork, points: np.ndarray) -> list[np.ndarray]:
    """Points of daic's input (``(K, *input_shape)``) as the ONNX file's input, one array per point (in
    its own order of values and its own shape, a batch axis of 1 where it has one)."""
    import numpy as np

    flat = points.reshape(len(points), -1)
    if network.layout is not None:
        onnx_order = np.empty_like(flat)
        onnx_order[:, network.layout] = flat
        flat = onnx_order
    shape = [d if isinstance(d, int) else 1 for d in network.onnx_shape] or [1, *network.input_shape]
    return [row.reshape(shape) for row in flat]


def in_onnx_order(network: ImportedNetwork, values: list) -> list:
    """Values of daic's flattened input put in the ONNX input's order of values."""
    if network.layout is None:
        return values
    ordered = list(values)
    for k, at in enumerate(network.layout.tolist()):
        ordered[at] = values[k]
    return ordered


def _no_pad_left(items: list[Item]) -> None:
    """Refuses a Pad that no convolution or average pooling took into its padding (`onnx_ops.pad`)."""
    for item in items:
        if isinstance(item, ImportedBlock):
            for branch in item.branches:
                _no_pad_left(branch)
        elif item.kind == "Pad":
            raise ImportFailure(
                f"node {item.node} (Pad): daic pads only as a convolution or an average pooling does; this "
                "Pad is read by neither"
            )


def _without_identities(items: list[Item]) -> list[Item]:
    """The layers but the normalisations that change nothing (ACAS Xu subtracts a mean of zeros)."""
    kept: list[Item] = []
    for item in items:
        if isinstance(item, ImportedBlock):
            kept.append(
                ImportedBlock(
                    (_without_identities(item.branches[0]), _without_identities(item.branches[1])), item.kind
                )
            )
        elif not (
            item.kind == "Normalize" and all(item.params["mean"] == 0) and all(item.params["std"] == 1)
        ):
            kept.append(item)
    return kept


class _Graph:
    """The graph's constants, its data nodes by the values they read, and the shapes of its values."""

    def __init__(self, graph) -> None:
        from onnx import numpy_helper

        self.constants: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        self.shapes = {v.name: _dims(v) for v in (*graph.input, *graph.value_info, *graph.output)}
        for node in graph.node:
            if node.op_type == "Constant":
                self.constants[node.output[0]] = _constant_value(node)
            elif node.op_type == "Shape" and (known := self._known_dims(node.input[0])) is not None:
                self.constants[node.output[0]] = _sliced_shape(node, known)
            elif node.op_type not in SHAPE_OPS and all(not i or i in self.constants for i in node.input):
                self.constants.update(_folded(node, self.constants))
        inputs = [i.name for i in graph.input if i.name not in self.constants]
        if len(inputs) != 1 or len(graph.output) != 1:
            names = ", ".join(repr(n) for n in [*inputs, *(o.name for o in graph.output)])
            raise ImportFailure(
                f"the graph has {len(inputs)} inputs and {len(graph.output)} outputs ({names}): daic's "
                "language writes networks of one input and one output"
            )
        self.input, self.output = inputs[0], graph.output[0].name
        dims = self.shapes.get(self.input) or []
        self.onnx_shape = tuple(dims)
        self.batched = len(dims) != 1  # a vector without a batch axis is the one input that has none
        static = self._static(graph.node)
        self.start, self.layout, regrouped = self._regrouped_input(graph.node, static)
        self.input_shape = regrouped or self._input_shape(graph.node, static)
        self.nodes = {node.output[0]: node for node in graph.node}
        self.order = {node.output[0]: i for i, node in enumerate(graph.node)}
        self.readers: dict[str, list[Any]] = {}
        for node in graph.node:
            if node.op_type == "Constant" or node.output[0] in static:
                continue
            for name in dict.fromkeys(node.input):
                if name and name not in self.constants:
                    self.readers.setdefault(name, []).append(node)

    def _input_shape(self, nodes, static: set[str]) -> tuple[int, ...]:
        """(C, H, W) or (F,): the input's shape but its batch; another rank is read as the vector it is
        when the network flattens it first (mnistfc's (1, 784, 1))."""
        shape = self.shapes.get(self.input)
        if not self.batched and isinstance(shape[0], int):
            return (shape[0],)  # a vector without a batch axis
        known = shape is not None and len(shape) >= 2 and all(isinstance(d, int) for d in shape[1:])
        if known and len(shape) in (2, 4):
            return tuple(shape[1:])
        value = self.input
        while known:  # element-wise steps by constants, then the flattening
            readers = [n for n in nodes if value in n.input and n.output[0] not in static]
            if len(readers) != 1:
                break
            if readers[0].op_type in ("Flatten", "Reshape"):
                if len(self.shapes.get(readers[0].output[0]) or []) == 2:
                    return (math.prod(shape[1:]),)
                break
            if readers[0].op_type not in ("Sub", "Div", "Mul", "Add", "Identity"):
                break
            value = readers[0].output[0]
        raise ImportFailure(
            f"the input {self.input!r} has shape {shape}: daic reads (batch, C, H, W) or (batch, F)"
        )

    def _static(self, nodes: Iterable[Any]) -> set[str]:
        """Values computed from shapes and constants only (a Reshape's target, computed from Shape), the
        constants among them."""
        static: set[str] = set(self.constants)
        for node in nodes:  # ONNX lists nodes in topological order
            if node.op_type in SHAPE_OPS or all(not i or i in static for i in node.input):
                static.update(node.output)
        return static

    def constant(self, name: str, node) -> np.ndarray:
        if name not in self.constants:
            raise ImportFailure(
                f"node {node_name(node)} ({node.op_type}) takes {name!r} as a computed value: daic reads it "
                "only as a constant"
            )
        return self.constants[name]

    def only_reader(self, value: str) -> Any:
        """The one node that reads the data `value`, if one alone does."""
        readers = self.readers.get(value, [])
        return readers[0] if len(readers) == 1 else None

    def shape(self, value: str) -> tuple[int, ...] | None:
        """The value's shape but its batch axis, where every dimension is known."""
        dims = self.shapes.get(value)
        if dims is None:
            return None
        dims = dims[1:] if self.batched else dims
        return None if any(not isinstance(d, int) for d in dims) else tuple(dims)

    def _known_dims(self, value: str) -> list[int] | None:
        """The value's dimensions, a symbolic batch axis read as 1 (what a Shape node of it computes for
        one input); None where another is unknown."""
        dims = self.shapes.get(value)
        if not dims or any(not isinstance(d, int) for d in dims[1:]):
            return None
        return [d if isinstance(d, int) else 1 for d in dims]

    def _regrouped_input(self, nodes, static: set[str]) -> tuple[str, np.ndarray | None, tuple | None]:
        """The run of Transposes and Reshapes that reads the input first, as one regrouping of its values:
        the value after it, daic's order of the ONNX input's values (None: the same order), and the shape
        daic's network takes; the input, None, None where no such run regroups it into an image or a
        vector."""
        import numpy as np

        shape = self.shape(self.input)
        if shape is None:
            return self.input, None, None
        order, value = np.arange(math.prod(shape)).reshape(shape), self.input
        while True:
            readers = [n for n in nodes if value in n.input and n.output[0] not in static]
            if len(readers) != 1 or readers[0].op_type not in ("Transpose", "Reshape"):
                break
            node = readers[0]
            if node.op_type == "Transpose":
                order = transposed(node, order, self.batched)
            else:
                after = self.shape(node.output[0]) or reshape_target(self, node, order.shape)
                if after is None or math.prod(after) != order.size:
                    break
                order = order.reshape(after)
            value = node.output[0]
        if value == self.input or order.ndim not in (1, 3):
            return self.input, None, None
        flat = order.reshape(-1)
        return value, (None if bool((flat == np.arange(flat.size)).all()) else flat), tuple(order.shape)

    def walk(self, value: str, stop: str, join: Any = None) -> tuple[list[Item], str]:
        """The layers from `value` to the graph's value `stop`, or to the node `join` (the Add or Concat
        that ends the branch of a block this path is), and the value the path ends with."""
        items: list[Item] = []
        while value != stop:
            readers = self.readers.get(value, [])
            if not readers:
                raise ImportFailure(f"the value {value!r} leads nowhere before the graph's output {stop!r}")
            if len(readers) == 1 and readers[0] is join:
                return items, value
            if len(readers) == 1 and not self._is_join(readers[0]):
                value = self._layer(readers[0], value, items)
            elif len(readers) <= 2:
                value = self._block(value, readers, items)
            else:
                names = ", ".join(f"{node_name(n)} ({n.op_type})" for n in readers)
                raise ImportFailure(
                    f"the value {value!r} is read by {len(readers)} nodes ({names}): daic reads a fork of "
                    "two paths that an Add or a Concat joins (a residual or a skip block)"
                )
        if join is not None:
            raise ImportFailure(
                f"a path from the fork before {node_name(join)} reaches the output without it"
            )
        return items, value

    def _is_join(self, node) -> bool:
        """An Add of two data values (a residual block's end) or their Concat along the channels."""
        if node.op_type == "Concat" and (len(node.input) != 2 or _axis(node) != 1):
            return False
        return node.op_type in ("Add", "Concat") and all(i not in self.constants for i in node.input)

    def _block(self, value: str, readers: list[Any], items: list[Item]) -> str:
        """A block from the fork at `value` to the first Add or Concat that both its paths reach."""
        paths = readers if len(readers) == 2 else readers * 2  # x + x: two identity paths
        common = set.intersection(*(self._joins_from(reader) for reader in paths))
        if not common:
            raise ImportFailure(
                f"the paths that fork at {value!r} ({', '.join(node_name(n) for n in paths)}) meet at no "
                "Add or Concat: daic reads a fork of two paths that one of them joins"
            )
        join = min((self.nodes[key] for key in common), key=lambda n: self.order[n.output[0]])
        branches: list[tuple[list[Item], str]] = []
        for reader in paths:
            layers: list[Item] = []
            if reader is join:
                branches.append((layers, value))
                continue
            inner, end = self.walk(self._layer(reader, value, layers), "", join)
            branches.append((layers + inner, end))
        if join.op_type == "Concat" and branches[0][1] != join.input[0]:
            branches.reverse()  # the branch that ends at the Concat's first input comes first
        kind = "cat" if join.op_type == "Concat" else "sum"
        items.append(ImportedBlock((branches[0][0], branches[1][0]), kind))
        return join.output[0]

    def _joins_from(self, reader) -> set[str]:
        """The joins (by their output) reachable from the node `reader`, itself included."""
        seen: set[str] = set()
        todo = [reader]
        while todo:
            node = todo.pop()
            if node.output[0] in seen:
                continue
            seen.add(node.output[0])
            todo += [n for out in node.output for n in self.readers.get(out, [])]
        return {key for key in seen if self._is_join(self.nodes[key])}

    def _layer(self, node, value: str, items: list[Item]) -> str:
        """Appends the layer of `node` (which reads the data `value`) and returns the value it writes (the
        last of the nodes it took, for a converter that takes a run of them)."""
        convert = CONVERTERS.get(node.op_type)
        if convert is None:
            raise ImportFailure(
                f"node {node_name(node)}: daic has no layer for the ONNX operator {node.op_type} (it reads "
                f"{', '.join(sorted(CONVERTERS))})"
            )
        return convert(self, node, value, items) or node.output[0]


def _sliced_shape(node, dims: list[int]) -> np.ndarray:
    """What a Shape node computes for one input of dimensions `dims` (its start and end attributes)."""
    import numpy as np
    from onnx import helper

    attrs = {a.name: int(helper.get_attribute_value(a)) for a in node.attribute}
    return np.array(dims[attrs.get("start", 0) : attrs.get("end", len(dims))], dtype=np.int64)


def _axis(node) -> int:
    from onnx import helper

    return next((int(helper.get_attribute_value(a)) for a in node.attribute if a.name == "axis"), 0)


def _dims(value) -> list[int | str] | None:
    kind = value.type.tensor_type
    if not kind.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in kind.shape.dim]


def _folded(node, constants: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs of a node of constants only, computed by onnx's reference evaluator (torch 2.5's
    exporter writes a linear layer's weight as Transpose(W)); nothing when it cannot compute them."""
    from onnx.reference import ReferenceEvaluator

    try:
        values = ReferenceEvaluator(node).run(None, {i: constants[i] for i in node.input if i})
    except (
        Exception
    ):  # an operator the evaluator lacks: the node stays computed, and is named if data needs it
        return {}
    return dict(zip(node.output, values, strict=False))


def _constant_value(node) -> np.ndarray:
    import numpy as np
    from onnx import helper, numpy_helper

    for attribute in node.attribute:
        if attribute.name == "value":
            return numpy_helper.to_array(attribute.t)
        return np.asarray(helper.get_attribute_value(attribute))
    raise ImportFailure(f"node {node_name(node)} (Constant) holds no value")
