"""What a run tells its display, and the display that shows nothing. A display is any object with these
methods: the command line's (`compiler/commands/run_display.py`) draws a progress bar and a table; the
library's default, and every process but rank 0 of a distributed run, is `Silent`."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class Display(Protocol):
    """A run's progress as `execute` reports it: the start, each epoch's progress callback (None: the
    trainer reads nothing back from the device for it), each evaluation and its progress, each epoch's
    row, an interrupt, the end."""

    def start(self, plan, scheme, data, start_epoch: int, history: list[dict]) -> None: ...
    def progress(self, epoch: int, epochs: int): ...
    def evaluation(self, epoch: int, images: int, epsilon: float) -> None: ...
    def evaluating(self, column: str, done: int, total: int) -> None: ...
    def epoch_done(self, row: dict) -> None: ...
    def interrupted(self, out: Path) -> None: ...
    def finish(self) -> None: ...


class Silent:
    """A display that shows nothing: the library's default, and every process but rank 0 of a distributed
    run (rank 0 alone shows the run)."""

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
