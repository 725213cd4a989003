"""The epoch loop: train, evaluate, save each epoch to the run folder, and stop cleanly on a signal."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from .errors import RunError
from .folder import RunFolder
from .plan import Plan, lowered
from .report import plot_metrics, summarize, summary_text

if TYPE_CHECKING:
    from daic.runtime.distributed import Group

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
) -> dict:
    """Train and evaluate; returns the summary. `display` receives progress (see cli.RunDisplay).

    `group` (a `runtime.distributed.Group`) makes this one of several processes training together: each
    trains on its share of every batch, and only rank 0 writes the run folder and shows progress; the
    others return rank 0's summary. `amp` ("bf16" or "fp16") runs the concrete passes in mixed precision.
    """
    import torch

    from daic.runtime import native
    from daic.runtime.distributed import DistributedError, Group, local_batch
    from daic.runtime.trainer import Trainer

    from ..display import Silent

    group = group or Group(device=torch.device(device))
    if not group.is_main:
        display = Silent()
    scheme, model = lowered(plan)
    if epochs is not None:
        scheme.epochs = epochs
    try:
        local_batch(scheme.batch, group.world)
    except DistributedError as exc:
        raise RunError(str(exc), exit_code=2) from None
    data = _load_data(scheme, data_root, download, group)
    folder = RunFolder(out)
    resume = bool(group.broadcast(_main_first(group, lambda: folder.prepare(plan, resume))))
    trainer = Trainer(model, scheme, data, group=group, amp=amp)
    start = 0
    if resume:
        # Rank 0 reads the checkpoint and hands it round: on several machines only its own holds the folder.
        state = group.broadcast(_main_first(group, lambda: _resumable(folder.checkpoint, plan, scheme)))
        _restore(trainer, state, folder.checkpoint, plan)
        start = state["epoch"]
    elif group.is_main:
        folder.write_json(
            "run.json",
            {
                "scheme": plan.scheme.node.name,
                "seed": scheme.seed,
                "device": str(group.device),
                "processes": group.world,
                "amp": amp,
                "native_kernels": native.status() if group.device.type == "cpu" else "not used off the CPU",
                "epochs": scheme.epochs,
                "command": sys.argv,
                "started": time.time(),
            },
        )
    history = folder.history(start) if group.is_main else []
    display.start(plan, scheme, data, start, history)
    termination = _Termination()
    previous = signal.signal(signal.SIGTERM, termination)
    try:
        for epoch in range(start, scheme.epochs):
            row = trainer.train_epoch(epoch, display.progress(epoch, scheme.epochs))
            last = epoch + 1 == scheme.epochs
            if last or (epoch + 1) % scheme.test_every == 0:
                row.update(trainer.evaluate(on_progress=display.evaluating))
            with termination.deferred():
                if group.is_main:
                    _save_epoch(folder, row, trainer, plan, scheme)
                history.append(row)
                display.epoch_done(row)
    except (KeyboardInterrupt, Interrupted):
        display.interrupted(out)
        if not history:
            message = "interrupted before an epoch finished: run the same command again"
            raise RunError(message, exit_code=130) from None
        raise RunError(
            f"interrupted; the last finished epoch is saved: resume with --resume --out {out}", exit_code=130
        ) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        display.finish()
    summary = summarize(history) if group.is_main else None
    if group.is_main:
        folder.write_json("summary.json", summary)
        (out / "summary.txt").write_text(summary_text(summary) + "\n")
        plot_metrics(history, out / "metrics.png")
    return group.broadcast(summary)


def _resumable(path: Path, plan: Plan, scheme) -> dict:
    """The checkpoint at `path`, if it is one of this scheme's runs (the same scheme, data set, seed and
    optimizer: a checkpoint of another would load, or half load, and train on as something else)."""
    from daic.runtime.checkpoint import load

    try:
        state = load(path)
    except Exception as exc:  # torch.load raises many kinds (pickle, zip, EOF) for a file it cannot read
        raise RunError(
            f"{path} cannot be read ({exc.__class__.__name__}); the run cannot resume from it: start a new "
            "one with another --out",
            exit_code=2,
        ) from None
    expected = _identity(plan, scheme)
    differ = [
        f"{k} {state[k]!r} there, {v!r} here" for k, v in expected.items() if k in state and state[k] != v
    ]
    if differ or "model" not in state:
        raise RunError(
            f"{path} is from another run ({'; '.join(differ) or 'no network weights'}): resume with the "
            "scheme that started it, or start a new run with another --out",
            exit_code=2,
        )
    return state


def _restore(trainer, state: dict, path: Path, plan: Plan) -> None:
    try:
        trainer.load_state_dict(state)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise RunError(
            f"{path} does not fit {plan.net_path} and this scheme's optimizer: {str(exc).splitlines()[0]}",
            exit_code=2,
        ) from None


def _identity(plan: Plan, scheme) -> dict:
    """What a checkpoint records of the run it belongs to, and what resuming compares."""
    return {
        "scheme": plan.scheme.node.name,
        "dataset": plan.scheme.built.args["data"].decl.name,
        "seed": scheme.seed,
        "optimizer_type": type(scheme.optimizer).__name__,
    }


def _save_epoch(folder: RunFolder, row: dict, trainer, plan: Plan, scheme) -> None:
    """The epoch's metrics row, then its checkpoint. Metrics first: a crash between the two leaves a row the
    checkpoint does not cover, which `history` drops on resume, rather than a checkpoint whose epoch has
    no row."""
    from daic.runtime.checkpoint import save_atomic

    state = {
        **trainer.state_dict(),
        **_identity(plan, scheme),
        "epoch": row["epoch"],
        "epsilon": trainer.epsilon(row["epoch"]),
        "relu": scheme.relu,
    }
    try:
        folder.append_metrics(row)
        save_atomic(state, folder.checkpoint)
    except (OSError, RuntimeError) as exc:  # torch.save reports a full disk as a RuntimeError
        before = row["epoch"] - 1
        saved = (
            f"epoch {before} is saved: resume with --resume --out {folder.path}"
            if before
            else "nothing is saved"
        )
        reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
        raise RunError(f"cannot save epoch {row['epoch']} in {folder.path} ({reason}); {saved}") from None


def _main_first(group: Group, action: Callable[[], T]) -> T | None:
    """Runs `action` on rank 0 alone and tells the other processes whether it failed, so that a problem
    only rank 0 sees (a run folder in the way, no checkpoint to resume, a failed download) stops every
    process with rank 0's message instead of leaving the others waiting for it."""
    result, failure = None, None
    if group.is_main:
        try:
            result = action()
        except RunError as exc:
            failure = exc
    message = group.broadcast(None if failure is None else (str(failure), failure.exit_code))
    if failure is not None:
        raise failure
    if message is not None:
        raise RunError(message[0], exit_code=message[1])
    return result


def _load_data(scheme, data_root: str | None, download: bool, group: Group):
    """The data set, read by every process; rank 0 reads (and, with --download, fetches) it first, so
    that processes on one machine never download into the same folder at once."""
    from daic.runtime.data import DataError

    def read():
        try:
            return scheme.data.load(data_root, download)
        except DataError as exc:
            raise RunError(str(exc)) from None

    data = _main_first(group, read)
    return data if group.is_main else read()
