"""Diagnostics as text (for people and CI logs) and JSON (for tools). The language server has its own
small converter; all of them read the same `Diagnostic` data."""

from __future__ import annotations

import json
from collections.abc import Iterable

from daic.dsl.diagnostics import Diagnostic
from daic.dsl.source import LineIndex


def header(d: Diagnostic) -> str:
    """`path:line:col: error[CODE]: message`, the line every editor and CI log understands."""
    return f"{d.path}:{d.span.line}:{d.span.column}: {d.severity.value}[{d.code.id}]: {d.message}"


def snippet(d: Diagnostic, index: LineIndex) -> list[str]:
    """The source line with the span underlined (only its first line when it spans several)."""
    text = index.line_text(d.span.line)
    if not text.strip():
        return []
    shown = text.replace("\t", " ")
    width = (d.span.end_column if d.span.end_line == d.span.line else len(text) + 1) - d.span.column
    gutter = str(d.span.line)
    pad = " " * len(gutter)
    marker = " " * (d.span.column - 1) + "^" * max(1, width)
    return [f" {gutter} | {shown}", f" {pad} | {marker}"]


def as_text(d: Diagnostic, index: LineIndex | None, *, show_source: bool = True) -> str:
    lines = [header(d)]
    if show_source and index is not None:
        lines.extend(snippet(d, index))
    if d.hint:
        lines.append(f"  hint: {d.hint}")
    return "\n".join(lines)


def as_json(diagnostics: Iterable[Diagnostic]) -> str:
    return json.dumps(
        [
            {
                "path": d.path,
                "line": d.span.line,
                "column": d.span.column,
                "end_line": d.span.end_line,
                "end_column": d.span.end_column,
                "severity": d.severity.value,
                "code": d.code.id,
                "message": d.message,
                "hint": d.hint,
            }
            for d in diagnostics
        ],
        indent=2,
    )
