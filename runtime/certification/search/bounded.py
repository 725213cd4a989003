"""What bounding a batch of subdomains found (`Bounded`), and the batch operations the search applies to it:
keeping some subdomains, padding their rows, joining parts bounded apart, keeping some rows."""

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


def joined(parts: list[Bounded], order: Tensor) -> Bounded:
    """The parts' subdomains one after another, taken in `order`; a multiplier one part lacks (it split no
    neuron of that layer) is zero there."""
    keys = {key for part in parts for key in part.betas}
    for part in parts:
        for key in keys - set(part.betas):
            part.betas[key] = torch.zeros_like(part.alphas[key])

    def cat(values: list[Tensor]) -> Tensor:
        return torch.cat(values)[order]

    first = parts[0]
    return Bounded(
        cat([p.lower for p in parts]), cat([p.infeasible for p in parts]), cat([p.corners for p in parts]),
        {k: (cat([p.split_inputs[k][0] for p in parts]), cat([p.split_inputs[k][1] for p in parts]))
         for k in first.split_inputs},
        {k: cat([p.coefficients[k] for p in parts]) for k in first.coefficients},
        {k: cat([p.alphas[k] for p in parts]) for k in first.alphas},
        {k: cat([p.betas[k] for p in parts]) for k in keys},
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
