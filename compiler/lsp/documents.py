"""One open document, checked by the compiler: the text, what `daic check` makes of it, and positions.

Every feature reads an `Analysis`; none parses or checks on its own. Analyses are cached per document and
text, so a hover after a keystroke reuses the check that the diagnostics already paid for.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from daic.compiler.checking.check import FileReport, check_source
from daic.compiler.checking.network import Network
from daic.compiler.checking.program import Module, Program, path_key
from daic.compiler.checking.sources import Source, language_of
from daic.compiler.lsp.positions import UTF16, PositionMap
from daic.dsl import ast as A
from daic.dsl.source import LineIndex


@dataclass(frozen=True)
class Document:
    uri: str
    path: str  # a filesystem path; for a buffer that is no file, a name in the working directory
    language: str  # "net" or "dai"
    text: str
    is_file: bool = True


def language_for(path: str, language_id: str | None = None) -> str:
    """The file's suffix decides; an editor's language id decides for buffers without one."""
    by_suffix = language_of(path)
    if by_suffix is not None:
        return by_suffix
    return "net" if language_id and "net" in language_id.lower() else "dai"


def document_for(uri: str, text: str, fs_path: str | None, language_id: str | None = None) -> Document:
    if fs_path:
        path, is_file = fs_path, True
    else:
        # An untitled buffer: relative imports and nets are looked up from the working directory.
        name = uri.rsplit("/", 1)[-1].rsplit(":", 1)[-1] or "untitled"
        path, is_file = os.path.join(os.getcwd(), name), False
    return Document(uri, path, language_for(path, language_id), text, is_file)


@dataclass
class Analysis:
    document: Document
    report: FileReport
    positions: PositionMap

    @property
    def text(self) -> str:
        return self.document.text

    @property
    def index(self) -> LineIndex:
        return self.positions.index

    @property
    def tree(self) -> A.NetFile | A.DaiFile | None:
        return self.report.parsed.tree if self.report.parsed else None

    @property
    def network(self) -> Network | None:
        return self.report.network

    @property
    def module(self) -> Module | None:
        return self.report.module


@dataclass
class _ImportCache:
    """Modules a .dai document imported last time, reused while none of the files read to check them (the
    modules, their imports, the networks their schemes name) changed: checking `import stdlib.schemes`
    from scratch on every keystroke would re-check every network it names."""

    modules: dict[str, Module] = field(default_factory=dict)
    stamps: dict[str, object] = field(default_factory=dict)

    def valid(self, overlay: Mapping[str, str]) -> bool:
        return all(stamp(path, overlay) == was for path, was in self.stamps.items())


def stamp(path: str, overlay: Mapping[str, str]) -> object:
    """What a file read as: an open buffer's text, else the file's modification time."""
    if path in overlay:
        return ("buffer", overlay[path])
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def check_document(
    document: Document,
    cache: _ImportCache | None = None,
    overlay: Mapping[str, str] | None = None,
    previous: FileReport | None = None,
) -> tuple[FileReport, _ImportCache]:
    """What `daic check` reports for this text, plus the imported modules to reuse next time. `overlay`
    holds the other open buffers' texts by resolved path: they stand in for their files, saved or not.
    `previous` is this document's last report: the pieces and lets that did not change are taken from it
    (and its syntax tree's spans move to the new text: it is no longer the report of the old one)."""
    overlay = overlay or {}
    source = Source(document.path, document.language, document.text)
    if document.language == "net":
        return check_source(source, previous=previous), _ImportCache()
    own = path_key(Path(document.path))
    program = Program(overlay=overlay)
    reused = cache is not None and cache.valid(overlay)
    if reused:
        program.modules.update({k: m for k, m in cache.modules.items() if k != own})
    report = check_source(source, program, previous)
    if program.cycles:
        # A cached module would skip the loading that finds a cycle; check cyclic imports afresh each time.
        return report, _ImportCache()
    modules = {k: m for k, m in program.modules.items() if k != own}
    # The networks the imported schemes name count too: a fixed .net changes what its importers report.
    # A reused module is not checked again, so the files it read come from the cache it came from.
    stamps = dict(cache.stamps) if reused else {}
    stamps.update({k: stamp(k, overlay) for k in program.consulted - {own}})
    return report, _ImportCache(modules, stamps)


class Analyses:
    """The latest analysis of each open document, keyed by URI and recomputed only when the text changes."""

    def __init__(self) -> None:
        self._latest: dict[str, Analysis] = {}
        self._imports: dict[str, _ImportCache] = {}
        self._forgotten: dict[str, FileReport] = {}  # reports of analyses `clear` dropped, to reuse from

    def get(
        self, document: Document, encoding: str = UTF16, overlay: Mapping[str, str] | None = None
    ) -> Analysis:
        overlay = overlay or {}
        cached = self._latest.get(document.uri)
        imports = self._imports.get(document.uri)
        # Still current: the same text, and every file it read reads the same (an edited buffer does not).
        if cached is not None and cached.document == document and (imports is None or imports.valid(overlay)):
            if cached.positions.encoding != encoding:
                cached = Analysis(document, cached.report, PositionMap(cached.positions.index, encoding))
                self._latest[document.uri] = cached
            return cached
        # The new check moves the spans of the pieces it takes from the last one: that analysis is stale.
        self._latest.pop(document.uri, None)
        forgotten = self._forgotten.pop(document.uri, None)
        previous = cached.report if cached is not None else forgotten
        report, imports = check_document(document, imports, overlay, previous)
        self._imports[document.uri] = imports
        analysis = Analysis(document, report, PositionMap(report.index, encoding))
        self._latest[document.uri] = analysis
        return analysis

    def clear(self) -> None:
        """Forget every analysis (a file on disk changed: imports and nets may read differently now). Their
        reports still lend their unchanged pieces and lets to the next check, which verifies what each
        let used."""
        self._forgotten.update({uri: analysis.report for uri, analysis in self._latest.items()})
        self._latest.clear()

    def forget(self, uri: str) -> None:
        self._latest.pop(uri, None)
        self._imports.pop(uri, None)
        self._forgotten.pop(uri, None)
