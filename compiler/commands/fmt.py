"""`daic fmt`: sources rewritten in canonical form (in place), or only checked, or shown as a patch;
standard input (`-`) is formatted to standard output. The work is `daic.format_files` and
`daic.format_text`."""

from __future__ import annotations

import sys
from collections import Counter

import click

from daic import api
from daic.compiler.commands import render
from daic.compiler.commands.check import plural, stdin_given
from daic.compiler.jobs.formatting import Formatted, rewrite


def _report_syntax(result: Formatted) -> None:
    for d in result.report.diagnostics:
        click.echo(render.as_text(d, result.report.index), err=True)


def format_stdin(result: Formatted, check_only: bool, diff: bool) -> int:
    """`daic fmt -`: the formatted text on standard output (or only the verdict, or the patch)."""
    if result.text is None:
        _report_syntax(result)
        return 1
    if diff:
        click.echo(result.diff(), nl=False)
    elif check_only:
        if result.changed:
            click.echo(f"would reformat {result.path}")
    else:
        click.echo(result.text, nl=False)
    return 1 if (check_only or diff) and result.changed else 0


def fmt_command(paths: tuple[str, ...], check_only: bool, diff: bool, stdin_filename: str | None) -> int:
    """Format and report; the exit status: 0 done (or nothing to do), 1 a file would change (with --check
    or --diff) or could not be parsed or written. A usage error is a `UsageError`, which the command line
    reports (exit status 2)."""
    if stdin_given(paths, stdin_filename):
        return format_stdin(api.format_text(sys.stdin.buffer.read(), stdin_filename), check_only, diff)
    results = api.format_files(*paths)
    outcomes = Counter(_format_file(result, check_only, diff) for result in results)
    changed = outcomes["changed"] + outcomes["unwritable"]
    unparsable, unwritable = outcomes["unparsable"], outcomes["unwritable"]
    verb = "would be reformatted" if (check_only or diff) else "reformatted"
    unchanged = len(results) - changed - unparsable
    summary = f"{plural(changed, 'file')} {verb}, {plural(unchanged, 'file')} unchanged"
    if unparsable:
        summary += f", {plural(unparsable, 'file')} not parsed"
    click.echo(summary, err=True)
    return 1 if unparsable or unwritable or (changed and (check_only or diff)) else 0


def _format_file(result: Formatted, check_only: bool, diff: bool) -> str:
    """One file formatted (or shown, or checked): "unchanged", "changed", "unparsable" or "unwritable"."""
    if result.text is None:
        _report_syntax(result)
        return "unparsable"
    if not result.changed:
        return "unchanged"
    if diff:
        click.echo(result.diff(), nl=False)
    elif check_only:
        click.echo(f"would reformat {result.path}")
    else:
        try:
            rewrite(result.path, result.text)
        except OSError as exc:
            click.echo(f"daic: cannot write {result.path}: {exc.strerror or exc}", err=True)
            return "unwritable"
        click.echo(f"reformatted {result.path}", err=True)
    return "changed"
