"""`daic fmt`: sources rewritten in canonical form (in place, atomically, through symbolic links), or only
checked, or shown as a patch; standard input (`-`) is formatted to standard output."""

from __future__ import annotations

import difflib
import os
import re
import tempfile
from collections import Counter
from pathlib import Path

import click

from daic.compiler.checking.check import FileReport, parse_source
from daic.compiler.checking.sources import discover, read
from daic.compiler.commands import render
from daic.compiler.commands.check import plural, stdin_source
from daic.dsl.format import format_tree

NO_NEWLINE = "\\ No newline at end of file\n"


def unified_diff(before: str, after: str, path: str) -> str:
    """A patch from `before` to `after` that `patch` and `git apply` take: a last line without its newline
    is followed by the marker saying so, as diff writes it."""
    lines = difflib.unified_diff(_lines(before), _lines(after), fromfile=path, tofile=path)
    return "".join(line if line.endswith("\n") else line + "\n" + NO_NEWLINE for line in lines)


def _lines(text: str) -> list[str]:
    """The text's lines as `patch` and `git apply` count them, each with its `\\n`: they end lines at
    `\\n` only, so a lone `\\r` (a line end to daic) stays inside a patch line."""
    return [line for line in re.split(r"(?<=\n)", text) if line]


def write_atomically(path: str, text: str) -> None:
    """Write next to the file, then rename over it: an interrupted write never leaves half a file. A
    symbolic link is followed: its target is rewritten and the link stays a link."""
    target = Path(os.path.realpath(path))
    mode = target.stat().st_mode
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _report_syntax(report: FileReport) -> None:
    for d in report.diagnostics:
        click.echo(render.as_text(d, report.index), err=True)


def format_stdin(report: FileReport, check_only: bool, diff: bool) -> int:
    """`daic fmt -`: the formatted text on standard output (or only the verdict, or the patch)."""
    if report.has_errors:
        _report_syntax(report)
        return 1
    before = report.source.text
    after = format_tree(report.parsed.tree)
    if diff:
        click.echo(unified_diff(before, after, report.source.path), nl=False)
    elif check_only:
        if after != before:
            click.echo(f"would reformat {report.source.path}")
    else:
        click.echo(after, nl=False)
    return 1 if (check_only or diff) and after != before else 0


def fmt_command(paths: tuple[str, ...], check_only: bool, diff: bool, stdin_filename: str | None) -> int:
    """Format and report; the exit status: 0 done (or nothing to do), 1 a file would change (with --check
    or --diff) or could not be parsed or written. A usage error is a `UsageError`, which the command line
    reports (exit status 2)."""
    source = stdin_source(paths, stdin_filename)
    if source is not None:
        return format_stdin(parse_source(source), check_only, diff)
    sources = [read(path) for path in discover(list(paths))]
    outcomes = Counter(_format_file(source, check_only, diff) for source in sources)
    changed = outcomes["changed"] + outcomes["unwritable"]
    unparsable, unwritable = outcomes["unparsable"], outcomes["unwritable"]
    verb = "would be reformatted" if (check_only or diff) else "reformatted"
    unchanged = len(sources) - changed - unparsable
    summary = f"{plural(changed, 'file')} {verb}, {plural(unchanged, 'file')} unchanged"
    if unparsable:
        summary += f", {plural(unparsable, 'file')} not parsed"
    click.echo(summary, err=True)
    return 1 if unparsable or unwritable or (changed and (check_only or diff)) else 0


def _format_file(source, check_only: bool, diff: bool) -> str:
    """One file formatted (or shown, or checked): "unchanged", "changed", "unparsable" or "unwritable"."""
    # Formatting needs only a syntax tree; meaning is `daic check`'s business.
    report = parse_source(source)
    if report.has_errors:
        _report_syntax(report)
        return "unparsable"
    before = report.source.text
    after = format_tree(report.parsed.tree)
    if after == before:
        return "unchanged"
    if diff:
        click.echo(unified_diff(before, after, report.source.path), nl=False)
    elif check_only:
        click.echo(f"would reformat {report.source.path}")
    else:
        try:
            write_atomically(report.source.path, after)
        except OSError as exc:
            click.echo(f"daic: cannot write {report.source.path}: {exc.strerror or exc}", err=True)
            return "unwritable"
        click.echo(f"reformatted {report.source.path}", err=True)
    return "changed"
