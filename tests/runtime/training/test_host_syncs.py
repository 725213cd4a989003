"""No training step waits for the device: reading a tensor on the host (`.item()`, `float(t)`, `bool(t)`,
`int(t)`, `.tolist()`) from daic's code costs a GPU round trip, so none may happen per step. Counted on
the CPU, where the same code makes the same reads: an epoch of twice the steps reads as often."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest
import torch

from daic.compiler.jobs.run.plan import lowered, plan_run
from daic.runtime.training.trainer import Trainer
from tests.paths import ROOT

READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__")

BATCH_NORM_NET = """Conv2D filters=8 kernel_size=3 input_shape=[8, 8, 1] padding=1
BatchNorm
ReLU
Conv2D filters=8 kernel_size=3 stride=2 padding=1
BatchNorm
ReLU
Linear out=32
BatchNorm
ReLU
CorrelateAll only_train=False
Linear out=10
"""
TAPS_NET = """Conv2D filters=8 kernel_size=3 input_shape=[8, 8, 1] padding=1
ReLU
TAPS steps=3 start=0
Linear out=32
ReLU
Linear out=10
"""
CASES = {
    "IBP with warm-up": (BATCH_NORM_NET, "Mix(Point, Box, 0.5)", "warmup_reg = 0.5"),
    "hybrid zonotope": (BATCH_NORM_NET, "Mix(Point, Sub(Lin(0, 1, 2, 0), Box), 0.5)", ""),
    "CROWN-IBP fused": (BATCH_NORM_NET, "CROWNIBP(fused=True)", ""),
    "SABR, centres": (
        BATCH_NORM_NET,
        "SmallBox(0.4, PGD(8, 0.5))",
        'bn_stats = "centres"\nprecise_bn = True',
    ),
    "IBP folded, warm-up": (BATCH_NORM_NET, "Mix(Point, Box(folded=True), 0.5)", "warmup_reg = 0.5"),
    "MTL-IBP": (BATCH_NORM_NET, "Mix(PGD(1, 10), Box(folded=True), 0.3)", "l1 = 0.0001\ngrad_clip = 10"),
    "Exp-IBP": (BATCH_NORM_NET, "ExpMix(PGD(1, 10), Box, 0.3)", ""),
    "CC-IBP": (BATCH_NORM_NET, "CCMix(PGD(1, 10), Box, 0.3)", ""),
    "TAPS": (TAPS_NET, "Box", ""),
}


def reads_in_an_epoch(tmp_path: Path, net: str, goal: str, extra: str, images: int) -> collections.Counter:
    """Where daic's code read tensors on the host during one training epoch, and how often."""
    (tmp_path / "net.net").write_text(net)
    (tmp_path / "s.dai").write_text(
        f'scheme S {{\n net = "net.net"\n data = Digits(subset={images})\n epsilon = Lin(0, 0.1, 2, 0)\n'
        f" goal = {goal}\n epochs = 2\n batch = 25\n {extra}\n}}\n"
    )
    scheme, model = lowered(plan_run(str(tmp_path / "s.dai"), None, None))
    trainer = Trainer(model, scheme, scheme.data.load(), log_every=10_000)
    found: collections.Counter = collections.Counter()
    originals = {name: getattr(torch.Tensor, name) for name in READS}

    def counting(name):
        def read(self, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith(str(ROOT)) and "/.venv" not in caller:
                found[(Path(caller).relative_to(ROOT).as_posix(), sys._getframe(1).f_lineno)] += 1
            return originals[name](self, *args, **kwargs)

        return read

    try:
        for name in READS:
            setattr(torch.Tensor, name, counting(name))
        trainer.train_epoch(0)
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
    return found


@pytest.mark.parametrize("case", CASES)
def test_a_training_step_reads_nothing_on_the_host(tmp_path, case):
    net, goal, extra = CASES[case]
    four = reads_in_an_epoch(tmp_path, net, goal, extra, 125)  # 100 training images: 4 steps of 25
    eight = reads_in_an_epoch(tmp_path, net, goal, extra, 250)  # 200: 8 steps
    assert four == eight
    # What is left is the epoch's loss, read once at its end.
    assert set(four) == {("runtime/training/trainer.py", _epoch_loss_line())}


def _epoch_loss_line() -> int:
    lines = (ROOT / "runtime" / "training" / "trainer.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if "loss = float(group.sum(running))" in line)
