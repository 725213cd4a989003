"""Certification with linear relaxations, daic against auto_LiRPA 0.7 on the same images and bounds.

- CROWN: daic's `Symbolic` analysis with full CROWN intermediate bounds, not intersected with the interval
  ones (``tighten=False``: what auto_LiRPA's 'backward' method computes), against the peer's
  ``compute_bounds(method="backward")`` on the network as plain modules, both in float64 on the same
  batch; the largest difference of the margin lower bounds, and images per second. daic's default
  (intermediate bounds intersected with the interval ones, and the margins' better of CROWN and the
  folded intervals) certifies at least as many.
- alpha-CROWN: `AlphaCROWNBound` at the peer's defaults (20 Adam steps, rate 0.5 decayed by 0.98), the
  margins' slopes alone and every layer's (`layers="all"`), against the peer's
  "CROWN-Optimized" at its defaults (which optimises every layer's slopes), on the images CROWN leaves
  open: certified images, the margins' summed lower bound and seconds.

The networks: one trained here in seconds on the embedded digits (the quick start's scheme), so that the
bounds are those of a network trained to be certified; the paper's networks at their IBP initialisation
with a small epsilon (the bounds then say nothing of robustness, only of the work); and checkpoints
trained by `daic run` on MNIST, when the run is given them (`--crown-trained`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from daic.runtime.certification.verification import AlphaCROWNBound, CROWNBound
from daic.runtime.context import AbstractContext
from daic.runtime.domains import Symbolic


@dataclass
class Case:
    """A float64 network, its test images and labels, and the radius to certify."""

    name: str
    model: nn.Module
    x: Tensor
    y: Tensor
    eps: float


def trained_digits(epochs: int = 15) -> Case:
    """The quick start's network trained for `epochs` epochs of its scheme (seconds on a CPU)."""
    from daic.compiler.jobs.run import lowered, plan_run
    from daic.runtime.training.trainer import Trainer

    plan = plan_run("examples/quickstart.dai", None, None)
    scheme, model = lowered(plan)
    scheme.epochs = epochs
    scheme.test = []
    data = scheme.data.load(None, False)
    trainer = Trainer(model, scheme, data)
    for epoch in range(epochs):
        trainer.train_epoch(epoch)
    return Case("digits_conv (trained)", copy.deepcopy(model).double().eval(), data.test_x.double(),
                data.test_y, 0.1)  # fmt: skip


def random_case(name: str, images: int, eps: float) -> Case:
    """A workload's network at its IBP initialisation, random images, a small radius."""
    import workloads as W

    model = copy.deepcopy(W.build(name)).double().eval()
    x, y = W.inputs(name, images, seed=2)
    return Case(f"{name} (initialised)", model, x.double(), y, eps)


def trained_case(net: str, checkpoint: str, eps: float, data: str, images: int) -> Case:
    """A `daic run` checkpoint of an MNIST network, certified on the first `images` test images of the
    MNIST folder `data`."""
    import daic

    model = daic.load_network(net, checkpoint).double().eval()
    test = daic.load_data("MNIST", data)
    name = f"{Path(net).stem} ({Path(checkpoint).parent.name})"
    return Case(name, model, test.test_x[:images].double(), test.test_y[:images], eps)


def box(case: Case, images: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    x, y = case.x[:images], case.y[:images]
    return x, y, (x - case.eps).clamp(0, 1), (x + case.eps).clamp(0, 1)


def daic_crown(case: Case, images: int, tighten: bool) -> Tensor:
    """``(B, C - 1)`` margin lower bounds of full CROWN."""
    _, y, lower, upper = box(case, images)
    with torch.no_grad():
        out = case.model.abstract(
            Symbolic.input(lower, upper, crown=True, tighten=tighten), AbstractContext()
        )
        return out.margin_lower(y)


def daic_domain(case: Case, images: int, domain) -> Tensor:
    _, y, lower, upper = box(case, images)
    with torch.no_grad():
        return domain.margins(case.model, lower, upper, y, "hybrid")


def peer_bounds(case: Case, images: int, method: str) -> Tensor:
    """``(B, C - 1)`` margin lower bounds from auto_LiRPA (`method`: "backward" or "CROWN-Optimized")."""
    import lirpa

    x, y, lower, upper = box(case, images)
    return lirpa.margin_bounds(case.model, x, y, lower, upper, method)


def timed(action: Callable[[], Tensor], reps: int) -> tuple[Tensor, float]:
    """The result and the median seconds of `reps` calls (after one warm-up call)."""
    result = action()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - start)
    return result, sorted(times)[len(times) // 2]


def compare(case: Case, images: int, reps: int, with_peer: bool) -> dict[str, object]:
    """CROWN's figures of one network: bounds and seconds of both tools on its first `images` images."""
    row: dict[str, object] = {"case": case.name, "images": images}
    ours, row["crown_s"] = timed(lambda: daic_crown(case, images, tighten=False), reps)
    best, row["crown_default_s"] = timed(lambda: daic_domain(case, images, CROWNBound()), reps)
    row["crown_certified"] = int((ours.amin(1) > 0).sum())
    row["crown_default_certified"] = int((best.amin(1) > 0).sum())
    row["open"] = (best.amin(1) <= 0).nonzero().squeeze(1)
    if with_peer:
        theirs, row["peer_crown_s"] = timed(lambda: peer_bounds(case, images, "backward"), reps)
        row["difference"] = (float((ours - theirs).min()), float((ours - theirs).max()))
        row["peer_crown_certified"] = int((theirs.amin(1) > 0).sum())
    return row


ALPHAS = {layers: AlphaCROWNBound(layers=layers) for layers in ("output", "all")}
"""daic's alpha-CROWN at the peer's settings (20 steps, rate 0.5): the margins' slopes alone, and every
layer's."""


def compare_alpha(case: Case, open_images: Tensor, with_peer: bool) -> dict[str, object]:
    """alpha-CROWN's figures on the images CROWN leaves open (both optimise all 20 steps there: daic stops
    early only once every margin is proved): per tool, images certified, the margins' summed bound and
    seconds."""
    sub = Case(case.name, case.model, case.x[open_images], case.y[open_images], case.eps)
    n = len(open_images)
    row: dict[str, object] = {"case": case.name, "images": n}
    tools = {f"daic {layers}": (lambda d=domain: daic_domain(sub, n, d)) for layers, domain in ALPHAS.items()}
    if with_peer:
        tools["LiRPA"] = lambda: peer_bounds(sub, n, "CROWN-Optimized")
    for tool, bound in tools.items():
        found, seconds = timed(bound, 1)
        row[tool] = (int((found.amin(1) > 0).sum()), float(found.sum()), seconds)
    return row


def crown_peak_child(name: str, eps: float) -> int:
    """Bytes of peak resident memory over full CROWN of one image of `name` (float64), in this process."""
    import workloads as W

    case = random_case(name, 1, eps)
    with torch.no_grad():
        return W.peak_bytes(lambda: lambda: daic_crown(case, 1, tighten=True), torch.device("cpu"), 1)
