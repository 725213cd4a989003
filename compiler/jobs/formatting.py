"""`daic fmt`'s work: a source's canonical form, the patch from it to that form, and the rewrite in place
(atomic, through symbolic links). Formatting needs only a syntax tree; meaning is `daic check`'s business."""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from daic.compiler.checking.check import FileReport, parse_source
from daic.compiler.checking.sources import Source
from daic.dsl.format import format_tree
from daic.files import write_atomic

NO_NEWLINE = "\\ No newline at end of file\n"


@dataclass(frozen=True)
class Formatted:
    """A source and its canonical form: `text` is None where the source does not parse (the report's
    diagnostics say why)."""

    report: FileReport
    text: str | None

    @property
    def path(self) -> str:
        return self.report.source.path

    @property
    def changed(self) -> bool:
        return self.text is not None and self.text != self.report.source.text

    def diff(self) -> str:
        """The patch from the source to its canonical form (empty when they are the same)."""
        return unified_diff(self.report.source.text, self.text or self.report.source.text, self.path)


def formatted(source: Source) -> Formatted:
    report = parse_source(source)
    return Formatted(report, None if report.has_errors else format_tree(report.parsed.tree))


def unified_diff(before: str, after: str, path: str) -> str:
    """A patch from `before` to `after` that `patch` and `git apply` take: a last line without its newline
    is followed by the marker saying so, as diff writes it."""
    lines = difflib.unified_diff(_lines(before), _lines(after), fromfile=path, tofile=path)
    return "".join(line if line.endswith("\n") else line + "\n" + NO_NEWLINE for line in lines)


def _lines(text: str) -> list[str]:
    """The text's lines as `patch` and `git apply` count them, each with its `\\n`: they end lines at
    `\\n` only, so a lone `\\r` (a line end to daic) stays inside a patch line."""
    return [line for line in re.split(r"(?<=\n)", text) if line]


def rewrite(path: str, text: str) -> None:
    """The file at `path` replaced by `text` whole or not at all (`daic.files.write_atomic`), keeping its
    permissions. A symbolic link is followed: its target is rewritten and the link stays a link."""
    target = Path(os.path.realpath(path))
    write_atomic(target, lambda handle: handle.write(text.encode("utf-8")), mode=target.stat().st_mode)
