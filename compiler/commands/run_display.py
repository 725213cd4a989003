"""The live display of `daic run`: a progress bar per epoch (loss, epsilon, schedules, examples/s) and a
row of the table per epoch, with the test results after each evaluation.

What it prints is a log as well: each line is one line whatever the width (a log is not wrapped at 80
columns), and without a terminal, where no bar is drawn, an evaluation's progress is printed as lines.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from daic.compiler.jobs.run.report import test_results


class RunDisplay:
    """A run's display (`jobs.run.display.Display`) on a terminal or in a log."""

    def __init__(self, console: Console | None = None, processes: int = 1) -> None:
        self.console = console or Console(soft_wrap=True, highlight=False)
        self.processes = processes
        self.progress_bar: Progress | None = None
        self.task = None
        self.tests: list[str] = []  # the scheme's tests' result columns
        self.columns: list[str] = []  # the test results shown, once an evaluation has run
        self.schedules: list[str] = []  # the goal's schedules shown
        self.tests_text = ""
        self._reported: dict[str, int] = {}  # per test, the quarters of the test set a log was told of
        self._header_shown = False

    def start(self, plan, scheme, data, start_epoch: int, history: list[dict]) -> None:
        say = self._say
        self.console.print(
            f"[bold]{escape(plan.scheme.node.name)}[/] from {escape(plan.scheme_path)}: "
            f"{plan.network.neurons:,} neurons, {plan.network.params:,} parameters ({escape(plan.net_path)})"
        )
        say(
            f"data: {len(data.train_y):,} training, {len(data.test_y):,} "
            f"{'validation' if scheme.validation else 'test'} images; "
            f"goal {plan.source_of('goal')}"
        )
        self.tests_text = plan.source_of("test")
        self.tests = [test.column for test in scheme.test]
        if self.processes > 1:
            batch = scheme.batch
            say(f"{self.processes} processes, each {batch // self.processes} of every batch of {batch}")
        if start_epoch:
            say(f"resuming after epoch {start_epoch} of {scheme.epochs}")
        for row in history:
            self.epoch_done(row)

    def progress(self, epoch: int, epochs: int):
        """A progress callback for one epoch; one live bar serves the whole run."""
        if self.progress_bar is None:
            self.progress_bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self.progress_bar.start()
            self.task = self.progress_bar.add_task("", total=None, info="")
        self.progress_bar.reset(self.task, description=f"epoch {epoch + 1}/{epochs}", total=None, info="")

        def update(p) -> None:
            rate = p.examples / max(p.seconds, 1e-9)
            schedules = "".join(f"  {name} {value:.3g}" for name, value in p.schedules.items())
            info = f"loss {p.loss:.4f}  train_eps {p.epsilon:.4g}{schedules}  t {p.t:.2f}  {rate:,.0f} ex/s"
            self.progress_bar.update(self.task, completed=p.batch, total=p.batches, info=info)

        return update

    def evaluation(self, epoch: int, images: int, epsilon: float) -> None:
        """An evaluation begins: what it tests, on how many images, at which radius."""
        self._reported = {}
        what = f"{self.tests_text} on {images:,} images at eps {epsilon:.4g}"
        self._say(f"evaluating after epoch {epoch}: {what}")

    def evaluating(self, column: str, done: int, total: int) -> None:
        """How far a test has come: on the bar, or in a log each quarter of the test set."""
        if self.progress_bar is not None:
            self.progress_bar.update(self.task, completed=done, total=total, info=f"testing {column}")
        if self.console.is_terminal:
            return
        quarter = 4 * done // max(1, total)
        if quarter > self._reported.get(column, 0):
            self._reported[column] = quarter
            self._say(f"  testing {column}: {done:,} of {total:,} images ({100 * done // max(1, total)}%)")

    def epoch_done(self, row: dict) -> None:
        """One line per epoch: its loss, epsilon and the goal's schedules, and the test results after an
        evaluation. The header is printed again when the columns change."""
        tests = list(test_results(row, self.tests)) or self.columns
        schedules = list(row.get("schedules", {})) or self.schedules
        if not self._header_shown or (tests, schedules) != (self.columns, self.schedules):
            self.columns, self.schedules = tests, schedules
            self.console.print(self._line(self._names()), style="bold", markup=False)
            self._header_shown = True
        values = [str(row["epoch"]), f"{row['loss']:.4f}", f"{row['train_epsilon']:.4g}"]
        values += [f"{row['schedules'][k]:.4g}" if k in row.get("schedules", {}) else "" for k in schedules]
        values += [f"{row['seconds']:.1f}"]
        values += [f"{row[k]:.1f}" if k in row else "" for k in tests]
        self._say(self._line(values))

    def _names(self) -> list[str]:
        return ["epoch", "loss", "train_eps", *self.schedules, "s", *(f"{k} %" for k in self.columns)]

    def _line(self, cells: list[str]) -> str:
        """A row of the table: cells right-aligned in columns as wide as their headers (at least 8)."""
        widths = [5, *(max(8, len(name)) for name in self._names()[1:])]
        return "  ".join(cell.rjust(width) for cell, width in zip(cells, widths, strict=True))

    def _say(self, text: str) -> None:
        """A line of plain text (source text's brackets are not markup)."""
        self.console.print(text, markup=False)

    def interrupted(self, out: Path) -> None:
        self.finish()

    def finish(self) -> None:
        if self.progress_bar is not None:
            self.progress_bar.stop()
            self.progress_bar = None
