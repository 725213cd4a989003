"""Complete verification by splitting the input box: for networks of few inputs (ACAS Xu's 5), where the
box is wide and splitting ReLUs cannot narrow it, each undecided box is halved along the input it is widest
in (relative to the whole box), and the halves are bounded again, a batch at a time, until every box is
proved, a box's centre is a counterexample, or the time is up. Bounds hold over each box, and the boxes
cover the whole one, so a proof of all of them is a proof of it."""

from __future__ import annotations

import time

import torch
from torch import Tensor, nn

from .certify import Batch, Search, falsify, least_margins
from .verification import CROWNDomain

MAX_BOXES = 200_000
"""The most boxes a search keeps open before it gives up (left unknown)."""


class InputSplit(Search):
    """Branch and bound over the input box, bounding each box with CROWN (see the module docstring)."""

    def __init__(self, timeout: float = 60.0, batch: int = 512) -> None:
        if timeout <= 0 or batch < 1:
            raise ValueError("InputSplit: timeout > 0 and batch >= 1, please")
        self.timeout, self.batch = float(timeout), int(batch)
        given = [f"timeout={self.timeout:g}"] if self.timeout != 60.0 else []
        given += [f"batch={self.batch}"] if self.batch != 512 else []
        self.label = f"InputSplit({', '.join(given)})" if given else "InputSplit"

    def _search(self, model: nn.Module, batch: Batch, i: int, deadline: float) -> None:
        lower, upper = batch.lower[i : i + 1], batch.upper[i : i + 1]
        scale = (upper - lower).clamp(min=torch.finfo(lower.dtype).tiny)
        proved = torch.inf
        while len(lower) and time.perf_counter() < deadline and len(lower) <= MAX_BOXES:
            now_lower, now_upper = lower[: self.batch], upper[: self.batch]
            lower, upper = lower[self.batch :], upper[self.batch :]
            if self._falsified(model, batch, i, now_lower, now_upper):
                return
            y = batch.y[i : i + 1].expand(len(now_lower))
            bounds = CROWNDomain().margins(model, now_lower, now_upper, y, batch.relu).amin(1)
            closed = bounds > 0
            if bool(closed.any()):
                proved = min(proved, float(bounds[closed].min()))
            halves = _halved(now_lower[~closed], now_upper[~closed], scale)
            lower, upper = torch.cat([lower, halves[0]]), torch.cat([upper, halves[1]])
        outcome = batch.outcomes[i]
        if len(lower) == 0:
            outcome.status, outcome.by, outcome.margin = "verified", self.label, proved

    def _falsified(self, model: nn.Module, batch: Batch, i: int, lower: Tensor, upper: Tensor) -> bool:
        """Runs the network on the boxes' centres (inside the property's box); one with a margin at or
        below zero falsifies it."""
        inner_lower, inner_upper = batch.inner_lower[i : i + 1], batch.inner_upper[i : i + 1]
        centres = torch.minimum(torch.maximum((lower + upper) / 2, inner_lower), inner_upper)
        margins = least_margins(model, centres, batch.y[i : i + 1].expand(len(centres)))
        worst = int(margins.argmin())
        # CPU: image numbers, read on the host; a CUDA tensor may be indexed by them as they are
        falsify(batch, torch.tensor([i]), centres[worst : worst + 1], margins[worst : worst + 1], self.label)
        return batch.outcomes[i].status == "falsified"


def _halved(lower: Tensor, upper: Tensor, scale: Tensor) -> tuple[Tensor, Tensor]:
    """Each box cut in two across the input where it is widest relative to the whole box: the lower
    halves, then the upper ones."""
    if len(lower) == 0:
        return lower, upper
    flat_lower, flat_upper = lower.flatten(1), upper.flatten(1)
    widest = ((flat_upper - flat_lower) / scale.flatten(1)).argmax(1, keepdim=True)
    middle = (flat_lower.gather(1, widest) + flat_upper.gather(1, widest)) / 2
    first_upper = flat_upper.scatter(1, widest, middle)
    second_lower = flat_lower.scatter(1, widest, middle)
    shape = lower.shape
    return (
        torch.cat([flat_lower, second_lower]).reshape(-1, *shape[1:]),
        torch.cat([first_upper, flat_upper]).reshape(-1, *shape[1:]),
    )
