"""`daic check`: files, folders or standard input (`-`) checked, and the diagnostics written in one of the
formats of `render.RENDERERS`, with a one-line count on standard error."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import click

from daic import api
from daic.compiler.checking.check import FileReport
from daic.compiler.checking.sources import STDIN, UsageError
from daic.compiler.commands.render import RENDERERS
from daic.errors import DaicError


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def stdin_given(paths: tuple[str, ...], stdin_filename: str | None) -> bool:
    """Whether the source is standard input: `-` as the path given (alone: it is one source)."""
    if STDIN not in paths:
        if stdin_filename is not None:
            raise UsageError("--stdin-filename names the source read from `-`; give `-` as the path")
        return False
    if len(paths) > 1:
        raise UsageError("`-` (standard input) is the only path when it is given")
    return True


@dataclass(frozen=True)
class Selection:
    """Which diagnostics count, as ruff's options choose them: codes or code prefixes (``E1``, ``W202``);
    `select` keeps only those (all when empty), `ignore` leaves those out; `strict` fails on warnings too."""

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    strict: bool = False

    def keeps(self, code: str) -> bool:
        chosen = not self.select or code.startswith(self.select)
        return chosen and not (self.ignore and code.startswith(self.ignore))


def codes(given: tuple[str, ...], option: str) -> tuple[str, ...]:
    """The codes of repeated, comma-separated `option` values, each a code or a prefix of codes."""
    found = tuple(part.strip().upper() for value in given for part in value.split(",") if part.strip())
    wrong = [code for code in found if not re.fullmatch(r"[EW]\d{0,3}", code)]
    if wrong:
        raise click.UsageError(f"{option} {wrong[0]}: a code is E or W and up to three digits (E101, W2, E)")
    return found


def check_command(
    paths: tuple[str, ...], output_format: str, stdin_filename: str | None, selection: Selection = Selection()
) -> int:
    """Check and report the diagnostics `selection` keeps; the exit status: 0 clean (warnings allowed but
    with `strict`), 1 errors found, 2 a usage error."""
    try:
        if stdin_given(paths, stdin_filename):
            reports = [api.check_text(sys.stdin.buffer.read(), stdin_filename)]
        else:
            reports = api.check_reports(*paths)
    except DaicError as exc:
        click.echo(f"daic: {exc.command_message}", err=True)
        return 2
    kept = {
        report.source.path: [d for d in report.diagnostics if selection.keeps(d.code.id)]
        for report in reports
    }
    diagnostics = [d for found in kept.values() for d in found]
    by_path = {report.source.path: report for report in reports}
    click.echo(RENDERERS[output_format](diagnostics, lambda d: _index(by_path.get(d.path))), nl=False)
    click.echo(summary(len(reports), kept), err=True)
    failing = [d for d in diagnostics if d.is_error or selection.strict]
    return 1 if failing else 0


def _index(report: FileReport | None):
    return report.index if report is not None else None


def summary(files: int, kept: dict[str, list]) -> str:
    """``checked N files: 2 errors and 1 warning in 2 files`` (or ``no problems``)."""
    errors = sum(d.is_error for found in kept.values() for d in found)
    warnings = sum(not d.is_error for found in kept.values() for d in found)
    broken = sum(1 for found in kept.values() if found)
    counts = [plural(n, word) for n, word in ((errors, "error"), (warnings, "warning")) if n]
    text = f"checked {plural(files, 'file')}: "
    return text + (f"{' and '.join(counts)} in {plural(broken, 'file')}" if counts else "no problems")
