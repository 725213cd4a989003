"""The live display of `daic run`: a progress bar per epoch (loss, epsilon, examples/s) and, after each
evaluation, a row of the results table."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table


class RunDisplay:
    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self.progress_bar: Progress | None = None
        self.task = None
        self.columns: list[str] = []

    def start(self, plan, scheme, data, start_epoch: int, history: list[dict]) -> None:
        c = self.console
        c.print(
            f"[bold]{plan.scheme.node.name}[/] from {plan.scheme_path}: {plan.network.neurons:,} neurons, "
            f"{plan.network.params:,} parameters ({plan.net_path})"
        )
        c.print(
            f"data: {len(data.train_y):,} training, {len(data.test_y):,} test images; goal {scheme.goal!r}"
        )
        if start_epoch:
            c.print(f"resuming after epoch {start_epoch} of {scheme.epochs}")
        for row in history:
            self.epoch_done(row)

    def progress(self, epoch: int, epochs: int):
        self._close()
        self.progress_bar = Progress(
            TextColumn(f"epoch {epoch + 1}/{epochs}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        self.progress_bar.start()
        self.task = self.progress_bar.add_task("train", total=None, info="")

        def update(p) -> None:
            rate = p.examples / max(p.seconds, 1e-9)
            info = f"loss {p.loss:.4f}  eps {p.epsilon:.4g}  t {p.t:.2f}  {rate:,.0f} ex/s"
            self.progress_bar.update(self.task, completed=p.batch, total=p.batches, info=info)

        return update

    def evaluating(self, column: str, done: int, total: int) -> None:
        if self.progress_bar is not None:
            self.progress_bar.update(self.task, completed=done, total=total, info=f"testing {column}")

    def epoch_done(self, row: dict) -> None:
        self._close()
        tests = [k for k in row if k.startswith(("Acc", "Ver", "MI-", "PGD"))]
        table = Table(show_header=not self.columns, box=None, pad_edge=False)
        for name, width in (("epoch", 5), ("loss", 8), ("eps", 8), ("s", 7)):
            table.add_column(name, justify="right", min_width=width)
        for name in tests:
            table.add_column(name + " %", justify="right", min_width=9)
        table.add_row(
            str(row["epoch"]),
            f"{row['loss']:.4f}",
            f"{row['epsilon']:.4g}",
            f"{row['seconds']:.1f}",
            *[f"{row[k]:.1f}" for k in tests],
        )
        if tests:
            self.columns = tests
        self.console.print(table)

    def interrupted(self, out: Path) -> None:
        self._close()

    def _close(self) -> None:
        if self.progress_bar is not None:
            self.progress_bar.stop()
            self.progress_bar = None
