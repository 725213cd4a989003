"""Quick fixes where the fix is certain: an `input_shape` annotation that disagrees with the inferred shape
(E131) becomes the inferred one; an unknown name, layer or keyword (E101, E102, E103) whose hint says
"did you mean `X`?" becomes X."""

from __future__ import annotations

import re

from lsprotocol import types as T

from daic.compiler import codes as C
from daic.compiler.network import LayerNode, hwc, walk
from daic.dsl.diagnostics import Diagnostic

from .diagnostics import to_lsp
from .documents import Analysis

_DID_YOU_MEAN = re.compile(r"did you mean `([^`]+)`\?")
_RENAMES = {C.UNKNOWN_NAME.id, C.UNKNOWN_LAYER.id, C.UNKNOWN_KEYWORD.id}


def code_actions(analysis: Analysis, start: int, end: int) -> list[T.CodeAction]:
    actions = []
    for diagnostic in analysis.report.diagnostics:
        span = diagnostic.span
        if span.end < start or span.start > end:
            continue
        fix = _fix(analysis, diagnostic)
        if fix is None:
            continue
        title, new_text = fix
        edit = T.TextEdit(analysis.positions.span_range(span), new_text)
        actions.append(
            T.CodeAction(
                title=title,
                kind=T.CodeActionKind.QuickFix,
                diagnostics=[to_lsp(diagnostic, analysis.positions)],
                is_preferred=True,
                edit=T.WorkspaceEdit(changes={analysis.document.uri: [edit]}),
            )
        )
    return actions


def _fix(analysis: Analysis, diagnostic: Diagnostic) -> tuple[str, str] | None:
    if diagnostic.code.id == C.ANNOTATION.id:
        inferred = inferred_input_shape(analysis, diagnostic)
        return (f"Replace input_shape by the inferred shape {inferred}", inferred) if inferred else None
    if diagnostic.code.id in _RENAMES and diagnostic.hint:
        match = _DID_YOU_MEAN.search(diagnostic.hint)
        if match is None:
            return None
        written = analysis.text[diagnostic.span.start : diagnostic.span.end]
        suggestion = match.group(1)
        if "." in written and "." not in suggestion:
            # `goals.Basline`: the checker suggests the name inside the module; keep the qualifier.
            suggestion = written.rsplit(".", 1)[0] + "." + suggestion
        return f"Replace `{written}` by `{suggestion}`", suggestion
    return None


def inferred_input_shape(analysis: Analysis, diagnostic: Diagnostic) -> str | None:
    """The shape the layers before an annotation produce, as the annotation writes it ([H, W, C])."""
    network = analysis.network
    for node, _depth in walk(network.nodes if network else []):
        if not isinstance(node, LayerNode) or node.in_shape is None:
            continue
        param = node.layer.param("input_shape")
        if param is not None and param.value.span == diagnostic.span:
            return hwc(node.in_shape)
    return None
