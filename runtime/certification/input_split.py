"""Complete verification by splitting the input box: for networks of few inputs (ACAS Xu's 5), where the
box is wide and splitting ReLUs cannot narrow it, each undecided box is halved along the input that moves
its least margin most (`_smear`), and the halves are bounded again, a batch at a time, until every box is
proved, a candidate of an open box (its centre, or its corner against the margin's gradient) leads to a
witness, or the time is up. Bounds hold over each box, and the boxes
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
        proved = least_open = torch.inf  # least_open: every open box lies in one bounded this low or more
        points = 0  # boxes of one point left open
        while len(lower) and time.perf_counter() < deadline and len(lower) <= MAX_BOXES:
            now_lower, now_upper = lower[: self.batch], upper[: self.batch]
            lower, upper = lower[self.batch :], upper[self.batch :]
            y = batch.y[i : i + 1].expand(len(now_lower))
            bounds = CROWNBound().margins(model, now_lower, now_upper, y, batch.relu).amin(1)
            closed = bounds > 0
            # The least bound of the closed boxes and of the open ones, read from the device at once.
            lows = torch.stack(
                [bounds.masked_fill(~closed, torch.inf).min(), bounds.masked_fill(closed, torch.inf).min()]
            )
            proved, least_open = (
                min(old, new) for old, new in zip((proved, least_open), lows.tolist(), strict=True)
            )
            open_lower, open_upper = now_lower[~closed], now_upper[~closed]
            gradient = _margin_gradient(model, open_lower, open_upper, y[~closed])
            if self._falsified(model, batch, i, open_lower, open_upper, gradient):
                return
            halves, narrow = _cut(open_lower, open_upper, gradient, scale)
            points += narrow
            lower, upper = torch.cat([lower, halves[0]]), torch.cat([upper, halves[1]])
        self._ended(batch, i, len(lower), points, proved, least_open)

    def _ended(
        self, batch: Batch, i: int, still_open: int, points: int, proved: float, least_open: float
    ) -> None:
        """Image i's outcome once the search stops with `still_open` boxes queued and `points` boxes too
        narrow to cut left undecided: verified when neither is left, else unknown saying why."""
        outcome = batch.outcomes[i]
        if outcome.status != "unknown":
            return
        if still_open == 0 and points == 0:
            outcome.status, outcome.by, outcome.margin = "verified", self.label, proved
            return
        if least_open < torch.inf:
            batch.best[i] = max(float(batch.best[i]), least_open)
        outcome.timed_out = 0 < still_open <= MAX_BOXES
        if outcome.timed_out:
            outcome.message = f"{self.label}: the time ran out with {still_open} boxes open"
        elif still_open:
            outcome.message = f"{self.label}: more than {MAX_BOXES} boxes open"
        else:
            outcome.message = (
                f"{self.label}: {points} boxes too narrow to cut are neither proved nor a witness"
            )

    def _falsified(
        self, model: nn.Module, batch: Batch, i: int, lower: Tensor, upper: Tensor, gradient: Tensor
    ) -> bool:
        """Runs the network on the open boxes' centres and on their corners against the margin's gradient
        there (where the linearised margin is least); the candidate of least margin falsifies the property
        if it leads to a witness."""
        if len(lower) == 0:
            return False
        centres = (lower + upper) / 2
        corners = torch.where(gradient > 0, lower, upper)
        points = torch.cat([centres, corners])
        margins = least_margins(model, points, batch.y[i : i + 1].expand(len(points)))
        worst = int(margins.argmin())
        # CPU: image numbers, read on the host; a CUDA tensor may be indexed by them as they are
        falsify(model, batch, torch.tensor([i]), points[worst : worst + 1], margins[worst : worst + 1],
                self.label)  # fmt: skip
        return batch.outcomes[i].status == "falsified"


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


def _cut(lower: Tensor, upper: Tensor, gradient: Tensor, scale: Tensor) -> tuple[tuple[Tensor, Tensor], int]:
    """The boxes halved (`_halved` by `_smear`), and how many could not be: an input can be cut where a
    float lies strictly inside its interval, and a box none of whose inputs can (one point, or a float's
    width) is a leaf, its bound and its candidates all there is."""
    middle = (lower + upper) / 2
    movable = (middle > lower) & (middle < upper)
    cut = movable.flatten(1).any(1)
    lower, upper, gradient = lower[cut], upper[cut], gradient[cut]
    smear = _smear(lower, upper, gradient, scale).masked_fill(~movable[cut], -torch.inf)
    return _halved(lower, upper, smear), int((~cut).sum())


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
