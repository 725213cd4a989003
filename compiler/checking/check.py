"""The checking pipeline for one file: read, parse, and (as the compiler grows) resolve and type-check.
Every phase reports into the same list of diagnostics."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from lark.exceptions import VisitError

from daic.compiler.checking import codes as C
from daic.compiler.checking.network import Network, analyze_net
from daic.compiler.checking.program import Module, Program
from daic.compiler.checking.sources import Source, read_for_check
from daic.dsl import diagnostics as D
from daic.dsl.parser import ParseResult, parse
from daic.dsl.source import LineIndex


@dataclass(frozen=True)
class FileReport:
    source: Source
    diagnostics: tuple[D.Diagnostic, ...]
    parsed: ParseResult | None
    network: Network | None = None  # for a .net file: its layers with shapes
    module: Module | None = None  # for a .dai file: its lets and schemes, elaborated

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


def check_source(
    source: Source, program: Program | None = None, previous: FileReport | None = None
) -> FileReport:
    """Every phase of the compiler, one after the other, into one list of diagnostics. `previous`, the
    report of the last check of the same document (the language server's), lends what did not change."""
    if source.problem is not None:
        return FileReport(source, (source.problem,), None)
    try:
        with _collector_paused():
            return _check(source, program, previous)
    except (RecursionError, VisitError) as exc:
        if isinstance(exc, VisitError) and not isinstance(exc.orig_exc, RecursionError):
            raise
        # The parser bounds brackets and operator chains, but lets defined through hundreds of later lets,
        # or hundreds of files importing each other in a line, still recurse past Python's limit.
        problem = D.error(
            D.NESTING_TOO_DEEP,
            "this file's definitions or imports chain too deeply to check (hundreds of levels)",
            LineIndex(source.text).span(0, 0),
            hint="define lets before the lets that use them, and shorten chains of imports",
        )
        return FileReport(source, (replace(problem, path=source.path),), None)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector paused for a check. A check allocates a great many objects that all live on
    (syntax trees, values), which the collector would otherwise walk again and again to no end: on a file
    of 20,000 lets that was a third of the time. Reference counting still frees what a check drops."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _check(source: Source, program: Program | None, previous: FileReport | None) -> FileReport:
    if source.language == "net":
        last = previous.parsed.pieces if previous is not None and previous.parsed else None
        parsed = parse(source.text, "net", last)
        network = analyze_net(parsed.tree)
        found = network.diagnostics
        if any(d.is_error for d in parsed.diagnostics):  # lines that do not parse may be its layers
            found = tuple(d for d in found if d.code is not C.EMPTY_NET)
        return FileReport(source, _sorted(source, (*parsed.diagnostics, *found)), parsed, network=network)
    last_module = previous.module if previous is not None else None
    module = (program or Program()).check_text(source.text, source.path, last_module)
    return FileReport(source, _sorted(source, module.diagnostics), module.parsed, module=module)


def _sorted(source: Source, diagnostics) -> tuple[D.Diagnostic, ...]:
    unique = {(d.span, d.code.id, d.message): replace(d, path=source.path) for d in diagnostics}
    return tuple(sorted(unique.values(), key=lambda d: (d.span.start, d.code.id)))


def check_path(path: str, program: Program | None = None) -> FileReport:
    return check_source(read_for_check(path), program)
