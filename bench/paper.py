"""The paper's own speed figures, measured the way `daic run` trains: seconds per epoch of its training
schemes (Table "networks compared", one RTX 2080 Ti) and HBox certification of a 10,000-image test set.

Each scheme is lowered from `stdlib/schemes.dai` with the network it names, exactly as `daic run` lowers
it, and trained by the same `Trainer` on random CIFAR10-shaped images (timing needs no real data). The
timed epoch is the scheme's last one, where every schedule has reached its final value (an epoch early in
a ramp skips the abstract parts whose weight is still 0), after one untimed epoch that warms up the
allocator and the kernel choices. Fewer images than a CIFAR10 epoch are scaled up to 50,000.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from importlib import resources

import torch
import workloads as W
from torch import nn

from daic.compiler.jobs import run as run_plan
from daic.runtime.certification.evaluate import Verify
from daic.runtime.certification.verification import HBoxBound
from daic.runtime.data.tensors import TensorData
from daic.runtime.training.scheme import Scheme
from daic.runtime.training.trainer import Trainer

CIFAR10_EPOCH, CIFAR10_TEST = 50_000, 10_000
TEST_SET_SECONDS = 600
"""The GPU target for HBox certification of ResNet-Tiny's test set."""


@dataclass(frozen=True)
class PaperRun:
    network: str
    scheme: str  # a scheme of stdlib/schemes.dai
    net_file: str | None  # another network of stdlib/nets for it, or None for the scheme's own
    paper_seconds: float  # seconds per epoch in the paper, on one RTX 2080 Ti
    target_seconds: float | None = None  # the GPU target (about a tenth of the paper's), where one is set


PAPER_RUNS: dict[str, PaperRun] = {
    "resnettiny_baseline": PaperRun("ResNet-Tiny", "Baseline", None, 106, 10),
    "resnettiny_fewcombo_baseline": PaperRun(
        "ResNet-Tiny FewCombo", "Baseline", "resnettiny_fewcombo.net", 209
    ),
    "resnet34_insamplpa": PaperRun("ResNet-34", "InSampLPA_R34", None, 176, 18),
    "densenet100_adv5islpa": PaperRun("DenseNet-100", "Adv5ISLPA_D100", None, 727, 73),
}


def _stdlib(*parts: str) -> str:
    return str(resources.files("daic.stdlib").joinpath(*parts))


def lowered(run: PaperRun) -> tuple[Scheme, nn.Module]:
    """The run's scheme and its network, made by `daic run`'s own lowering."""
    net = _stdlib("nets", run.net_file) if run.net_file else None
    return run_plan.lowered(run_plan.plan_run(_stdlib("schemes.dai"), run.scheme, net))


def epoch_seconds(name: str, images: int, device: torch.device) -> dict[str, float]:
    """Seconds of the timed epoch over `images` random images, and that scaled to a CIFAR10 epoch."""
    run = PAPER_RUNS[name]
    scheme, model = lowered(run)
    x, y = W.inputs("resnettiny", images)  # random CIFAR10-shaped images and labels
    data = TensorData(x, y, x[:1], y[:1], 10)
    trainer = Trainer(model, scheme, data, device=device)
    last = scheme.epochs - 1
    # With a progress callback, as under `daic run`: the loss is read every `log_every` steps.
    trainer.train_epoch(last, on_progress=lambda progress: None)
    row = trainer.train_epoch(last, on_progress=lambda progress: None)
    return {
        "batch": scheme.batch,
        "seconds": row["seconds"],
        "epoch_seconds": row["seconds"] * CIFAR10_EPOCH / images,
    }


def test_set_certification(images: int, device: torch.device) -> dict[str, float]:
    """HBox certification of `images` random images by ResNet-Tiny under the Baseline scheme, as `daic run`
    tests it (`Trainer.evaluate`: the float64 copy, the exact input zonotope, its own batching), and that
    scaled to the 10,000 images of the CIFAR10 test set."""
    scheme, model = lowered(PAPER_RUNS["resnettiny_baseline"])
    x, y = W.inputs("resnettiny", images, seed=1)
    verify = Verify(HBoxBound())

    def certify(count: int) -> tuple[float, float]:
        data = TensorData(x[:1], y[:1], x[:count], y[:count], 10)
        trainer = Trainer(model, dataclasses.replace(scheme, test=[verify]), data, device=device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        verified = trainer.evaluate()[verify.column]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start, verified

    certify(min(images, max(scheme.batch, 100)))  # warm-up at the size evaluate() batches by
    seconds, verified = certify(images)
    return {"seconds": seconds, "test_set_seconds": seconds * CIFAR10_TEST / images, "verified": verified}
