"""What `daic verify` prints: the live progress of a certification, the summary's table (or JSON), a
curve's table, and the answers of VNN-LIB properties (one as VNN-COMP writes it, several as a table)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from daic.compiler.jobs.curve import beside, curve_table, record_at
from daic.compiler.jobs.properties import vnncomp_text


def table_text(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The summary as (name, value) rows for the table."""
    from daic.runtime.certification.certify import CLEAN, Attack

    n = max(1, summary["images"])
    rows = [(f"verified by {label}", summary["verified_by"].get(label, 0)) for label in summary["cascade"]]
    rows = [(name, count) for name, count in rows if not name.endswith(Attack.label)]
    falsified = summary["falsified_by"]
    rows += [("falsified: misclassified", falsified.get(CLEAN, 0))]
    rows += [(f"falsified by {step}", falsified[step]) for step in summary["cascade"] if step in falsified]
    rows += [(status, summary[status]) for status in ("falsified", "unknown", "error")]
    out = [(name, f"{count:,} ({100 * count / n:.2f}%)") for name, count in rows]
    out.append(("verified", f"{summary['verified']:,} ({summary['verified_percent']:.2f}%)"))
    out.append(("accuracy", f"{summary['accuracy_percent']:.2f}%"))
    if "attack_accuracy_percent" in summary:
        out.append((f"{Attack.label} accuracy", f"{summary['attack_accuracy_percent']:.2f}%"))
    out.append(("s/image", f"{summary['seconds_per_image']:.4f}"))
    return out


class VerifyDisplay:
    """A progress bar of verified / falsified / unknown counts and images per second; without a terminal,
    a line at every tenth of the images."""

    def __init__(self, enabled: bool, unit: str = "images") -> None:
        from rich.console import Console

        self.enabled, self.unit = enabled, unit
        self.console = Console(stderr=True, soft_wrap=True, highlight=False)
        self.bar = None
        self.task = None
        self.tenths = 0

    def update(self, counts, total: int, rate: float) -> None:
        if not self.enabled:
            return
        done = sum(counts.values())
        text = ", ".join(f"{counts.get(s, 0):,} {s}" for s in ("verified", "falsified", "unknown", "error"))
        text += f"; {rate:.2f} {self.unit}/s"
        if not self.console.is_terminal:
            if done * 10 // max(1, total) > self.tenths or done == total:
                self.tenths = done * 10 // max(1, total)
                self.console.print(f"certifying: {done:,}/{total:,} {self.unit}: {text}")
            return
        if self.bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            columns = (TextColumn("certifying"), BarColumn(), MofNCompleteColumn())
            self.bar = Progress(
                *columns, TextColumn("{task.fields[info]}"), console=self.console, transient=True
            )
            self.bar.start()
            self.task = self.bar.add_task("certifying", total=total, info="")
        self.bar.update(self.task, completed=done, info=text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def print_summary(summary: dict[str, Any], net: str, out: Path, output_format: str) -> None:
    """The summary as a table (or, with `json`, one JSON object) on stdout; the record's path on stderr."""
    from rich.console import Console
    from rich.table import Table

    if output_format == "json":
        print(json.dumps({**summary, "record": str(out)}, indent=2))
        return
    table = Table(
        title=f"{net}: {summary['images']:,} test images, eps = {summary['epsilon']:.6g}; "
        f"cascade {' > '.join(summary['cascade'])}"
    )
    table.add_column("images")
    table.add_column("count", justify="right")
    for name, value in table_text(summary):
        table.add_row(name, value)
    Console(soft_wrap=True).print(table)
    print(f"record: {out}", file=sys.stderr)


def print_result(
    result: dict[str, Any] | list[dict[str, Any]], net: str, out: Path, output_format: str
) -> None:
    """A radius's summary, or a curve's, as `daic verify` prints it."""
    show = print_curve if isinstance(result, list) else print_summary
    show(result, net, out, output_format)


def print_curve(curve: list[dict[str, Any]], net: str, out: Path, output_format: str) -> None:
    """A curve's table (or, with `json`, its summaries) on stdout; where its records and figure are on
    stderr."""
    from rich.console import Console
    from rich.table import Table

    if output_format == "json":
        print(json.dumps({"curve": curve}, indent=2))
    else:
        head, rows = curve_table(curve)
        table = Table(
            title=f"{net}: {curve[0]['images']:,} test images; cascade {' > '.join(curve[0]['cascade'])}"
        )
        for name in head:
            table.add_column(name, justify="right")
        for row in rows:
            table.add_row(*row)
        Console(soft_wrap=True).print(table)
    records = ", ".join(record_at(out, s["epsilon"]).name for s in curve)
    print(f"records: {records}; the curve: {beside(out, '.curve.png')}", file=sys.stderr)


def print_properties(
    summary: dict[str, Any], rows: list[dict[str, Any]], out: Path, output_format: str
) -> None:
    """One property: its answer as VNN-COMP writes it on stdout. Several: a table of the answers (or, with
    `json`, the summary). The record's path on stderr."""
    from rich.console import Console
    from rich.table import Table

    if output_format == "json":
        print(json.dumps({**summary, "record": str(out)}, indent=2))
    elif len(rows) == 1 and summary["properties"] == 1:
        sys.stdout.write(vnncomp_text(rows[0]))
        how = f" by {rows[0]['domain']}" if rows[0]["domain"] else ""
        print(
            f"{rows[0]['property']}: {rows[0]['result']}{how} in {rows[0]['seconds']:.3g} s", file=sys.stderr
        )
    else:
        table = Table(title=f"{summary['properties']:,} properties; cascade {' > '.join(summary['cascade'])}")
        table.add_column("result")
        table.add_column("count", justify="right")
        n = max(1, summary["properties"])
        for answer in ("unsat", "sat", "timeout", "unknown"):
            table.add_row(answer, f"{summary[answer]:,} ({100 * summary[answer] / n:.2f}%)")
        if summary["errors"]:
            table.add_row("error", f"{summary['errors']:,} ({100 * summary['errors'] / n:.2f}%)")
        table.add_row("s/property", f"{summary['seconds_per_property']:.4f}")
        Console(soft_wrap=True).print(table)
    print(f"record: {out}", file=sys.stderr)
