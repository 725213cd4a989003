"""What bounding a batch of subdomains found (`Bounded`), and the batch operations the search applies to it:
keeping some subdomains, padding their rows, keeping some rows."""

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


def padded(bounded: Bounded, most: int) -> Bounded:
    """`bounded` with its rows padded to `most` by repeating its first (a bound's least is unchanged)."""

    def pad(value: Tensor) -> Tensor:
        extra = most - value.shape[1]
        return (
            value if extra == 0 else torch.cat([value, value[:, :1].expand(-1, extra, *value.shape[2:])], 1)
        )

    return Bounded(
        pad(bounded.lower), bounded.infeasible, bounded.corners, bounded.split_inputs,
        {k: pad(v) for k, v in bounded.coefficients.items()}, {k: pad(v) for k, v in bounded.alphas.items()},
        {k: pad(v) for k, v in bounded.betas.items()},
    )  # fmt: skip


def rows_of(bounded: Bounded, margins: Tensor) -> Bounded:
    """`bounded` (every margin) on the rows `margins` (``(N, K)`` indices) only."""
    return Bounded(
        bounded.lower.gather(1, margins), bounded.infeasible, bounded.corners, bounded.split_inputs,
        {k: v.gather(1, expanded(margins, v)) for k, v in bounded.coefficients.items()},
        {k: v.gather(1, expanded(margins, v)) for k, v in bounded.alphas.items()}, {},
    )  # fmt: skip


def expanded(margins: Tensor, value: Tensor) -> Tensor:
    """`margins` ``(N, K)`` as gather indices over dim 1 of `value` ``(N, S, *F)``."""
    return margins.view(*margins.shape, *[1] * (value.dim() - 2)).expand(-1, -1, *value.shape[2:])
