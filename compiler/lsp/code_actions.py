"""Quick fixes: the repairs the checker is sure of, which it attaches to its diagnostics (`Diagnostic.fix`:
an unknown name, layer or keyword replaced by the close one it suggests; an `input_shape` annotation that
disagrees with the inferred shape replaced by that shape). The server only turns them into edits."""

from __future__ import annotations

from lsprotocol import types as T

from daic.compiler.lsp.diagnostics import to_lsp
from daic.compiler.lsp.documents import Analysis


def code_actions(analysis: Analysis, start: int, end: int) -> list[T.CodeAction]:
    actions = []
    for diagnostic in analysis.report.diagnostics:
        fix = diagnostic.fix
        if fix is None or diagnostic.span.end < start or diagnostic.span.start > end:
            continue
        edit = T.TextEdit(analysis.positions.span_range(fix.span), fix.text)
        actions.append(
            T.CodeAction(
                title=fix.title,
                kind=T.CodeActionKind.QuickFix,
                diagnostics=[to_lsp(diagnostic, analysis.positions)],
                is_preferred=True,
                edit=T.WorkspaceEdit(changes={analysis.document.uri: [edit]}),
            )
        )
    return actions
