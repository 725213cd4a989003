"""Complete verification by splitting the input box: for networks of few inputs (ACAS Xu's 5), where the
box is wide and splitting ReLUs cannot narrow it, each undecided box is halved along the input that moves
its least margin most (`_smear`), and the halves are bounded again, a batch at a time, until every box is
proved, a box's centre is a counterexample, or the time is up. Bounds hold over each box, and the boxes
cover the whole one, so a proof of all of them is a proof of it."""

from __future__ import annotations

import time

import torch
from torch import Tensor, nn

from daic.runtime.certification.certify import Batch, Search, falsify, least_margins
from daic.runtime.certification.verification import CROWNBound
from daic.runtime.domains.element import margin_others

WIDTH_WEIGHT = 0.3
"""The weight of each input's width (relative to the whole box) beside its normalised smear in the choice
of cut. On ACAS Xu's property 1 (networks 1_1 to 1_6, this machine's CPU) 0.3 proved them all in 0.5 to 33
s, where the widest input alone (weight 1, no smear) left two past 20 s and a weight of 0.001 others."""
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
            bounds = CROWNBound().margins(model, now_lower, now_upper, y, batch.relu).amin(1)
            closed = bounds > 0
            if bool(closed.any()):
                proved = min(proved, float(bounds[closed].min()))
            open_lower, open_upper = now_lower[~closed], now_upper[~closed]
            halves = _halved(open_lower, open_upper, _smear(model, open_lower, open_upper, y[~closed], scale))
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


def _smear(model: nn.Module, lower: Tensor, upper: Tensor, y: Tensor, scale: Tensor) -> Tensor:
    """How much each input of each box moves its least margin: the margin's gradient at the box's centre
    times the box's width there (ReluVal's smear, Wang et al. 2018), normalised per box, plus the relative
    width (`WIDTH_WEIGHT`) so that an input the gradient misses is still cut in time. Only the choice of
    cut depends on it, never a bound."""
    if len(lower) == 0:
        return lower
    centres = ((lower + upper) / 2).requires_grad_(True)
    with torch.enable_grad():
        logits = model(centres)
        rows, _ = margin_others(y, logits.shape[1], logits.dtype)
        torch.einsum("bsc,bc->bs", rows, logits).amin(1).sum().backward()
    width = (upper - lower) / scale
    smear = centres.grad.abs() * (upper - lower)
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
