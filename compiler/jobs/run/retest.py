"""A run's tests measured again on its data set's test set, from its checkpoint: how `daic tune` evaluates
the trials it chose once, at the end, after tuning on a validation split."""

from __future__ import annotations

from pathlib import Path

from daic.compiler.jobs.run.folder import RunFolder
from daic.compiler.jobs.run.loop import load_data
from daic.compiler.jobs.run.plan import Plan, lowered
from daic.compiler.jobs.run.start import restore
from daic.errors import DaicError


def retest(plan: Plan, out: Path, data_root: str | None, device: str) -> dict[str, float]:
    """The scheme's tests on the test set (not its validation split), of the network the run folder `out`
    holds: each test's column and its percentage."""
    import torch

    from daic.compiler.jobs.checkpoints import read_checkpoint
    from daic.runtime.training.distributed import Group
    from daic.runtime.training.trainer import Trainer

    folder = RunFolder(out)
    if not folder.checkpoint.is_file():
        raise DaicError(f"{out} holds no checkpoint to test", exit_code=2)
    scheme, model = lowered(plan)
    scheme.validation = 0.0
    group = Group(device=torch.device(device))
    data = load_data(scheme, data_root, False, group)
    trainer = Trainer(model, scheme, data, group=group)
    restore(trainer, read_checkpoint(folder.checkpoint, "test it again after a new run"), folder, plan)
    return trainer.evaluate()
