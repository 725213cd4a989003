"""Networks: from the lines of a `.net` file to a checked structure with a shape on every layer.

`analyze_net` groups branch blocks (ParNet1/ParNet2/ParSum, SkipNet1/SkipNet2/SkipCat), checks every
layer's parameters against the registry, infers shapes from the data set's input (or from the first
`input_shape` annotation), and counts neurons (ReLU outputs) and parameters. The result is what `daic show`
prints, what hover shows and what the lowering builds modules from.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from daic.compiler.checking import codes as C
from daic.compiler.checking.elaborate import Elaborator, renaming
from daic.compiler.checking.values import UNKNOWN, Built
from daic.compiler.constructors import REGISTRY
from daic.compiler.registry import LAYER_CATEGORIES, DatasetFacts, Registry, Shape, ShapeError
from daic.dsl import ast as A
from daic.dsl.diagnostics import Diagnostic, Fix, error, warning

BLOCKS = {"ParNet1": ("ParNet2", "ParSum", "sum"), "SkipNet1": ("SkipNet2", "SkipCat", "cat")}
BLOCK_PARTS = {"ParNet1", "ParNet2", "ParSum", "SkipNet1", "SkipNet2", "SkipCat"}
CLOSERS = {closer for _second, closer, _kind in BLOCKS.values()}


@dataclass
class LayerNode:
    layer: A.Layer
    built: Built | None  # None when the layer's kind is unknown
    in_shape: Shape | None = None
    out_shape: Shape | None = None
    neurons: int = 0
    params: int = 0


@dataclass
class BlockNode:
    kind: str  # "sum" (residual) or "cat" (concatenation)
    heads: tuple[A.Layer, A.Layer, A.Layer]  # ParNet1, ParNet2, ParSum (or the Skip ones)
    branches: tuple[list[Node], list[Node]]
    dim: int = 1
    in_shape: Shape | None = None
    out_shape: Shape | None = None
    branch_shapes: tuple[Shape | None, Shape | None] = (None, None)
    neurons: int = 0
    params: int = 0


Node = LayerNode | BlockNode


@dataclass
class Network:
    nodes: list[Node]
    input_shape: Shape | None
    output_shape: Shape | None
    neurons: int
    params: int
    diagnostics: list[Diagnostic] = field(default_factory=list)


def walk(nodes: list[Node], depth: int = 0) -> Iterator[tuple[Node, int]]:
    for node in nodes:
        yield node, depth
        if isinstance(node, BlockNode):
            for branch in node.branches:
                yield from walk(branch, depth + 1)


def hwc(shape: Shape) -> str:
    """A shape as the listings write it: [H, W, C] for images, [N] for vectors."""
    if len(shape) == 3:
        return f"[{shape[1]}, {shape[2]}, {shape[0]}]"
    return "[" + ", ".join(str(s) for s in shape) + "]"


# A network's layers are fixed; a study chooses among networks through its scheme's `net`.
NET_SPACES = (
    'a layer takes single values (a study chooses among networks with `net = Choice(["a.net", ...])`)'
)


class _Analyzer:
    def __init__(self, registry: Registry, sink: list[Diagnostic]) -> None:
        self.registry = registry
        self.sink = sink
        self.elaborator = Elaborator(registry, sink, spaces=NET_SPACES)

    # --- structure ------------------------------------------------------------------------------------

    def group(self, layers: tuple[A.Layer, ...], end: str = "the end of the file") -> list[Node]:
        """Nodes for a sequence of lines, blocks grouped; `end` says where the sequence ends, for messages."""
        nodes: list[Node] = []
        i = 0
        while i < len(layers):
            layer = layers[i]
            if layer.kind in BLOCKS:
                second, closer, kind = BLOCKS[layer.kind]
                parts = layers[i : i + 3]
                if tuple(p.kind for p in parts) != (layer.kind, second, closer):
                    i += self._broken_block(layer, layers[i + 1 : i + 3], end)
                    continue
                nodes.append(self._block(kind, parts))
                i += 3
                continue
            if layer.kind in BLOCK_PARTS:
                opener = next(k for k, v in BLOCKS.items() if layer.kind in v)
                self.sink.append(
                    error(
                        C.BLOCK_STRUCTURE,
                        f"`{layer.kind}` without the `{opener}` that opens its block",
                        layer.kind_span,
                    )
                )
                i += 1
                continue
            nodes.append(self._layer(layer))
            i += 1
        return nodes

    def _broken_block(self, opener: A.Layer, following: tuple[A.Layer, ...], end: str) -> int:
        """Report a block whose parts are not all there, naming the part missing and where the block began;
        returns how many lines the block took (the lines of block structure that were meant as its parts,
        so that they are not reported again as parts without a block)."""
        second, closer, _kind = BLOCKS[opener.kind]
        expected = (opener.kind, second, closer)
        present = 1 + (1 if following and following[0].kind == second else 0)
        missing = expected[present]
        found = following[present - 1] if len(following) >= present else None
        began = f"the block that `{opener.kind}` opens at line {opener.span.line}"
        if found is None:
            message, span = f"`{missing}` missing at {end}: {began} is not closed", opener.kind_span
        elif missing == closer and found.kind in CLOSERS:
            message = f"`{found.kind}` cannot close {began}: it ends with `{closer}`"
            span = found.kind_span
        else:
            message, span = f"`{missing}` missing before `{found.kind}` ({began})", found.kind_span
        self.sink.append(error(C.BLOCK_STRUCTURE, message, span, hint=f"a block is {' / '.join(expected)}"))
        taken = 1
        for layer in following:
            if layer.kind not in BLOCK_PARTS or layer.kind in BLOCKS:
                break
            taken += 1
        return taken

    def _block(self, kind: str, parts: tuple[A.Layer, ...]) -> BlockNode:
        first, second, closer = parts
        if closer.body:
            self.sink.append(
                error(C.BLOCK_STRUCTURE, f"`{closer.kind}` takes no indented lines", closer.body[0].span)
            )
        built = self._args(closer)
        dim = built.args.get("dim", 1) if built else 1
        return BlockNode(
            kind,
            (first, second, closer),
            tuple(self.group(head.body, f"the end of the `{head.kind}` branch") for head in (first, second)),
            dim if isinstance(dim, int) else 1,
        )

    def _layer(self, layer: A.Layer) -> LayerNode:
        if layer.body:
            self.sink.append(
                error(
                    C.BLOCK_STRUCTURE,
                    f"`{layer.kind}` takes no indented lines",
                    layer.body[0].span,
                    hint="only ParNet1, ParNet2, SkipNet1 and SkipNet2 have branches",
                )
            )
        return LayerNode(layer, self._args(layer))

    def _args(self, layer: A.Layer) -> Built | None:
        decl = self.registry.layer(layer.kind)
        if decl is None:
            hint, fix = renaming(layer.kind, layer.kind_span, self.registry.names(*LAYER_CATEGORIES))
            message = f"unknown layer `{layer.kind}`"
            self.sink.append(error(C.UNKNOWN_LAYER, message, layer.kind_span, hint, fix))
            return None
        bound = self.elaborator.bind(decl, layer, (), layer.params, what="parameter")
        return self.elaborator.build(decl, bound, layer.kind_span, layer, what="parameter")

    # --- shapes ---------------------------------------------------------------------------------------

    def infer(self, nodes: list[Node], shape: Shape | None) -> tuple[Shape | None, int, int]:
        """Shapes through `nodes` from `shape`; returns the output shape, neurons and parameters."""
        neurons = params = 0
        for node in nodes:
            if isinstance(node, BlockNode):
                shape = self._infer_block(node, shape)
            else:
                shape = self._infer_layer(node, shape)
            neurons += node.neurons
            params += node.params
        return shape, neurons, params

    def _annotation(self, node: LayerNode, shape: Shape | None) -> Shape | None:
        if node.built is None:
            return shape
        annotated = node.built.args.get("input_shape")
        if not isinstance(annotated, tuple) or not all(isinstance(v, int) for v in annotated):
            return shape
        param = node.layer.param("input_shape")
        where = param.value.span if param else node.layer.span
        if len(annotated) not in (1, 3):
            message = (
                f"input_shape has {len(annotated)} values; it is [height, width, channels] or [features]"
            )
            self.sink.append(error(C.ANNOTATION, message, where))
            return shape
        declared = (annotated[2], annotated[0], annotated[1]) if len(annotated) == 3 else tuple(annotated)
        if shape is not None and declared != shape and math.prod(declared) != 0:
            message = f"input_shape {hwc(declared)} disagrees with the inferred shape {hwc(shape)}"
            hint = f"the layers before produce {hwc(shape)} ([height, width, channels])"
            fix = Fix(f"Replace input_shape by the inferred shape {hwc(shape)}", where, hwc(shape))
            self.sink.append(error(C.ANNOTATION, message, where, hint=hint, fix=fix))
            return shape
        return declared if shape is None else shape

    def _infer_layer(self, node: LayerNode, shape: Shape | None) -> Shape | None:
        shape = self._annotation(node, shape)
        node.in_shape = shape
        built = node.built
        if shape is None or built is None or any(v is UNKNOWN for v in built.args.values()):
            node.out_shape = None
            return None
        decl, facts = built.decl, built.decl.layer
        try:
            out = facts.shape(shape, built.args)
            node.params = facts.count_params(shape, built.args) if facts.count_params else 0
        except ShapeError as exc:
            param = node.layer.param(exc.param) if exc.param else None
            self.sink.append(
                error(
                    C.SHAPE,
                    f"`{decl.name}` cannot take input {hwc(shape)}: {exc}",
                    param.span if param else node.layer.kind_span,
                )
            )
            node.out_shape = None
            return None
        node.out_shape = out
        node.neurons = math.prod(out) if facts.neurons else 0
        self._abstract_size(node, shape)
        return out

    def _abstract_size(self, node: LayerNode, shape: Shape) -> None:
        name = node.built.decl.layer.correlates
        value = node.built.args.get(name) if name else None
        size = math.prod(shape)
        if isinstance(value, int) and value > size:
            param = node.layer.param(name)
            self.sink.append(
                warning(
                    C.ABSTRACT_SIZE,
                    f"{name}={value} is more than the {size} dimensions of the layer before",
                    param.span if param else node.layer.span,
                    hint=f"all {size} dimensions will be correlated",
                )
            )

    def _infer_block(self, node: BlockNode, shape: Shape | None) -> Shape | None:
        node.in_shape = shape
        outs = []
        for branch in node.branches:
            out, neurons, params = self.infer(branch, shape)
            outs.append(out)
            node.neurons += neurons
            node.params += params
        node.branch_shapes = (outs[0], outs[1])
        first, second = outs
        node.out_shape = None if first is None or second is None else self._joined(node, first, second)
        return node.out_shape

    def _joined(self, node: BlockNode, first: Shape, second: Shape) -> Shape | None:
        """The shape the block's closer makes of its branches' (their sum, or their channels joined), or
        None with the error saying why they do not fit."""
        closer = node.heads[2]
        if node.kind == "sum":
            if first == second:
                return first
            self.sink.append(
                error(
                    C.BRANCH_SHAPES,
                    f"cannot sum branches of shapes {hwc(first)} and {hwc(second)}",
                    closer.kind_span,
                    hint="both branches of a residual block must produce the same shape",
                )
            )
            return None
        if len(first) == 3 and len(second) == 3 and first[1:] == second[1:]:
            return (first[0] + second[0], first[1], first[2])
        images = len(first) == 3 and len(second) == 3
        self.sink.append(
            error(
                C.BRANCH_SHAPES,
                f"cannot concatenate branches of shapes {hwc(first)} and {hwc(second)} along the channels",
                closer.kind_span,
                hint="the branches must agree in height and width"
                if images
                else f"`{closer.kind}` joins the channels of images ([height, width, channels]); "
                "a branch that ends in a vector has none",
            )
        )
        return None

    # --- TAPS: one split of the network, on its main path, only while training ----------------------------

    def check_taps(self, nodes: list[Node]) -> None:
        """TAPS splits the network once into a feature extractor and a classifier: refuse a second one, one
        inside a branch (where the layers after it are no classifier of the whole network's output), and
        one that would run at test time (its margins are estimates, not bounds)."""
        first: A.Layer | None = None
        for node, where in _layers_with_heads(nodes):
            if node.built is None or node.built.decl.name != "TAPS":
                continue
            if node.built.args.get("only_train") is False:
                param = node.layer.param("only_train")
                self.sink.append(
                    error(
                        C.TAPS_ONLY_TRAIN,
                        "`TAPS` with only_train=False would act at test time, "
                        "where its margins would be read as bounds",
                        param.span if param else node.layer.kind_span,
                        hint="TAPS's bounds are estimates, not bounds: it may only shape training",
                    )
                )
            if not self._taps_misplaced(node.layer, where, first):
                first = node.layer

    def _taps_misplaced(self, layer: A.Layer, where, first: A.Layer | None) -> bool:
        """Reports a TAPS layer inside a block's branch (`where`: its head and opener), or after the one
        that already split the network (`first`); whether it was either."""
        if where is not None:
            head, opener = where
            message = f"`TAPS` inside the `{head.kind}` branch of the block at line {opener.span.line}"
            hint = "TAPS splits the whole network: put it on the main path, before or after the block"
        elif first is not None:
            message = f"a second `TAPS` layer: the network is already split at line {first.span.line}"
            hint = "TAPS splits a network once, into a feature extractor and a classifier; keep one"
        else:
            return False
        self.sink.append(error(C.TAPS_PLACEMENT, message, layer.kind_span, hint=hint))
        return True

    # --- a pooling layer without its kernel: a later annotation may tell ----------------------------------

    def explain_missing_kernels(self, nodes: list[Node]) -> None:
        """Give each 'missing kernel_size' a hint: the kernel that the next input_shape annotation implies,
        if one does (the paper's DenseNet-100 listing prints AvgPool2D without its kernel)."""
        flat = [n for n, _ in walk(nodes)]
        for index, node in enumerate(flat):
            if not (
                isinstance(node, LayerNode)
                and node.built
                and node.built.args.get("kernel_size") is UNKNOWN
                and node.layer.param("kernel_size") is None
            ):
                continue
            for k, d in enumerate(self.sink):
                if d.code == C.MISSING and d.span == node.layer.kind_span and "`kernel_size`" in d.message:
                    self.sink[k] = error(C.MISSING, d.message, d.span, self._kernel_hint(flat, index))

    @staticmethod
    def _kernel_hint(flat: list[Node], index: int) -> str:
        before = flat[index - 1].out_shape if index > 0 else None
        after = next(
            (
                n
                for n in flat[index + 1 :]
                if isinstance(n, LayerNode) and n.built and isinstance(n.built.args.get("input_shape"), tuple)
            ),
            None,
        )
        if before is not None and len(before) == 3 and after is not None:
            target = after.built.args["input_shape"][0]
            for padding in (1, 0):
                for kernel in range(1, before[1] + 2 * padding + 1):
                    if (before[1] + 2 * padding - kernel) // kernel + 1 == target:
                        shown = "[" + ", ".join(str(v) for v in after.built.args["input_shape"]) + "]"
                        return (
                            f"the next input_shape annotation ({shown}) implies "
                            f"kernel_size=[{kernel}, {kernel}] with padding={padding}; write it out"
                        )
        return "give kernel_size (and padding); no later input_shape annotation implies it"


def _layers_with_heads(
    nodes: list[Node], where: tuple[A.Layer, A.Layer] | None = None
) -> Iterator[tuple[LayerNode, tuple[A.Layer, A.Layer] | None]]:
    """Every layer in order, with where it lies: None on the main path, else the head of the outermost
    branch it is in and the line that opens that branch's block."""
    for node in nodes:
        if isinstance(node, LayerNode):
            yield node, where
            continue
        for head, branch in zip(node.heads[:2], node.branches, strict=True):
            yield from _layers_with_heads(branch, where or (head, node.heads[0]))


def _leading_annotation(nodes: list[Node]) -> Shape | None:
    """The network's input, read off the first input_shape annotation when only layers that keep their
    input's shape (Normalize, abstract layers, ...) come before it."""
    for node in nodes:
        if not isinstance(node, LayerNode) or node.built is None:
            return None
        annotated = node.built.args.get("input_shape")
        if (
            isinstance(annotated, tuple)
            and len(annotated) in (1, 3)
            and all(isinstance(v, int) and v > 0 for v in annotated)
        ):
            return (annotated[2], annotated[0], annotated[1]) if len(annotated) == 3 else tuple(annotated)
        if node.built.decl.layer.resizes:
            return None
    return None


def analyze_for_data(tree: A.NetFile, data: DatasetFacts | None) -> Network:
    """Check a parsed `.net` file against the data set it will run on (None: its own annotations only)."""
    return analyze_net(tree, data.shape, data.classes) if data else analyze_net(tree)


def analyze_net(
    tree: A.NetFile,
    input_shape: Shape | None = None,
    classes: int | None = None,
    registry: Registry = REGISTRY,
) -> Network:
    """Check a parsed `.net` file; `input_shape` (C, H, W) and `classes` come from a scheme's data set."""
    sink: list[Diagnostic] = []
    analyzer = _Analyzer(registry, sink)
    nodes = analyzer.group(tree.layers)
    if not tree.layers:
        sink.append(warning(C.EMPTY_NET, "the network has no layers", tree.span))
    if input_shape is None:
        input_shape = _leading_annotation(nodes)
    first_known = input_shape
    out, neurons, params = analyzer.infer(nodes, input_shape)
    if first_known is None:
        first_known = next((n.in_shape for n, _ in walk(nodes) if n.in_shape is not None), None)
    analyzer.explain_missing_kernels(nodes)
    analyzer.check_taps(nodes)
    if classes is not None and out is not None and out != (classes,):
        # An empty network "ends" with its input: still no classifier, and nothing to point at but the file.
        where = tree.layers[-1].kind_span if tree.layers else tree.span
        sink.append(
            error(
                C.CLASS_COUNT,
                f"the network ends with shape {hwc(out)}, but the data set has {classes} classes",
                where,
                hint=f"end with `Linear out={classes}`",
            )
        )
    return Network(nodes, first_known, out, neurons, params, sink)
