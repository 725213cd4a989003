"""Diagnostics: the compiler's, converted to the protocol's, unchanged in code, span, message and hint."""

from __future__ import annotations

from lsprotocol import types as T

from daic.compiler.lsp.documents import Analysis
from daic.compiler.lsp.positions import PositionMap
from daic.dsl import diagnostics as D

SOURCE = "daic"


def to_lsp(diagnostic: D.Diagnostic, positions: PositionMap) -> T.Diagnostic:
    # The hint goes into the message as `daic check --format concise` prints it (editors show only the
    # message), and into `data`, where code actions find the suggestion again.
    message = diagnostic.message + (f"\nhint: {diagnostic.hint}" if diagnostic.hint else "")
    return T.Diagnostic(
        range=positions.span_range(diagnostic.span),
        message=message,
        severity=T.DiagnosticSeverity.Error if diagnostic.is_error else T.DiagnosticSeverity.Warning,
        code=diagnostic.code.id,
        source=SOURCE,
        data={"hint": diagnostic.hint} if diagnostic.hint else None,
    )


def lsp_diagnostics(analysis: Analysis) -> list[T.Diagnostic]:
    return [to_lsp(d, analysis.positions) for d in analysis.report.diagnostics]
