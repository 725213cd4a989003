"""Hover: a constructor's signature and documentation (`daic doc`), a layer line's shapes and counts
(`daic show`), a let's type and value, a scheme field's or keyword's parameter documentation."""

from __future__ import annotations

import re
from pathlib import Path

from lsprotocol import types as T

from daic.compiler.checking.elaborate import Symbol
from daic.compiler.checking.network import BlockNode, LayerNode, Network, hwc, walk
from daic.compiler.checking.program import Module, SchemeInfo
from daic.compiler.checking.values import UNKNOWN, Built
from daic.compiler.constructors import REGISTRY
from daic.compiler.lsp import scope
from daic.compiler.lsp.cursor import context, followed_by_equals, previous_token, word_at
from daic.compiler.lsp.documents import Analysis
from daic.compiler.lsp.expected import block_decl, call_slots, expected_types, layer_decl
from daic.compiler.lsp.markup import Doc, constructor_doc
from daic.compiler.registry import BLOCK_CATEGORIES, Constructor, Param
from daic.compiler.types import is_subtype
from daic.dsl import ast as A
from daic.dsl.format import broken, flat, layer_text

_SUBSCRIPT = re.compile(r"([A-Za-z]\w*?)_(\d+)")


def hover(analysis: Analysis, offset: int, markup: T.MarkupKind) -> T.Hover | None:
    text = analysis.text
    if context(text, offset, analysis.document.language).where in ("comment", "string"):
        return None  # a word there is prose or a path, not the let or constructor it may spell
    start, end = word_at(text, offset)
    if analysis.document.language == "net":
        doc, span = _net_hover(analysis, offset, start, end)
    else:
        doc, span = _dai_hover(analysis, start, end), (start, end)
    if doc is None:
        return None
    return T.Hover(contents=doc.content(markup), range=analysis.positions.range(*span))


# --- .net ---------------------------------------------------------------------------------------------


def _line_nodes(network: Network | None) -> dict[int, tuple[LayerNode | BlockNode, A.Layer]]:
    """Each layer line (1-based) and the node of the analysis it belongs to."""
    found: dict[int, tuple[LayerNode | BlockNode, A.Layer]] = {}
    for node, _depth in walk(network.nodes if network else []):
        heads = (node.layer,) if isinstance(node, LayerNode) else node.heads
        for head in heads:
            found[head.span.line] = (node, head)
    return found


def shape_summary(node: LayerNode | BlockNode) -> list[str]:
    """A layer's (or block's) shapes, as the listings write them, and its counts, as `daic show` does."""

    def shown(shape) -> str:
        return hwc(shape) if shape is not None else "unknown"

    lines = [f"input {shown(node.in_shape)} → output {shown(node.out_shape)} ([height, width, channels])"]
    if isinstance(node, BlockNode):
        what = "sum of its branches" if node.kind == "sum" else "branches concatenated along the channels"
        lines.append(f"{what}: {shown(node.branch_shapes[0])} and {shown(node.branch_shapes[1])}")
    lines.append(f"neurons {node.neurons:,}, parameters {node.params:,}")
    return lines


def _net_hover(analysis: Analysis, offset: int, start: int, end: int) -> tuple[Doc | None, tuple[int, int]]:
    line, _ = analysis.index.position(offset)
    entry = _line_nodes(analysis.network).get(line)
    word = analysis.text[start:end]
    doc: Doc | None = None
    if entry is not None:
        node, layer = entry
        decl = layer_decl(layer.kind)
        param = next((p for p in layer.params if p.name_span.start <= offset <= p.name_span.end), None)
        if layer.kind_span.start <= offset <= layer.kind_span.end and decl is not None:
            doc = constructor_doc(decl)
        elif param is not None and decl is not None and decl.param(param.name) is not None:
            doc = _param_doc(decl, decl.param(param.name))
        elif word:
            doc = _constructors_doc(word, None)
        summary = Doc().code(layer_text(layer)).items(shape_summary(node))
        if doc is None:
            return summary, (layer.span.start, layer.span.end)
        doc.parts = [*summary.parts, ("text", "---"), *doc.parts]
        return doc, (start, end) if word else (layer.span.start, layer.span.end)
    # A line the parser could not read: still say what the word names.
    if not word:
        return None, (start, end)
    decl = layer_decl(word)
    return (constructor_doc(decl) if decl else _constructors_doc(word, None)), (start, end)


# --- .dai ---------------------------------------------------------------------------------------------


def _dai_hover(analysis: Analysis, start: int, end: int) -> Doc | None:
    text, module = analysis.text, analysis.module
    word = text[start:end]
    if not word:
        return None
    before = previous_token(text, start, "dai")
    after_keyword = before.text if before is not None else None
    if followed_by_equals(text, end) and after_keyword != "let":
        return _keyword_hover(analysis, start, word)
    if after_keyword == "import":
        return _import_hover(module, word)
    if after_keyword == "scheme" and module and word in module.schemes:
        return _scheme_doc(module.schemes[word], module, module)
    if after_keyword == "let" and module and word in module.lets:
        return let_doc(module.lets[word], module.symbols.get(word), module, module)
    reference = module.reference_at(start) if module else None
    if reference is not None and reference.scheme is not None:
        return _scheme_doc(reference.scheme, reference.module, module)
    if reference is not None and reference.let is not None:
        return let_doc(reference.let, reference.symbol, reference.module, module)
    if after_keyword in ("extends", "tunes"):
        return None
    ctx = context(text, start, "dai")
    return _constructors_doc(word, expected_types(ctx))


