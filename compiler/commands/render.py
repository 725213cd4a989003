"""Diagnostics as text for people and CI logs, and as JSON, SARIF and workflow annotations for tools.

`RENDERERS` holds one function per `daic check --format`, each turning the diagnostics of a check into the
whole of what goes to standard output; a new format is one function there. The language server has its own
small converter; all of them read the same `Diagnostic` data.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from daic.dsl.diagnostics import Code, Diagnostic
from daic.dsl.source import LineIndex
from daic.version import __version__

# The source text of a diagnostic's file, for the formats that show the line (None: not shown).
IndexOf = Callable[[Diagnostic], LineIndex | None]
Renderer = Callable[[Sequence[Diagnostic], IndexOf], str]


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


def text(diagnostics: Sequence[Diagnostic], index_of: IndexOf) -> str:
    """Each diagnostic with its source line underlined and its hint, a blank line after each."""
    return "".join(as_text(d, index_of(d)) + "\n\n" for d in diagnostics)


def concise(diagnostics: Sequence[Diagnostic], index_of: IndexOf) -> str:
    """One line per diagnostic, and its hint on the next."""
    return "".join(as_text(d, None) + "\n" for d in diagnostics)


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


def json_list(diagnostics: Sequence[Diagnostic], index_of: IndexOf) -> str:
    """A JSON list, one object per diagnostic (`path`, `line`, `column`, ..., `code`, `message`, `hint`)."""
    return as_json(diagnostics) + "\n"


SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _message(d: Diagnostic) -> str:
    return d.message + (f"\nhint: {d.hint}" if d.hint else "")


def _uri(path: str | None) -> str:
    """An artifact's URI: relative paths stay relative (code scanning resolves them against the checkout)."""
    if path is None:
        return "<stdin>"
    return Path(path).as_uri() if Path(path).is_absolute() else Path(path).as_posix()


def sarif(diagnostics: Sequence[Diagnostic], index_of: IndexOf) -> str:
    """A SARIF 2.1.0 log (GitHub code scanning and other static-analysis viewers): one run of daic, a rule
    for each code reported, a result for each diagnostic. Columns count code points, as daic's do."""
    codes: dict[str, Code] = {d.code.id: d.code for d in diagnostics}
    rules = sorted(codes)
    results = [
        {
            "ruleId": d.code.id,
            "ruleIndex": rules.index(d.code.id),
            "level": "error" if d.is_error else "warning",
            "message": {"text": _message(d)},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": _uri(d.path)},
                        "region": {
                            "startLine": d.span.line,
                            "startColumn": d.span.column,
                            "endLine": d.span.end_line,
                            "endColumn": d.span.end_column,
                        },
                    }
                }
            ],
        }
        for d in diagnostics
    ]
    driver = {
        "name": "daic",
        "version": __version__,
        "rules": [{"id": c, "shortDescription": {"text": codes[c].summary}} for c in rules],
    }
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{"tool": {"driver": driver}, "columnKind": "unicodeCodePoints", "results": results}],
    }
    return json.dumps(log, indent=2) + "\n"


def _workflow_escape(value: str, *, in_property: bool = False) -> str:
    """GitHub's escaping for workflow commands: `%`, line breaks, and in properties also `:` and `,`."""
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return value.replace(":", "%3A").replace(",", "%2C") if in_property else value


def github(diagnostics: Sequence[Diagnostic], index_of: IndexOf) -> str:
    """GitHub Actions workflow commands (`::error file=...,line=...::message`): a workflow step that runs
    `daic check --format github` shows each problem on its line of the pull request's diff."""
    lines = []
    for d in diagnostics:
        properties = {
            "file": d.path or "<stdin>",
            "line": d.span.line,
            "endLine": d.span.end_line,
            "col": d.span.column,
            "endColumn": d.span.end_column,
            "title": f"daic {d.code.id}",
        }
        shown = ",".join(f"{k}={_workflow_escape(str(v), in_property=True)}" for k, v in properties.items())
        level = "error" if d.is_error else "warning"
        lines.append(f"::{level} {shown}::{_workflow_escape(_message(d))}\n")
    return "".join(lines)


RENDERERS: dict[str, Renderer] = {
    "text": text,
    "concise": concise,
    "json": json_list,
    "sarif": sarif,
    "github": github,
}
