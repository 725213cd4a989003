"""`daic check`: files, folders or standard input (`-`) checked, and the diagnostics written in one of the
formats of `render.RENDERERS`, with a one-line count on standard error."""

from __future__ import annotations

import sys

import click

from daic.api import DaicError, check_reports
from daic.compiler.checking.check import FileReport, check_source
from daic.compiler.checking.sources import STDIN, Source, UsageError, from_stdin
from daic.compiler.commands.render import RENDERERS


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def stdin_source(paths: tuple[str, ...], stdin_filename: str | None) -> Source | None:
    """The source to read from standard input, when `-` is the path given (alone: it is one source)."""
    if STDIN not in paths:
        if stdin_filename is not None:
            raise UsageError("--stdin-filename names the source read from `-`; give `-` as the path")
        return None
    if len(paths) > 1:
        raise UsageError("`-` (standard input) is the only path when it is given")
    return from_stdin(sys.stdin.buffer.read(), stdin_filename)


def check_command(paths: tuple[str, ...], output_format: str, stdin_filename: str | None) -> int:
    """Check and report; the exit status: 0 clean (warnings allowed), 1 errors found, 2 a usage error."""
    try:
        source = stdin_source(paths, stdin_filename)
        reports = [check_source(source)] if source else check_reports(*paths)
    except (UsageError, DaicError) as exc:
        click.echo(f"daic: {exc}", err=True)
        return 2
    diagnostics = [d for report in reports for d in report.diagnostics]
    by_path = {report.source.path: report for report in reports}
    click.echo(RENDERERS[output_format](diagnostics, lambda d: _index(by_path.get(d.path))), nl=False)
    click.echo(summary(reports), err=True)
    return 1 if any(r.has_errors for r in reports) else 0


def _index(report: FileReport | None):
    return report.index if report is not None else None


def summary(reports: list[FileReport]) -> str:
    problems = sum(len(r.diagnostics) for r in reports)
    broken = sum(1 for r in reports if r.diagnostics)
    text = f"checked {plural(len(reports), 'file')}: "
    return text + (
        f"{plural(problems, 'problem')} in {plural(broken, 'file')}" if problems else "no problems"
    )