def _keyword_hover(analysis: Analysis, start: int, word: str) -> Doc | None:
    """The name left of `=`: a scheme field or a call's keyword."""
    ctx = context(analysis.text, start, "dai")
    frame = ctx.innermost
    if frame is None:
        return None
    if frame.opener == "{":
        block = block_decl(ctx)
        param = block.param(word)
        return _param_doc(block, param) if param else None
    if frame.opener == "(" and frame.callee:
        frame.keyword = word
        for slot in call_slots(frame):
            if slot.param is not None:
                return _param_doc(slot.decl, slot.param)
    return None


def _param_doc(decl: Constructor, param: Param) -> Doc:
    owner = f"{decl.name} field" if decl.category in BLOCK_CATEGORIES else f"parameter of {decl.name}"
    details = [f"{'required' if param.required else 'optional'} {owner}"]
    if param.range_text():
        details.append(param.range_text())
    if param.choices:
        details.append("one of " + ", ".join(f'"{c}"' for c in param.choices))
    return Doc().code(param.signature_text()).text(param.doc).text("; ".join(details))


def _constructors_doc(word: str, expected) -> Doc | None:
    decls = REGISTRY.lookup(word)
    match = _SUBSCRIPT.fullmatch(word)
    if not decls and match:
        # `IFGSM_3` is `IFGSM(3)`: the paper's subscript.
        decls = [d for d in REGISTRY.lookup(match.group(1)) if d.params and d.params[0].subscript]
    if not decls:
        return None
    if expected:
        decls.sort(key=lambda d: not any(is_subtype(d.returns, e) for e in expected))
    doc = Doc()
    for i, decl in enumerate(decls):
        if i:
            doc.text("---")
        doc.parts += constructor_doc(decl).parts
    return doc


def _value_text(value: object) -> str | None:
    """A let's value when it says more than its expression: a folded number."""
    if isinstance(value, bool) or value is UNKNOWN or isinstance(value, Built):
        return None
    if isinstance(value, int | float):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return None


def let_doc(let: A.Let, symbol: Symbol | None, owner: Module, here: Module | None) -> Doc:
    """A let as its module writes it, its type and value as the checker found them, and where it is."""
    kind = symbol.type if symbol else "?"
    head = f"let {let.name}: {kind} = "
    lines = broken(let.value, len(head), 0)
    lines[0] = head + lines[0]
    doc = Doc().code("\n".join(lines))
    value = _value_text(symbol.value) if symbol else None
    if value is not None and value != lines[0][len(head) :]:
        doc.text(f"value: {value}")
    if owner is not here and owner.path:
        doc.text(f"defined in {_shown_path(owner.path)}")
    return doc


def _shown_path(path: str) -> str:
    parts = Path(path).parts
    # The shipped library is shown by its place in the package, not by where it is installed.
    if "stdlib" in parts:
        return "/".join(parts[len(parts) - 1 - parts[::-1].index("stdlib") :])
    return Path(path).name


def _scheme_doc(info: SchemeInfo, module: Module, here: Module) -> Doc:
    node = info.node
    head = f"scheme {node.name}" + (f" extends {node.base.dotted}" if node.base else "")
    doc = Doc().code(head)
    if module is not here and module.path:
        doc.text(f"defined in {_shown_path(module.path)}")
    if info.built is not None:
        fields = [f"{k} = {_field_text(info, k)}" for k in sorted(info.explicit)]
        doc.items(fields)
    network = info.network
    if network is not None:
        inp = hwc(network.input_shape) if network.input_shape else "?"
        out = hwc(network.output_shape) if network.output_shape else "?"
        doc.text(
            f"network {Path(info.net_path).name if info.net_path else ''}: input {inp} → output {out}; "
            f"neurons {network.neurons:,}; parameters {network.params:,}"
        )
    return doc


def _field_text(info: SchemeInfo, name: str) -> str:
    own = info.node.get_field(name)
    if own is not None:
        return flat(own.value)
    value = info.built.args.get(name) if info.built else None
    return (value.decl.name if isinstance(value, Built) else repr(value)) + " (inherited)"


def _import_hover(module: Module | None, word: str) -> Doc | None:
    if module is None:
        return None
    for node, imported in scope.imports(module):
        if isinstance(node.target, A.Name) and node.target.dotted == word:
            doc = Doc().code(f"import {word}")
            if imported.path:
                counts = f"{len(imported.lets)} lets, {len(imported.schemes)} schemes"
                doc.text(f"{_shown_path(imported.path)}: {counts}")
            return doc
    return None
