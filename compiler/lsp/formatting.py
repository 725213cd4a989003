"""Whole-document formatting: `daic fmt`'s canonical form, offered only for text that parses."""

from __future__ import annotations

from lsprotocol import types as T

from daic.compiler.lsp.documents import Analysis
from daic.dsl.format import format_tree
from daic.dsl.parser import parse


def format_document(analysis: Analysis) -> list[T.TextEdit]:
    document = analysis.document
    # What `daic fmt` does: only the syntax decides, and a file with syntax errors is left alone. The
    # analysis' own parse says both (no second parse of a large document), unless the check stopped
    # before it had one (definitions chained too deeply to check).
    parsed = analysis.report.parsed or parse(document.text, document.language)
    if not parsed.ok:
        return []
    formatted = format_tree(parsed.tree)
    if formatted == document.text:
        return []
    return [T.TextEdit(analysis.positions.range(0, len(document.text)), formatted)]
