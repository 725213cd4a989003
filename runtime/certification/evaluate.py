"""Measuring a trained network on a test set: accuracy, accuracy under attack, verified robustness.

Certificates must be true in floating point, so verification runs a float64 copy of the network (with
TF32 off on GPUs) and counts an image as verified only when lb(y_t - y_j) > 0 for every other class j,
by one of the domains of `verification` (Box, HBox, CROWN, alpha-CROWN), each in batches sized to its
memory budget.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor, nn

from daic.runtime.certification.attacks import mifgsm, pgd
from daic.runtime.certification.certify import Batch, Outcome, Step, cascade, certify_batch
from daic.runtime.certification.verification import HBoxBound
from daic.runtime.domains.balls import certified_balls, clipped_ball
from daic.runtime.layers.base import placement


class Test:
    """One column of the results table: which images pass."""

    column = ""
    needs_float64 = False

    def passed(
        self, model: nn.Module, x: Tensor, y: Tensor, lower: Tensor, upper: Tensor, relu: str
    ) -> Tensor:
        raise NotImplementedError

    def batch_size(self, model: nn.Module, shape: tuple[int, ...], default: int) -> int:
        return default


def correct(logits: Tensor, y: Tensor) -> Tensor:
    """Which images the logits classify as labelled: the label scores highest, and every score is a number
    (argmax would take a NaN for the highest score, and call a broken network right)."""
    return (logits.argmax(1) == y) & torch.isfinite(logits).all(1)


class Accuracy(Test):
    column = "Acc"

    def passed(self, model, x, y, lower, upper, relu):
        with torch.no_grad():
            return correct(model(x), y)


class MIFGSMAccuracy(Test):
    column = "MI-FGSM"

    def __init__(self, k: int = 20, mu: float = 0.8, step: float | None = None) -> None:
        self.k, self.mu, self.step = k, mu, step

    def passed(self, model, x, y, lower, upper, relu):
        adv = mifgsm(model, x, lower, upper, y, self.k, self.mu, self.step)
        with torch.no_grad():
            return correct(model(adv), y)


class PGDAccuracy(Test):
    column = "PGD"

    def __init__(self, k: int = 20, step: float | None = None, restarts: int = 1) -> None:
        self.k, self.step, self.restarts = k, step, restarts

    def passed(self, model, x, y, lower, upper, relu):
        generator = torch.Generator().manual_seed(0)
        adv = pgd(model, lower, upper, y, self.k, self.step, self.restarts, generator)
        with torch.no_grad():
            return correct(model(adv), y)


class Verify(Test):
    """Verified robustness by a domain, or by a cascade of them (a list, tried in order per image; an
    attack before the first costly one when one of them is complete, so that it spends no search on a
    falsifiable image; see `cascade`)."""

    needs_float64 = True

    def __init__(self, domain: Step | Sequence[Step] | None = None) -> None:
        if domain is None:
            domain = HBoxBound()
        self.steps = cascade([domain] if isinstance(domain, Step) else list(domain))
        self.column = "Ver " + " > ".join(step.label for step in self.steps if step.verifies)

    def passed(self, model, x, y, lower, upper, relu):
        outcomes = [Outcome(i, int(label)) for i, label in enumerate(y.tolist())]
        done = certify_batch(model, self.steps, Batch(x, y, lower, upper, outcomes, relu))
        return torch.tensor([o.status == "verified" for o in done], device=x.device)

    def batch_size(self, model, shape, default):
        return min(step.batch_size(model, shape, default) for step in self.steps)


def evaluate(
    model: nn.Module,
    tests: Iterable[Test],
    x: Tensor,
    y: Tensor,
    epsilon: float,
    value_range: tuple[float, float],
    batch: int = 200,
    relu: str = "hybrid",
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, float]:
    """Percent of test images passing each test, in the order given. Verification uses a float64 copy."""
    if not epsilon >= 0:  # an inverted box would "certify" everything
        raise ValueError(f"evaluate needs epsilon >= 0, got {epsilon}")
    was_training = model.training
    model.eval()
    float64 = None
    results: dict[str, float] = {}
    try:
        for test in tests:
            net = model
            if test.needs_float64:
                float64 = float64 or copy.deepcopy(model).double()
                net = float64
            passed = _passed(test, net, x, y, epsilon, value_range, batch, relu, progress)
            results[test.column] = 100.0 * passed / max(1, len(y))
    finally:
        model.train(was_training)
    return results


def _passed(
    test: Test, net: nn.Module, x: Tensor, y: Tensor, epsilon: float, value_range: tuple[float, float],
    batch: int, relu: str, progress: Callable[[str, int, int], None] | None,
) -> int:  # fmt: skip
    """How many of the images pass `test` on `net`, a batch of the test's size at a time."""
    device, dtype = placement(net)
    size = test.batch_size(net, tuple(x.shape[1:]), batch)
    passed = 0
    for start in range(0, len(y), size):
        xb = x[start : start + size].to(device=device, dtype=dtype)
        yb = y[start : start + size].to(device)
        if test.needs_float64:  # certification: boxes that contain the balls in exact arithmetic
            lower, upper = certified_balls(xb, epsilon, value_range)[:2]
        else:
            lower, upper = clipped_ball(xb, epsilon, value_range)
        passed += int(test.passed(net, xb, yb, lower, upper, relu).sum())
        if progress:
            progress(test.column, min(start + size, len(y)), len(y))
    return passed
