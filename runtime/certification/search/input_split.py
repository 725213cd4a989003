"""Complete verification by splitting the input box: for networks of few inputs (ACAS Xu's 5), where the
box is wide and splitting ReLUs cannot narrow it, each undecided box is halved along the input that moves
its least margin most (`_smear`), and the halves are bounded again, a batch at a time, until every box is
proved, a candidate of an open box (its centre, or its corner against the margin's gradient) leads to a
witness, or the time is up. Bounds hold over each box, and the boxes cover the whole one, so a proof of all
of them is a proof of it. The boxes of every image searched wait in one `Frontier`."""

from __future__ import annotations

import math
import time

import torch
from torch import Tensor, nn

from daic.runtime.certification.certify import Batch
from daic.runtime.certification.search.budget import Budget
from daic.runtime.certification.search.frontier import Frontier
from daic.runtime.certification.search.images import Images
from daic.runtime.certification.search.policy import Search
from daic.runtime.certification.verification import CROWNBound
from daic.runtime.domains.element import margin_others

WIDTH_WEIGHT = 0.3
"""The weight of each input's width (relative to the whole box) beside its normalised smear in the choice
of cut. On ACAS Xu's property 1 (networks 1_1 to 1_6, this machine's CPU) 0.3 proved them all in 0.5 to 33
s, where the widest input alone (weight 1, no smear) left two past 20 s and a weight of 0.001 others."""
MAX_BOXES = 200_000
"""The most boxes a search keeps open an image before it gives up (left unknown)."""


class InputSplit(Search):
    """Branch and bound over the input box, bounding each box with CROWN (see the module docstring)."""

    def __init__(self, timeout: float = 60.0, batch: int = 512) -> None:
        if timeout <= 0 or batch < 1:
            raise ValueError("InputSplit: timeout > 0 and batch >= 1, please")
        self.timeout, self.batch = float(timeout), int(batch)
        given = [f"timeout={self.timeout:g}"] if self.timeout != 60.0 else []
        given += [f"batch={self.batch}"] if self.batch != 512 else []
        self.label = f"InputSplit({', '.join(given)})" if given else "InputSplit"

    def _search(self, model: nn.Module, batch: Batch, pending: Tensor, budget: Budget) -> list[float]:
        images = Images(batch, pending)
        index = pending.to(batch.lower.device)
        lower, upper = batch.lower[index], batch.upper[index]
        image = torch.arange(len(pending), device=lower.device)
        boxes = Frontier({"bound": torch.full_like(image, -math.inf, dtype=lower.dtype), "image": image,
                          "lower": lower, "upper": upper})  # fmt: skip
        scale = (upper - lower).clamp(min=torch.finfo(lower.dtype).tiny)
        leaves = torch.zeros(len(pending), dtype=torch.long, device=lower.device)  # boxes of one point open
        given_up = torch.zeros(len(pending), dtype=torch.bool, device=lower.device)
        while len(boxes) and budget.fits(0.0):
            began = time.perf_counter()
            working = boxes.counts(len(images)).nonzero().flatten().tolist()
            with budget.phase("rounds"):
                boxes, narrow = self._round(model, images, boxes, scale)
            leaves += narrow
            given_up |= boxes.counts(len(images)) > MAX_BOXES
            boxes = boxes.drop_images(images.gone(lower.device) | given_up)
            images.charge(working, time.perf_counter() - began)
        self._ended(images, boxes, leaves.tolist(), given_up.tolist())
        return images.seconds

    def _round(
        self, model: nn.Module, images: Images, boxes: Frontier, scale: Tensor
    ) -> tuple[Frontier, Tensor]:
        """The worst `batch` boxes of each image bounded; the proved ones closed, the others' candidates
        tried and the rest halved. The boxes left, and each image's boxes too narrow to cut."""
        n = len(images)
        picked, rest = boxes.pick(self.batch, n)
        y = images.batch.y[images.batch_index.to(picked["image"].device)[picked["image"]]]
        bounds = CROWNBound().margins(model, picked["lower"], picked["upper"], y, images.batch.relu).amin(1)
        closed = bounds > 0
        proved = bounds.masked_fill(~closed, torch.inf)
        least = torch.full((n,), torch.inf, dtype=bounds.dtype, device=bounds.device)
        for j, low in enumerate(least.scatter_reduce(0, picked["image"], proved, "amin").tolist()):
            images.proved[j] = min(images.proved[j], low)
        still = picked.take(~closed)
        still.columns["bound"] = bounds[~closed]
        gradient = _margin_gradient(model, still["lower"], still["upper"], y[~closed])
        self._falsify(model, images, still, gradient)
        halves, narrow = _cut(still, gradient, scale[still["image"]], n)
        return rest.push(halves), narrow

    def _falsify(self, model: nn.Module, images: Images, boxes: Frontier, gradient: Tensor) -> None:
        """Runs the network on the open boxes' centres and on their corners against the margin's gradient
        there (where the linearised margin is least); each image's candidate of least margin falsifies it
        if it leads to a witness."""
        if not len(boxes):
            return
        lower, upper = boxes["lower"], boxes["upper"]
        points = torch.cat([(lower + upper) / 2, torch.where(gradient > 0, lower, upper)])
        images.falsify(model, points, boxes["image"].repeat(2), self.label)

    def _ended(self, images: Images, boxes: Frontier, leaves: list[int], given_up: list[bool]) -> None:
        """Each image's outcome once the search stops with boxes queued and boxes too narrow to cut left
        undecided: verified when neither is left (and it kept within `MAX_BOXES`), else unknown saying
        why."""
        n = len(images)
        still_open, least_open = boxes.counts(n).tolist(), boxes.least_bounds(n).tolist()
        for j in range(n):
            outcome = images.outcome(j)
            if outcome.status != "unknown":
                continue
            if given_up[j]:
                outcome.message = f"{self.label}: more than {MAX_BOXES} boxes open"
                continue
            if still_open[j] == 0 and leaves[j] == 0:
                outcome.status, outcome.by, outcome.margin = "verified", self.label, images.proved[j]
                continue
            i = int(images.batch_index[j])
            if least_open[j] < math.inf:
                images.batch.best[i] = max(float(images.batch.best[i]), least_open[j])
            outcome.timed_out = still_open[j] > 0
            if outcome.timed_out:
                outcome.message = f"{self.label}: the time ran out with {still_open[j]} boxes open"
            else:
                outcome.message = (
                    f"{self.label}: {leaves[j]} boxes too narrow to cut are neither proved nor a witness"
                )


