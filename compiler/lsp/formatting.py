"""Whole-document formatting: `daic fmt`'s canonical form, offered only for text that parses."""

from __future__ import annotations

from lsprotocol import types as T

from daic.compiler.check import parse_source
from daic.compiler.sources import Source
from daic.dsl.format import format_tree

from .documents import Analysis


def format_document(analysis: Analysis) -> list[T.TextEdit]:
    document = analysis.document
    # What `daic fmt` does: only the syntax decides, and a file with syntax errors is left alone.
    report = parse_source(Source(document.path, document.language, document.text))
    if report.has_errors or report.parsed is None:
        return []
    formatted = format_tree(report.parsed.tree)
    if formatted == document.text:
        return []
    return [T.TextEdit(analysis.positions.range(0, len(document.text)), formatted)]
