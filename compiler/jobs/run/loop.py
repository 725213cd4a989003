"""The epoch loop: train, evaluate, save each epoch to the run folder, stop cleanly on a signal, and write
the report at the end."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from daic.compiler.jobs.run.folder import RunFolder, State
from daic.compiler.jobs.run.plan import Plan, lowered
from daic.compiler.jobs.run.report import write_report
from daic.compiler.jobs.run.start import identity, open_run, restore
from daic.compiler.jobs.run.stops import stop_point
from daic.errors import DaicError

if TYPE_CHECKING:
    from daic.runtime.training.distributed import Group
    from daic.runtime.training.scheme import Scheme
    from daic.runtime.training.trainer import Trainer

T = TypeVar("T")


class Interrupted(Exception):
    pass


class _Termination:
    """The SIGTERM handler: raises `Interrupted`, except while an epoch's metrics row and checkpoint are
    being written; a signal then waits until both are on disk, so that the folder never holds a row its
    checkpoint lacks (resuming would drop it, but a reader in between would see one epoch too many)."""

    def __init__(self) -> None:
        self.writing = False
        self.pending = False

    def __call__(self, signum, frame) -> None:
        if self.writing:
            self.pending = True
        else:
            raise Interrupted()

    @contextmanager
    def deferred(self) -> Iterator[None]:
        self.writing = True
        try:
            yield
        finally:
            self.writing = False
        if self.pending:
            raise Interrupted()


def execute(
    plan: Plan,
    out: Path,
    *,
    epochs: int | None,
    data_root: str | None,
    download: bool,
    device: str,
    resume: bool,
    display,
    group: Group | None = None,
    amp: str | None = None,
    seed: int | None = None,
    on_epoch: Callable[[dict], None] | None = None,
) -> dict:
    """Train and evaluate; returns the summary. `display` receives progress (`display.Display`).
    `on_epoch` sees each epoch's row once it is saved (`daic tune` reports evaluations to its pruner);
    an exception it raises stops the run there, the folder resumable as after an interrupt.

    `group` (a `runtime.distributed.Group`) makes this one of several processes training together: each
    trains on its share of every batch, and only rank 0 writes the run folder and shows progress; the
    others return rank 0's summary. `amp` ("bf16" or "fp16") runs the concrete passes in mixed precision.
    `epochs` and `seed` replace the scheme's.
    """
    import torch

    from daic.compiler.jobs.run.display import Silent
    from daic.runtime.training.distributed import Group

    group = group or Group(device=torch.device(device))
    if not group.is_main:
        display = Silent()
    folder = RunFolder(out)
    with _signals(folder, display) as termination:
        trainer, start = _start(plan, folder, group, epochs, seed, data_root, download, resume, amp)
        scheme = trainer.scheme
        history = folder.history(start) if group.is_main else []
        display.start(plan, scheme, trainer.data, start, history)
        epochs_loop = _Epochs(plan, scheme, trainer, folder, group, display, termination)
        for epoch in range(start, scheme.epochs):
            history.append(epochs_loop.run(epoch))
            if on_epoch is not None:
                on_epoch(history[-1])
        display.finish()
        summary = None
        if group.is_main:
            summary = write_report(folder, history, [test.column for test in scheme.test])
            stop_point("reported")
            folder.finish(time.time())
    return group.broadcast(summary)


def _start(
    plan: Plan, folder: RunFolder, group: Group, epochs: int | None, seed: int | None, data_root: str | None,
    download: bool, resume: bool, amp: str | None,
) -> tuple[Trainer, int]:  # fmt: skip
    """The trainer of the lowered scheme on its data, restored from the folder's checkpoint when the run
    resumes, and the epoch it starts at; the folder opened (rank 0) for this run."""
    from daic.runtime.training.distributed import DistributedError, local_batch
    from daic.runtime.training.trainer import Trainer

    scheme, model = lowered(plan, seed)
    if epochs is not None:
        scheme.epochs = epochs
    try:
        local_batch(scheme.batch, group.world)
    except DistributedError as exc:
        raise DaicError(str(exc), exit_code=2) from None
    data = load_data(scheme, data_root, download, group)
    stop_point("data-loaded")
    checkpoint = group.broadcast(
        _main_first(group, lambda: open_run(folder, plan, scheme, resume, _session(group, amp)))
    )
    trainer = Trainer(model, scheme, data, group=group, amp=amp)
    if checkpoint is None:
        return trainer, 0
    restore(trainer, checkpoint, folder, plan)
    return trainer, checkpoint["epoch"]


@contextmanager
def _signals(folder: RunFolder, display) -> Iterator[_Termination]:
    """SIGTERM, like Ctrl-C, stops the run at once (but never between an epoch's metrics row and its
    checkpoint), with a message that says how to continue from the folder it leaves."""
    termination = _Termination()
    previous = signal.signal(signal.SIGTERM, termination)
    try:
        yield termination
    except (KeyboardInterrupt, Interrupted):
        display.interrupted(folder.path)
        raise DaicError(_after_interrupt(folder), exit_code=130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        display.finish()


@dataclass
class _Epochs:
    """One epoch of a run at a time: train, evaluate when due, save to the folder, show."""

    plan: Plan
    scheme: Scheme
    trainer: Any
    folder: RunFolder
    group: Group
    display: Any
    termination: _Termination

    def run(self, epoch: int) -> dict[str, Any]:
        scheme, trainer, display = self.scheme, self.trainer, self.display
        row = trainer.train_epoch(epoch, display.progress(epoch, scheme.epochs))
        if _evaluates(scheme, epoch):
            display.evaluation(epoch + 1, len(trainer.data.test_y), trainer.run_epsilon)
            row.update(trainer.evaluate(on_progress=display.evaluating), epsilon=trainer.run_epsilon)
        with self.termination.deferred():
            if self.group.is_main:
                self._save(row)
            display.epoch_done(row)
        stop_point("epoch-saved")
        return row

    def _save(self, row: dict[str, Any]) -> None:
        """The epoch's metrics row, then its checkpoint. Metrics first: a crash between the two leaves a row
        the checkpoint does not cover, which `history` drops on resume, rather than a checkpoint whose epoch
        has no row."""
        trainer, folder = self.trainer, self.folder
        state = {
            **trainer.state_dict(),
            **identity(self.plan, self.scheme),
            "epoch": row["epoch"],
            "epsilon": trainer.run_epsilon,  # what `daic verify` certifies at, as the run's tests did
            "train_epsilon": row["train_epsilon"],
            "relu": self.scheme.relu,
        }
        try:
            folder.append_metrics(row)
            folder.save_checkpoint(state)
        except (OSError, RuntimeError) as exc:
            before = row["epoch"] - 1
            saved = (
                f"epoch {before} is saved: resume with --resume --out {folder.path}"
                if before
                else "nothing is saved"
            )
            reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
            raise DaicError(
                f"cannot save epoch {row['epoch']} in {folder.path} ({reason}); {saved}", exit_code=2
            ) from None


def _evaluates(scheme: Scheme, epoch: int) -> bool:
    """Whether the run evaluates after `epoch` (from 0): after the last, and every `test_every`."""
    if epoch + 1 == scheme.epochs:
        return True
    return scheme.test_every is not None and (epoch + 1) % scheme.test_every == 0


def _after_interrupt(folder: RunFolder) -> str:
    """What an interrupted run's user does next, from the state it left its folder in."""
    try:
        state = folder.state()
    except DaicError:
        state = State.NOTHING
    if state in (State.NOTHING, State.STARTED):
        return "interrupted before an epoch finished: run the same command again"
    return f"interrupted; the last finished epoch is saved: resume with --resume --out {folder.path}"


