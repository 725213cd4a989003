"""Finding and reading source files: paths from the command line in, decoded text or a diagnostic out."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from daic.dsl import diagnostics as D
from daic.dsl.parser import STATEMENT_START
from daic.dsl.source import LINE_BREAK, LineIndex
from daic.errors import DaicError

LANGUAGES = {".net": "net", ".dai": "dai"}
STDIN = "-"  # the path that names standard input on the command line
STDIN_NAME = "<stdin>"  # how diagnostics name it, when no --stdin-filename gives it a name
# The record `daic run` writes in each run's folder (`commands/run/folder.py`): the .net and .dai files
# beside it are that run's copies of its sources, not sources of the project, and a folder's sources skip
# them (`daic check .` would report every problem again for every run).
RUN_RECORD = "run.json"


class UsageError(DaicError):
    """A command-line mistake (a path that does not exist, a folder with no sources): exit code 2."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=2)


@dataclass(frozen=True)
class Source:
    path: str
    language: str
    text: str
    problem: D.Diagnostic | None = None  # set when the bytes are not text; `text` is then empty


@dataclass(frozen=True)
class Probe:
    """What a path names on the file system: "file", "folder", "other" (a device, a socket), "missing",
    or "unusable" when the system refuses to look it up at all (`reason` says why: a name too long for the
    file system, a loop of symbolic links, a NUL character). Every path a user wrote is looked up through
    `probe`, so that no such refusal escapes as an exception."""

    kind: str
    reason: str = ""


def probe(path: str | os.PathLike) -> Probe:
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return Probe("missing")
    except OSError as exc:
        return Probe("unusable", exc.strerror or str(exc))
    except ValueError:  # os.stat's answer to a NUL in the name
        return Probe("unusable", "the name holds a NUL character")
    if stat.S_ISREG(mode):
        return Probe("file")
    return Probe("folder") if stat.S_ISDIR(mode) else Probe("other")


def language_of(path: str | os.PathLike) -> str | None:
    return LANGUAGES.get(Path(path).suffix)


def discover(paths: list[str]) -> list[str]:
    """Expand files and folders (recursively) into the .net and .dai files they name, in a stable order."""
    found: list[str] = []
    for raw in paths:
        path = Path(raw)
        kind = probe(path)
        if kind.kind == "folder":
            inside = [str(p) for p in sources_under(path)]
            if not inside:
                raise UsageError(f"{raw}: no .net or .dai files in this folder")
            found.extend(inside)
        elif kind.kind == "file":
            if language_of(path) is None:
                raise UsageError(f"{raw}: not a .net or .dai file")
            found.append(str(path))
        elif kind.kind == "other":
            raise UsageError(f"{raw}: not a regular file")
        elif kind.kind == "unusable":
            raise UsageError(f"{raw}: cannot be looked up: {kind.reason}")
        else:
            raise UsageError(f"{raw}: no such file or folder")
    return list(dict.fromkeys(found))


def sources_under(folder: Path, suffixes: tuple[str, ...] = tuple(LANGUAGES)) -> list[Path]:
    """The source files under `folder` (recursively; hidden folders and the runs' folders inside it
    skipped), in a stable order."""
    found: list[Path] = []
    for here, folders, files in os.walk(folder):
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        if RUN_RECORD in files and Path(here) != Path(folder):
            folders[:] = []
            continue
        for name in sorted(files):
            path = Path(here) / name
            if not name.startswith(".") and path.suffix in suffixes and probe(path).kind == "file":
                found.append(path)
    return found


def decode(data: bytes, path: str, language: str) -> Source:
    """Bytes to text; a file that is not UTF-8 text becomes one diagnostic at the first bad byte."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    nul = data.find(b"\x00")
    try:
        if nul >= 0:
            raise UnicodeDecodeError("utf-8", data, nul, nul + 1, "NUL byte")
        return Source(path, language, data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        prefix = data[: exc.start].decode("utf-8", errors="replace")
        index = LineIndex(prefix)
        offset = len(prefix)
        span = index.span(offset, offset)
        what = (
            "a NUL byte (this looks like a binary file)"
            if exc.reason == "NUL byte"
            else (f"byte 0x{data[exc.start]:02x} is not valid UTF-8")
        )
        problem = D.Diagnostic(
            D.ENCODING,
            D.Severity.ERROR,
            f"cannot read as text: {what}",
            span,
            hint="daic reads source files as UTF-8 text",
            path=path,
        )
        return Source(path, language, "", problem)


def sniff_language(text: str) -> str:
    """The language of a text with no file name: a .dai file's first statement begins with `import`, `let`,
    `scheme` or `study`; anything else is read as a network's layers."""
    for line in LINE_BREAK.split(text):
        stripped = line.strip().lstrip("\ufeff")
        if stripped and not stripped.startswith("#"):
            return "dai" if STATEMENT_START.match(stripped) else "net"
    return "dai"


def from_stdin(data: bytes, filename: str | None) -> Source:
    """The source read from standard input (`-`). `filename`, when given, names it in diagnostics, decides
    its language by its suffix, and is where its relative imports and nets are found from."""
    if filename is not None and language_of(filename) is None:
        raise UsageError(f"--stdin-filename {filename}: not a .net or .dai name")
    source = decode(data, filename or STDIN_NAME, "dai")
    language = language_of(filename) if filename else sniff_language(source.text)
    return Source(source.path, language or "dai", source.text, source.problem)


def read(path: str) -> Source:
    try:
        return _read(path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def read_for_check(path: str) -> Source:
    """`read`, but a file that cannot be read is one diagnostic, so that checking a folder goes on."""
    try:
        return _read(path)
    except OSError as exc:
        span = LineIndex("").span(0, 0)
        message = f"cannot read: {exc.strerror or exc}"
        problem = D.Diagnostic(D.UNREADABLE, D.Severity.ERROR, message, span, path=path)
        return Source(path, language_of(path) or "dai", "", problem)


def _read(path: str) -> Source:
    return decode(Path(path).read_bytes(), path, language_of(path) or "dai")
