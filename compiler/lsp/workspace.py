"""The source files of the client's workspace folders, for the requests that look past the open documents:
references, rename and workspace symbols.

A folder's sources are those `daic check FOLDER` checks (`sources.sources_under`). Its modules are
checked by one `Program`, so that a module imported by many is checked once, with the open buffers
standing in for their files, and kept until a file they read changes: the first request costs what
`daic check` of the folder costs, the next ones a look at each file's time stamp."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from daic.compiler.checking.program import Module, Program, path_key
from daic.compiler.checking.sources import sources_under
from daic.compiler.lsp.documents import stamp

# A workspace this large is searched in its first files only: the answer stays quick, if partial.
MOST_FILES = 2000


def source_files(roots: Iterable[Path], suffixes: tuple[str, ...] = (".dai", ".net")) -> list[Path]:
    """The first `MOST_FILES` sources under the folders."""
    found: list[Path] = []
    for root in roots:
        found.extend(sources_under(root, suffixes))
        if len(found) >= MOST_FILES:
            return found[:MOST_FILES]
    return found


def texts(roots: Iterable[Path], overlay: Mapping[str, str]) -> list[tuple[str, str]]:
    """Each source of the folders and each open buffer (`overlay`: texts by resolved path) as its resolved
    path and text: the buffer's where one is open, else the file's (an unreadable file is left out)."""
    found = {path_key(p): None for p in source_files(roots)}
    found.update({key: None for key in overlay if key.endswith((".dai", ".net"))})
    read = []
    for key in found:
        text = overlay.get(key)
        if text is None:
            try:
                text = Path(key).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
        read.append((key, text))
    return read


class WorkspaceModules:
    """Every `.dai` module of the folders and of the open buffers, checked, with the modules they import;
    the last answer is kept while the same files are there and each file it read (modules, their
    imports, the networks they name; a buffer's text) reads the same."""

    def __init__(self) -> None:
        self._paths: list[str] = []
        self._stamps: dict[str, object] = {}
        self._modules: list[Module] = []

    def get(self, roots: Iterable[Path], overlay: Mapping[str, str]) -> list[Module]:
        paths = [path_key(p) for p in source_files(roots, (".dai",))]
        paths += sorted(key for key in overlay if key.endswith(".dai") and key not in paths)
        if paths == self._paths and all(stamp(k, overlay) == s for k, s in self._stamps.items()):
            return self._modules
        program = Program(overlay=overlay)
        for path in paths:
            program.load(Path(path))
        self._paths, self._modules = paths, list(program.modules.values())
        self._stamps = {key: stamp(key, overlay) for key in program.consulted}
        return self._modules
