"""The checking pipeline for one file: read, parse, and (as the compiler grows) resolve and type-check.
Every phase reports into the same list of diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, replace

from daic.dsl import diagnostics as D
from daic.dsl.parser import ParseResult, parse
from daic.dsl.source import LineIndex

from .sources import Source, read


@dataclass(frozen=True)
class FileReport:
    source: Source
    diagnostics: tuple[D.Diagnostic, ...]
    parsed: ParseResult | None

    @property
    def index(self) -> LineIndex:
        return self.parsed.index if self.parsed else LineIndex(self.source.text)

    @property
    def has_errors(self) -> bool:
        return any(d.is_error for d in self.diagnostics)


def parse_source(source: Source) -> FileReport:
    """Only the syntax: what `daic fmt` needs."""
    if source.problem is not None:
        return FileReport(source, (source.problem,), None)
    parsed = parse(source.text, source.language)
    return FileReport(source, _sorted(source, parsed.diagnostics), parsed)


def check_source(source: Source) -> FileReport:
    """Every phase the compiler has, one after the other, into one list of diagnostics."""
    return parse_source(source)


def _sorted(source: Source, diagnostics) -> tuple[D.Diagnostic, ...]:
    found = [replace(d, path=source.path) for d in diagnostics]
    found.sort(key=lambda d: (d.span.start, d.code.id))
    return tuple(found)


def check_path(path: str) -> FileReport:
    return check_source(read(path))
