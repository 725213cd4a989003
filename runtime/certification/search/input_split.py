"""Complete verification by splitting the input box: for networks of few inputs (ACAS Xu's 5), where the
box is wide and splitting ReLUs cannot narrow it, each undecided box is halved along the input that moves
its least margin most (`boxes.smear`), and the halves are bounded again, a batch at a time, until every box is
proved, a candidate of an open box (its centre, or its corner against the margin's gradient) leads to a
witness, or the time is up. Bounds hold over each box, and the boxes cover the whole one, so a proof of all
of them is a proof of it. The boxes of every image searched wait in one `Frontier`."""

from __future__ import annotations

import math
import time

import torch
from torch import Tensor, nn

from daic.runtime.certification.certify import Batch
from daic.runtime.certification.search.boxes import cut, margin_gradient
from daic.runtime.certification.search.budget import Budget
from daic.runtime.certification.search.frontier import Frontier
from daic.runtime.certification.search.images import Images
from daic.runtime.certification.search.policy import Search
from daic.runtime.certification.verification import CROWNBound

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
                narrow = self._round(model, images, boxes, scale)
            leaves += narrow
            given_up |= boxes.counts(len(images)) > MAX_BOXES
            boxes.drop_images(images.gone(lower.device) | given_up)
            images.charge(working, time.perf_counter() - began)
        self._ended(images, boxes, leaves.tolist(), given_up.tolist())
        return images.seconds

    def _round(self, model: nn.Module, images: Images, boxes: Frontier, scale: Tensor) -> Tensor:
        """The worst `batch` boxes of each image taken from `boxes` and bounded; the proved ones closed, the
        others' candidates tried and the rest halved onto `boxes`. Each image's boxes too narrow to cut."""
        n = len(images)
        picked = boxes.pop(self.batch, n)
        y = images.batch.y[images.batch_index.to(picked["image"].device)[picked["image"]]]
        bounds = CROWNBound().margins(model, picked["lower"], picked["upper"], y, images.batch.relu).amin(1)
        closed = bounds > 0
        proved = bounds.masked_fill(~closed, torch.inf)
        least = torch.full((n,), torch.inf, dtype=bounds.dtype, device=bounds.device)
        for j, low in enumerate(least.scatter_reduce(0, picked["image"], proved, "amin").tolist()):
            images.proved[j] = min(images.proved[j], low)
        still = Frontier(picked.take(~closed).columns | {"bound": bounds[~closed]})
        gradient = margin_gradient(model, still["lower"], still["upper"], y[~closed])
        self._falsify(model, images, still, gradient)
        halves, uncut = cut(still, gradient, scale[still["image"]])
        boxes.push(halves)
        return torch.bincount(still["image"][uncut], minlength=n)

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
