"""Measuring a trained network on a test set: accuracy, accuracy under attack, verified robustness.

Certificates must be true in floating point, so verification runs a float64 copy of the network (with
TF32 off on GPUs) and counts an image as verified only when lb(y_t - y_j) > 0 for every other class j.
`Box` propagates intervals; `HBox` propagates the exact input zonotope (one correlated term per input
dimension) through the hybrid zonotope transformers with `only_train` layers skipped, as the reference
implementation certified; its images go in batches sized to a memory budget. It leaves out the terms that
die on the way (`domains.dropping_dead_terms`), which changes no bound and saves most of the work.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from contextlib import contextmanager, nullcontext

import torch
from torch import Tensor, nn

from .attacks import mifgsm, pgd
from .context import AbstractContext
from .domains import Box, HybridZonotope, dropping_dead_terms
from .layers import DecorrelateMin
from .losses import certified


@contextmanager
def exact_float():
    """TF32 off for the duration (PyTorch enables it for cuDNN convolutions by default)."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


class BoxDomain:
    """Interval bound propagation."""

    name = "Box"

    def propagate(self, model: nn.Module, lower: Tensor, upper: Tensor, relu: str) -> object:
        return model.abstract(Box.from_bounds(lower, upper), AbstractContext(training=False, relu=relu))

    def batch_size(self, model: nn.Module, shape: tuple[int, ...], default: int) -> int:
        return default


class HBoxDomain:
    """The exact input zonotope through the hybrid zonotope transformers."""

    name = "HBox"
    budget_bytes = 2 * 2**30

    def propagate(self, model: nn.Module, lower: Tensor, upper: Tensor, relu: str) -> object:
        value = HybridZonotope.exact_from_bounds(lower, upper)
        dropping = nullcontext() if slot_count_matters(model, training=False) else dropping_dead_terms()
        with dropping:
            return model.abstract(value, AbstractContext(training=False, relu=relu))

    def batch_size(self, model: nn.Module, shape: tuple[int, ...], default: int) -> int:
        """Images per batch so that (terms x images x widest activation) float64 values fit the budget."""
        widest = _widest_activation(model, shape)
        per_image = (math.prod(shape) + 2) * widest * 8
        return max(1, min(default, self.budget_bytes // per_image))


def slot_count_matters(model: nn.Module, training: bool) -> bool:
    """Whether some layer acting in this mode depends on the number of term slots, so that dead ones must
    be kept: a DecorrelateMin that removes a count of terms (``num_to_keep=False``) would remove live terms
    in place of the dead ones left out."""
    return any(
        isinstance(m, DecorrelateMin) and not m.num_to_keep and (training or not m.only_train)
        for m in model.modules()
    )


def _widest_activation(model: nn.Module, shape: tuple[int, ...]) -> int:
    sizes = [math.prod(shape)]
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: sizes.append(out[0].numel()))
        for m in model.modules()
        if not list(m.children())
    ]
    try:
        with torch.no_grad():
            parameter = next(model.parameters(), None)
            model(
                torch.zeros(
                    1,
                    *shape,
                    device=parameter.device if parameter is not None else "cpu",
                    dtype=parameter.dtype if parameter is not None else torch.float32,
                )
            )
    finally:
        for hook in hooks:
            hook.remove()
    return max(sizes)


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


class Accuracy(Test):
    column = "Acc"

    def passed(self, model, x, y, lower, upper, relu):
        with torch.no_grad():
            return model(x).argmax(1) == y


class MIFGSM(Test):
    column = "MI-FGSM"

    def __init__(self, k: int = 20, mu: float = 0.8, step: float = 0.0031373) -> None:
        self.k, self.mu, self.step = k, mu, step

    def passed(self, model, x, y, lower, upper, relu):
        adv = mifgsm(model, x, lower, upper, y, self.k, self.mu, self.step)
        with torch.no_grad():
            return model(adv).argmax(1) == y


class PGD(Test):
    column = "PGD"

    def __init__(self, k: int = 20, step: float | None = None, restarts: int = 1) -> None:
        self.k, self.step, self.restarts = k, step, restarts

    def passed(self, model, x, y, lower, upper, relu):
        generator = torch.Generator().manual_seed(0)
        adv = pgd(model, lower, upper, y, self.k, self.step, self.restarts, generator)
        with torch.no_grad():
            return model(adv).argmax(1) == y


class Verify(Test):
    needs_float64 = True

    def __init__(self, domain: BoxDomain | HBoxDomain | None = None) -> None:
        self.domain = domain or HBoxDomain()
        self.column = f"Ver {self.domain.name}"

    def passed(self, model, x, y, lower, upper, relu):
        with torch.no_grad(), exact_float():
            return certified(self.domain.propagate(model, lower, upper, relu), y)

    def batch_size(self, model, shape, default):
        return self.domain.batch_size(model, shape, default)


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
    exact = None
    results: dict[str, float] = {}
    device = next(model.parameters()).device
    a, b = value_range
    try:
        for test in tests:
            net = model
            if test.needs_float64:
                exact = exact or copy.deepcopy(model).double()
                net = exact
            dtype = next(net.parameters()).dtype
            size = test.batch_size(net, tuple(x.shape[1:]), batch)
            passed = 0
            for start in range(0, len(y), size):
                xb = x[start : start + size].to(device=device, dtype=dtype)
                yb = y[start : start + size].to(device)
                lower, upper = (xb - epsilon).clamp(min=a), (xb + epsilon).clamp(max=b)
                passed += int(test.passed(net, xb, yb, lower, upper, relu).sum())
                if progress:
                    progress(test.column, min(start + size, len(y)), len(y))
            results[test.column] = 100.0 * passed / max(1, len(y))
    finally:
        model.train(was_training)
    return results