def _margin_gradient(model: nn.Module, lower: Tensor, upper: Tensor, y: Tensor) -> Tensor:
    """The gradient of each box's least margin at its centre."""
    centres = ((lower + upper) / 2).requires_grad_(True)
    if len(lower) == 0:
        return lower
    with torch.enable_grad():
        logits = model(centres)
        rows, _ = margin_others(y, logits.shape[1], logits.dtype)
        (grad,) = torch.autograd.grad(torch.einsum("bsc,bc->bs", rows, logits).amin(1).sum(), centres)
    return grad


def _cut(boxes: Frontier, gradient: Tensor, scale: Tensor, images: int) -> tuple[Frontier, Tensor]:
    """The boxes halved (`_halved` by `_smear`), and how many of each image's could not be: an input can be
    cut where a float lies strictly inside its interval, and a box none of whose inputs can (one point, or
    a float's width) is a leaf, its bound and its candidates all there is."""
    lower, upper = boxes["lower"], boxes["upper"]
    middle = (lower + upper) / 2
    movable = (middle > lower) & (middle < upper)
    cut = movable.flatten(1).any(1)
    narrow = torch.bincount(boxes["image"][~cut], minlength=images)
    boxes, gradient, scale = boxes.take(cut), gradient[cut], scale[cut]
    smear = _smear(boxes["lower"], boxes["upper"], gradient, scale).masked_fill(~movable[cut], -torch.inf)
    halves = _halved(boxes["lower"], boxes["upper"], smear)
    twice = {name: torch.cat([column, column]) for name, column in boxes.columns.items()}
    twice["lower"], twice["upper"] = halves
    return Frontier(twice), narrow


def _smear(lower: Tensor, upper: Tensor, gradient: Tensor, scale: Tensor) -> Tensor:
    """How much each input of each box moves its least margin: the margin's `gradient` at the box's
    centre times the box's width there (ReluVal's smear, Wang et al. 2018), normalised per box, plus the
    relative width (`WIDTH_WEIGHT`) so that an input the gradient misses is still cut in time. Only the
    choice of cut depends on it, never a bound."""
    if len(lower) == 0:
        return lower
    width = (upper - lower) / scale
    smear = gradient.abs() * (upper - lower)
    peak = smear.flatten(1).amax(1).clamp(min=torch.finfo(smear.dtype).tiny)
    return smear / peak.view(-1, *[1] * (smear.dim() - 1)) + WIDTH_WEIGHT * width


def _halved(lower: Tensor, upper: Tensor, score: Tensor) -> tuple[Tensor, Tensor]:
    """Each box cut in two across the input of the highest `score`: the lower halves, then the upper
    ones."""
    if len(lower) == 0:
        return lower, upper
    flat_lower, flat_upper = lower.flatten(1), upper.flatten(1)
    chosen = score.flatten(1).argmax(1, keepdim=True)
    middle = (flat_lower.gather(1, chosen) + flat_upper.gather(1, chosen)) / 2
    first_upper = flat_upper.scatter(1, chosen, middle)
    second_lower = flat_lower.scatter(1, chosen, middle)
    shape = lower.shape
    return (
        torch.cat([flat_lower, second_lower]).reshape(-1, *shape[1:]),
        torch.cat([first_upper, flat_upper]).reshape(-1, *shape[1:]),
    )
