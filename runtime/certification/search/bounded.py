"""What bounding a batch of subdomains found (`Bounded`), and the batch operations the search applies to it:
keeping some subdomains, keeping or reordering some rows, finding the rows still open."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Bounded:
    """What bounding a batch found, per subdomain: ``lower`` ``(N, K)`` bounds of its margins, whether its
    splits contradict each other, the corner of its box that minimises its worst row's linear bound, its
    split nodes' bounds (``(N, *F)`` by node id), its coefficients on each splittable layer's output (for
    branching), and its slopes and multipliers at the step where each row was best (by output node id,
    ``(N, K, *F)``; empty without optimisation)."""

    lower: Tensor
    infeasible: Tensor
    corners: Tensor
    split_inputs: dict[int, tuple[Tensor, Tensor]]
    coefficients: dict[int, Tensor]
    alphas: dict[int, Tensor]
    betas: dict[int, Tensor]


def restricted(bounded: Bounded, keep: Tensor) -> Bounded:
    """Only the subdomains `keep` (a mask or indices) of `bounded`."""
    return Bounded(
        bounded.lower[keep], bounded.infeasible[keep], bounded.corners[keep],
        {k: (low[keep], up[keep]) for k, (low, up) in bounded.split_inputs.items()},
        {k: v[keep] for k, v in bounded.coefficients.items()},
        {k: v[keep] for k, v in bounded.alphas.items()}, {k: v[keep] for k, v in bounded.betas.items()},
    )  # fmt: skip


def rows_of(bounded: Bounded, margins: Tensor) -> Bounded:
    """`bounded` on the rows `margins` (``(N, K)`` indices among its rows) only, in that order."""

    def gathered(values: dict[int, Tensor]) -> dict[int, Tensor]:
        return {k: reordered(v, margins) for k, v in values.items()}

    return Bounded(
        bounded.lower.gather(1, margins), bounded.infeasible, bounded.corners, bounded.split_inputs,
        gathered(bounded.coefficients), gathered(bounded.alphas), gathered(bounded.betas),
    )  # fmt: skip


def reordered(value: Tensor, order: Tensor) -> Tensor:
    """`value` (``(N, K, *F)``, a value per row) with each subdomain's rows taken in its `order` (``(N, W)``
    row indices): ``(N, W, *F)``."""
    return value[torch.arange(len(order), device=order.device)[:, None], order]


def open_first(lower: Tensor, count: Tensor, width: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Which of each subdomain's first `count` rows (``(N,)``) its bounds `lower` (``(N, K)``) leave open
    (not above zero: a bound that is not a number is open), as row indices: the open ones first, in order,
    then the first repeated to `width` (default K; it may be more); how many are open (``(N,)``, at least
    one: a subdomain with none keeps its first); and the least bound of the rows proved (``(N,)``, infinity
    where none is). A margin proved on a subdomain holds on every part of it: its children need not bound
    it again."""
    within = torch.arange(lower.shape[1], device=lower.device) < count[:, None]
    still = ~(lower > 0) & within
    many = still.sum(1).clamp(min=1)
    slot = torch.arange(lower.shape[1] if width is None else width, device=lower.device)
    order = torch.argsort((~still).to(torch.int8), dim=1, stable=True)[:, slot.clamp(max=lower.shape[1] - 1)]
    order = torch.where(slot < many[:, None], order, order[:, :1])
    proved = lower.masked_fill(still | ~within, torch.inf).amin(1)
    return order, many, proved