def _session(group: Group, amp: str | None) -> dict[str, Any]:
    """What run.json records of the process that runs (or resumes) the run."""
    import torch

    from daic.compiler.jobs.about import environment
    from daic.runtime import native

    on_cpu = group.device.type == "cpu"
    return {
        "device": str(group.device),
        "cuda_device": None if on_cpu else torch.cuda.get_device_name(group.device),
        "processes": group.world,
        "amp": amp,
        "threads": torch.get_num_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "native_kernels": native.status() if on_cpu else "not used off the CPU",
        "versions": environment(),
        "command": sys.argv,
        "started": time.time(),
    }


def _main_first(group: Group, action: Callable[[], T]) -> T | None:
    """Runs `action` on rank 0 alone and tells the other processes whether it failed, so that a problem
    only rank 0 sees (a run folder in the way, no checkpoint to resume, a failed download) stops every
    process with rank 0's message instead of leaving the others waiting for it."""
    result, failure = None, None
    if group.is_main:
        try:
            result = action()
        except DaicError as exc:
            failure = exc
    message = group.broadcast(None if failure is None else (str(failure), failure.exit_code))
    if failure is not None:
        raise failure
    if message is not None:
        raise DaicError(message[0], exit_code=message[1])
    return result


def load_data(scheme, data_root: str | None, download: bool, group: Group):
    """The data set, read by every process; rank 0 reads (and, with --download, fetches) it first, so
    that processes on one machine never download into the same folder at once."""

    def read():
        data = scheme.data.load(data_root, download)  # a DataError says what to do, as it is
        return data.held_out(scheme.validation) if scheme.validation else data

    data = _main_first(group, read)
    return data if group.is_main else read()
