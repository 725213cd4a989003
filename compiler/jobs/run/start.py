"""Starting or resuming: what a run does with the folder it finds (see `folder` for its states), and the
checkpoint it resumes from."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from daic.compiler.jobs.about import git_commit
from daic.compiler.jobs.run.folder import RunFolder, State, source_copies
from daic.compiler.jobs.run.plan import Plan, changes, definition
from daic.compiler.jobs.run.stops import stop_point
from daic.errors import DaicError

if TYPE_CHECKING:
    from daic.runtime.training.scheme import Scheme


def open_run(folder: RunFolder, plan: Plan, scheme: Scheme, resume: bool, session: dict[str, Any]):
    """Makes the folder ready for this run (rank 0 alone calls this); `session` is what run.json records
    of the process that runs it (device, threads, versions, ...). Returns the checkpoint to resume from, or
    None when the run starts at its first epoch: a folder with nothing of a run, or a run that saved no
    epoch, starts (again) with or without --resume; one with a checkpoint continues with --resume only."""
    state = folder.state()
    if state in (State.NOTHING, State.STARTED):
        record = {
            "scheme": plan.scheme.node.name,
            "seed": scheme.seed,
            "epochs": scheme.epochs,
            "definition": definition(plan, scheme),
            "sources_commit": git_commit(Path(plan.scheme_path).resolve().parent),
            **session,
        }
        folder.begin(source_copies(plan, folder.path), record)
        return None
    if not resume:
        what = "a run: pass --resume to continue it"
        if state is State.FINISHED:
            what = "a finished run: pass --resume with more --epochs to extend it"
        raise DaicError(f"{folder.path} already holds {what}, or choose another --out", exit_code=2)
    record = folder.record()
    _refuse_other_sources(folder, record, plan, scheme)
    folder.remove_temporaries(record.get("files", []))
    checkpoint = _resumable(folder, plan, scheme)
    this = {"after_epoch": checkpoint["epoch"], "epochs": scheme.epochs, **session}
    record = {**record, "epochs": scheme.epochs, "resumed": [*record.get("resumed", []), this]}
    record.pop("finished", None)  # until the report is written again
    folder.write_record(record)
    stop_point("resumed")
    return checkpoint


def _refuse_other_sources(folder: RunFolder, record: dict, plan: Plan, scheme: Scheme) -> None:
    """A resumed run trains what the folder describes: sources whose meaning changed are refused, except
    for more epochs (which extend the run, and are recorded)."""
    recorded = record.get("definition")
    found = changes(recorded, definition(plan, scheme)) if isinstance(recorded, dict) else []
    before = record.get("epochs")
    if isinstance(before, int) and scheme.epochs < before:
        found.append(f"epochs: was {before}, now {scheme.epochs} (a run may be extended, not shortened)")
    if found:
        listed = "".join(f"\n  {item}" for item in found)
        raise DaicError(
            f"{folder.path} holds a run of other sources; --resume would train something else:{listed}\n"
            f"resume with the sources it started from (copied in {folder.path}), or start a new run with "
            "another --out",
            exit_code=2,
        )


def _resumable(folder: RunFolder, plan: Plan, scheme: Scheme) -> dict[str, Any]:
    """The folder's checkpoint, if it is one of this scheme's runs (the same scheme, data set, seed and
    optimizer: a checkpoint of another would load, or half load, and train on as something else)."""
    from daic.compiler.jobs.checkpoints import read_checkpoint

    path = folder.checkpoint
    state = read_checkpoint(
        path, "the run cannot resume from it: restore it from a copy, or start a new run with another --out"
    )
    differ = [
        f"{k} {state[k]!r} there, {v!r} here"
        for k, v in identity(plan, scheme).items()
        if k in state and state[k] != v
    ]
    if differ or "model" not in state or not isinstance(state.get("epoch"), int):
        raise DaicError(
            f"{path} is from another run ({'; '.join(differ) or 'no network weights'}): resume with the "
            "scheme that started it, or start a new run with another --out",
            exit_code=2,
        )
    return state


def restore(trainer, state: dict[str, Any], folder: RunFolder, plan: Plan) -> None:
    """The trainer (network, optimizer, loss scaler) as the checkpoint left it."""
    from daic.compiler.jobs.checkpoints import weights_mismatch

    mismatch = weights_mismatch(trainer.model, state["model"])
    if mismatch is not None:
        raise DaicError(f"{folder.checkpoint} does not fit {plan.net_path}: {mismatch}", exit_code=2)
    try:
        trainer.load_state_dict(state)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise DaicError(
            f"{folder.checkpoint} does not fit this scheme's optimizer: {str(exc).splitlines()[0]}",
            exit_code=2,
        ) from None


def identity(plan: Plan, scheme: Scheme) -> dict[str, Any]:
    """What a checkpoint records of the run it belongs to, and what resuming compares."""
    return {
        "scheme": plan.scheme.node.name,
        "dataset": plan.scheme.built.args["data"].decl.name,
        "seed": scheme.seed,
        "optimizer_type": type(scheme.optimizer).__name__,
    }
