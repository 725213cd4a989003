"""Counterexamples that hold where they are checked.

A point found by an attack, a search or a linear program falsifies only if it is a counterexample for
everyone who checks it: its coordinates are float32 numbers (the networks' input type; a checker reads a
witness as float32) inside the box exactly, and the network violates the property there both in exact
arithmetic of its stored weights and as a float32 checker runs it (VNN-COMP's: onnxruntime). A float64
evaluation alone is neither: on a tie below its resolution it can answer either way.

`Witnesses.admit` turns candidate points into such witnesses or refuses them. A candidate is first moved
to the nearest float32 point of the box; if that fails either check, to points pushed against the margin's
gradient by growing fractions of the box's width (a violation that float32 rounding or a tie undoes is
often a step away). The exact check bounds the network's outputs at the point with outward-rounded
interval arithmetic (`outward_rounding`, a Box of one point): the violation holds for every value in
those intervals, so for the exact one. A violation smaller than the intervals' width (about 1e-15 of the
outputs' scale) is refused: the point is then no answer, and the search goes on.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from daic.runtime.context import AbstractContext
from daic.runtime.domains.box import Box
from daic.runtime.domains.rounding import outward_rounding
from daic.runtime.layers.base import placement

PUSHES = (2.0**-20, 2.0**-12, 2.0**-6, 2.0**-2, 1.0)
"""The fractions of the box's width a refused candidate is moved by against the margin's gradient (each
coordinate clipped to the box): from a few float32 steps to the box's far corner."""


def float32_inside(points: Tensor, lower: Tensor, upper: Tensor) -> tuple[Tensor, Tensor]:
    """The float32 numbers nearest `points` inside ``[lower, upper]`` (float64, as float64 values), and
    per point whether every coordinate has one (a box narrower than float32's spacing may hold none)."""
    q = points.clamp(min=lower, max=upper).float()
    up = torch.full_like(q, math.inf)
    q = torch.where(q.double() < lower, torch.nextafter(q, up), q)
    q = torch.where(q.double() > upper, torch.nextafter(q, -up), q)
    near = q.double()
    inside = ((near >= lower) & (near <= upper)).flatten(1).all(1)
    return near, inside


def output_bounds(model: nn.Module, points: Tensor, relu: str = "hybrid") -> tuple[Tensor, Tensor]:
    """Intervals that contain the network's outputs at `points` computed in exact arithmetic: the
    interval domain on boxes of one point, rounded outward."""
    with torch.no_grad(), outward_rounding():
        out = model.abstract(Box.from_bounds(points, points), AbstractContext(training=False, relu=relu))
        lower, upper = out.bounds()
    return lower.flatten(1), upper.flatten(1)


class Witnesses:
    """Which candidate points are counterexamples (see the module docstring); a subclass says what a
    violation is (`violated`) and who checks it (`checker`)."""

    checker = ""

    def violated(self, points: Tensor, images: Tensor) -> Tensor:
        """``(K,)``: whether each point (float32 numbers, inside its image's box) violates its image's
        property both exactly and in the checker's float32."""
        raise NotImplementedError

    def admit(
        self, model: nn.Module, points: Tensor, images: Tensor, lower: Tensor, upper: Tensor, target: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The witnesses for candidate `points` of `images` (their boxes `lower`/`upper`, their labels in
        the certifying `model`: `target`): each point moved as the module docstring says, and whether one
        was found."""
        images = images.to(points.device)
        near, inside = float32_inside(points, lower, upper)
        found = inside & self.violated(near, images).to(inside.device)
        if bool(found.all()):
            return near, found
        rest = (~found).nonzero().squeeze(1)
        pushed, ok = self._pushed(model, points[rest], images[rest], lower[rest], upper[rest], target[rest])
        near[rest] = torch.where(ok.view(-1, *[1] * (near.dim() - 1)), pushed, near[rest])
        found[rest] = ok
        return near, found

    def _pushed(
        self, model: nn.Module, points: Tensor, images: Tensor, lower: Tensor, upper: Tensor, target: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The first of `PUSHES` that makes each point a witness, and whether one did."""
        step = -_margin_gradient(model, points, target).sign() * (upper - lower)
        tries = torch.cat([points + fraction * step for fraction in PUSHES])
        n = len(points)
        many = len(PUSHES)
        near, inside = float32_inside(tries, lower.repeat(many, *[1] * (lower.dim() - 1)),
                                      upper.repeat(many, *[1] * (upper.dim() - 1)))  # fmt: skip
        ok = inside & self.violated(near, images.repeat(many)).to(inside.device)
        ok = ok.view(many, n)
        first = ok.to(torch.uint8).argmax(0)
        return near.view(many, n, *points.shape[1:])[first, torch.arange(n, device=near.device)], ok.any(0)


def _margin_gradient(model: nn.Module, points: Tensor, target: Tensor) -> Tensor:
    """The gradient of each point's least margin ``min_j (y_t - y_j)`` in the certifying network."""
    x = points.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        logits = model(x)
        others = logits.scatter(1, target[:, None], -math.inf)
        margin = logits.gather(1, target[:, None]).squeeze(1) - others.amax(1)
        (grad,) = torch.autograd.grad(margin.sum(), x)
    return grad


class Misclassified(Witnesses):
    """Robustness: a point falsifies an image when some other class scores at least the label, exactly
    (`output_bounds` of the certifying float64 network, whose weights are the stored ones) and in the
    network's float32 copy (`checker`)."""

    checker = "torch float32"

    def __init__(self, model: nn.Module, fast: nn.Module, target: Tensor, relu: str) -> None:
        self.model, self.fast, self.target, self.relu = model, fast, target, relu

    def violated(self, points: Tensor, images: Tensor) -> Tensor:
        if len(points) == 0:
            return torch.zeros(0, dtype=torch.bool, device=points.device)
        target = self.target[images]
        low, high = output_bounds(self.model, points, self.relu)
        exact = _some_other_at_least(low, high.gather(1, target[:, None]), target)
        with torch.no_grad():
            logits = self.fast(points.to(_dtype(self.fast))).flatten(1)
        at_target = logits.gather(1, target[:, None])
        checked = _some_other_at_least(logits, at_target, target)
        return exact & checked


def _some_other_at_least(others: Tensor, at_target: Tensor, target: Tensor) -> Tensor:
    """Whether some class but the target has ``others[j] >= at_target`` (compared, never subtracted)."""
    reached = others >= at_target
    return reached.scatter(1, target[:, None], False).any(1)


def _dtype(model: nn.Module) -> torch.dtype:
    return placement(model)[1]
