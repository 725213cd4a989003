"""The live display of `daic run`: a progress bar per epoch (loss, epsilon, examples/s) and, after each
evaluation, a row of the results table."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


class RunDisplay:
    def __init__(self, console: Console | None = None, processes: int = 1) -> None:
        self.console = console or Console()
        self.processes = processes
        self.progress_bar: Progress | None = None
        self.task = None
        self.columns: list[str] = []
        self._header_shown = False

    def start(self, plan, scheme, data, start_epoch: int, history: list[dict]) -> None:
        c = self.console
        c.print(
            f"[bold]{plan.scheme.node.name}[/] from {plan.scheme_path}: {plan.network.neurons:,} neurons, "
            f"{plan.network.params:,} parameters ({plan.net_path})"
        )
        c.print(
            f"data: {len(data.train_y):,} training, {len(data.test_y):,} test images; goal {scheme.goal!r}"
        )
        if self.processes > 1:
            c.print(
                f"{self.processes} processes, each {scheme.batch // self.processes} of every batch of "
                f"{scheme.batch}"
            )
        if start_epoch:
            c.print(f"resuming after epoch {start_epoch} of {scheme.epochs}")
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
            info = f"loss {p.loss:.4f}  eps {p.epsilon:.4g}{schedules}  t {p.t:.2f}  {rate:,.0f} ex/s"
            self.progress_bar.update(self.task, completed=p.batch, total=p.batches, info=info)

        return update

    def evaluation(self, epoch: int, images: int, epsilon: float) -> None:
        pass

    def evaluating(self, column: str, done: int, total: int) -> None:
        if self.progress_bar is not None:
            self.progress_bar.update(self.task, completed=done, total=total, info=f"testing {column}")

    def epoch_done(self, row: dict) -> None:
        """One line per epoch; the test columns appear once the first evaluation has run."""
        tests = [k for k in row if k.startswith(("Acc", "Ver", "MI-", "PGD"))]
        if tests and tests != self.columns:
            self.columns = tests
            self.console.print(
                self._line(["epoch", "loss", "eps", "s"], [f"{k} %" for k in tests]), style="bold"
            )
        elif not self.columns and not self._header_shown:
            self.console.print(self._line(["epoch", "loss", "eps", "s"], []), style="bold")
        self._header_shown = True
        values = [str(row["epoch"]), f"{row['loss']:.4f}", f"{row['epsilon']:.4g}", f"{row['seconds']:.1f}"]
        self.console.print(
            self._line(values, [f"{row[k]:.1f}" if k in row else "" for k in self.columns]), highlight=False
        )

    @staticmethod
    def _line(first: list[str], tests: list[str]) -> str:
        widths = [5, 8, 8, 7]
        cells = [v.rjust(w) for v, w in zip(first, widths, strict=True)]
        cells += [v.rjust(max(10, len(v))) for v in tests]
        return "  ".join(cells)

    def interrupted(self, out: Path) -> None:
        self.finish()

    def finish(self) -> None:
        self._close()

    def _close(self) -> None:
        if self.progress_bar is not None:
            self.progress_bar.stop()
            self.progress_bar = None


class Silent:
    """The display of every process but rank 0 under distributed training: rank 0 alone shows the run."""

    def start(self, plan, scheme, data, start_epoch: int, history: list[dict]) -> None:
        pass

    def progress(self, epoch: int, epochs: int) -> None:
        """No callback, so the trainer reads nothing back from the device for display."""
        return None

    def evaluation(self, epoch: int, images: int, epsilon: float) -> None:
        pass

    def evaluating(self, column: str, done: int, total: int) -> None:
        pass

    def epoch_done(self, row: dict) -> None:
        pass

    def interrupted(self, out: Path) -> None:
        pass

    def finish(self) -> None:
        pass
