"""Where branch and bound splits: each subdomain's neurons ranked by how much their relaxation costs its
bound (the intercept score of BaBSR, Bunel et al. 2020), the best of a few chosen by bounding their
children (filtered smart branching, De Palma et al. 2021), and the children made, all as tensors."""

from __future__ import annotations

import itertools
import math

import torch
from torch import Tensor

from daic.runtime.certification.search.bounded import Bounded
from daic.runtime.certification.search.bounding import Layout

MAX_LEVELS = 7
"""The most neurons a subdomain is split on in one round (2 ** 7 children), as alpha-beta-CROWN's."""


def ranked_neurons(bounded: Bounded, layout: Layout, count: int, rows: Tensor | None = None) -> Tensor:
    """``(N, count)``: each subdomain's best-scored unstable neurons (flat over the `layout`), best first;
    -1 past its last. A neuron's score is what the gap between its relaxation's intercepts (the upper's, for
    the family's splittable members) lowers the rows still at or below zero (of each subdomain's first
    `rows`, ``(N,)``, where given: the others repeat its first), with the interval width as a tie-break."""
    if not layout.inputs:  # nothing branch and bound may split: every subdomain is a leaf
        return torch.full((len(bounded.lower), count), -1, dtype=torch.long, device=bounded.lower.device)
    open_rows = bounded.lower <= 0  # (N, K)
    if rows is not None:
        open_rows &= torch.arange(open_rows.shape[1], device=rows.device) < rows[:, None]
    open_rows = open_rows.to(bounded.lower.dtype)
    scores = {}
    for node_in, node_out, layer in zip(layout.inputs, layout.outputs, layout.layers, strict=True):
        lower, upper = bounded.split_inputs[node_in]
        lines = layer.relaxation(lower, upper)
        # A split at zero is what a member takes: a neuron on one side is split (a smooth one stays relaxed).
        intercept, unstable = lines.ub - lines.lb, ~lines.exact & (lower < 0) & (upper > 0)
        coefficients = bounded.coefficients[node_out]  # (N, K, *F): the rows on the layer's output
        mask = open_rows.view(*open_rows.shape, *[1] * (coefficients.dim() - 2))
        weight = (mask * (-coefficients).clamp(min=0)).sum(1)
        score = weight * intercept + 1e-6 * (upper - lower)
        scores[node_in] = torch.where(unstable, score, -torch.inf)
    flat = layout.flat(scores)
    values, indices = flat.topk(min(count, flat.shape[1]), dim=1)
    return indices.masked_fill(values == -torch.inf, -1)


def trial_signs(signs: Tensor, candidates: Tensor) -> Tensor:
    """``(2 P C, size)``: each of the ``P`` subdomains' signs with each of its ``C`` candidate neurons
    fixed active, then inactive (in that order, candidate after candidate)."""
    p, c = candidates.shape
    trials = signs.repeat_interleave(2 * c, 0)
    neuron = candidates.repeat_interleave(2, 1).flatten()
    pattern = torch.tensor([1, -1], dtype=signs.dtype, device=signs.device).repeat(p * c)
    trials[torch.arange(len(trials), device=signs.device), neuron] = pattern
    return trials


def best_candidate(worst: Tensor, candidates: Tensor) -> tuple[Tensor, Tensor]:
    """``(P,)`` twice: each subdomain's candidate whose worse child bounds highest, given every trial's worst
    bound (``(2 P C,)`` in `trial_signs`' order; an infeasible child counts as infinity), and that worse
    child's bound."""
    p, c = candidates.shape
    worth = worst.view(p, c, 2).amin(2)
    best, at = worth.max(1, keepdim=True)
    return candidates.gather(1, at).squeeze(1), best.squeeze(1)


def split_neurons(chosen: Tensor, ranked: Tensor, levels: int) -> Tensor:
    """``(P, levels)``: the neurons each subdomain is split on in one round, the `chosen` one first, then
    its best-ranked others (`levels` at most the fewest any of them has)."""
    others = ranked.masked_fill(ranked == chosen[:, None], -1)
    order = torch.argsort((others < 0).to(torch.int8), dim=1, stable=True)  # valid ones first, in rank
    others = others.gather(1, order)
    return torch.cat([chosen[:, None], others[:, : levels - 1]], 1)


def children_signs(signs: Tensor, neurons: Tensor) -> Tensor:
    """``(P 2^L, size)``: every subdomain's children, each of its `neurons` (``(P, L)``) fixed active or
    inactive in every combination (children of one parent together)."""
    p, levels = neurons.shape
    patterns = torch.tensor(list(itertools.product((1, -1), repeat=levels)), dtype=signs.dtype,
                            device=signs.device)  # fmt: skip
    many = len(patterns)
    children = signs.repeat_interleave(many, 0)
    rows = torch.arange(len(children), device=signs.device)[:, None].expand(-1, levels)
    children[rows, neurons.repeat_interleave(many, 0)] = patterns.repeat(p, 1)
    return children


def usable_levels(ranked: Tensor, wanted: int) -> int:
    """Split levels every subdomain of `ranked` (all with at least one neuron) can take: at most `wanted`
    and the fewest ranked neurons any has. One host read."""
    fewest = int((ranked >= 0).sum(1).min()) if len(ranked) else 1
    return max(1, min(wanted, fewest))


def quotas(
    rows: Tensor, working: Tensor, batch: int, child_seconds: Tensor | None = None, left: float = math.inf
) -> Tensor:
    """``(I,)``: how many subdomains of each image a round splits, given how many margins each image's
    subdomains bound (`rows`, ``(I,)``) and which images have subdomains open (`working`): `batch` for the
    working images with the fewest margins, and k times fewer (at least one) for an image with k times as
    many, so that each working image's children cost about the same (a search of one image splits
    `batch`). Each image's share of a round is then its share of the search's time, as if searched alone:
    six MNIST ConvSmall images searched together with 1 to 9 margins open, by equal quotas, gave the two
    with 6 and 9 most of every round. At `child_seconds` a child (``(I,)``; None before the first round
    has measured it), an image's two children a subdomain also keep within a quarter of its share of the
    time `left`: a large `batch` pays on the CPU too (a child of an MNIST ConvSmall bounded in a batch of
    48 cost 4.8 ms, of 384 1.9 ms), and the time keeps a round on a slow network short."""
    fewest = rows.masked_fill(~working, rows.max()).amin()
    quota = (batch * fewest / rows).floor()
    if child_seconds is not None:
        share = left / working.sum().clamp(min=1).to(torch.float64)
        quota = torch.minimum(quota, (share / 4 / 2 / child_seconds.clamp(min=1e-12)).floor())
    return quota.clamp(min=1).to(torch.long)


def split_levels(
    image: Tensor, images: int, batch: int | Tensor, child_seconds: float | Tensor | None, left: float
) -> Tensor:
    """``(P,)``: how many neurons each subdomain split this round (of the images `image`, among `images`) is
    split on at once: as many as keep its image's children within twice its `batch` (one, with a full
    queue) and, at `child_seconds` a child (None in the first round, which measures it: one level), within
    a quarter of its image's share of the time `left` (shared by the images split this round: one whose
    subdomains are all closed needs none). `batch` and `child_seconds` are one number or one an image,
    ``(images,)``. A short queue is split several levels deep in one
    round, as alpha-beta-CROWN does: on an MNIST ConvSmall image whose search ran 28 rounds deep for 22 s, a
    round cost nearly as much for 2 children as for 64. Each image counts its own queue and share: six
    ConvSmall images searched together, their queues and time counted as one, split an image's short queue
    one level a round beside the others' long ones (54 of its subdomains in 60 s; 1,164 alone in 10 s)."""
    if child_seconds is None:
        return torch.ones_like(image)
    queues = torch.bincount(image, minlength=images)
    queue = queues[image].to(torch.float64)
    room = 2 * _each(batch, image) / queue
    if isinstance(child_seconds, Tensor) or child_seconds > 0:
        share = left / (queues > 0).sum().to(torch.float64)
        room = torch.minimum(room, share / 4 / _each(child_seconds, image).clamp(min=1e-12) / queue)
    return room.clamp(min=1).log2().floor().to(torch.long).clamp(1, MAX_LEVELS)


def _each(value: float | Tensor, image: Tensor) -> Tensor:
    """`value` for each subdomain of the images `image`: one number for all, or ``(images,)`` one an image."""
    if isinstance(value, Tensor):
        return value[image].to(torch.float64)
    return torch.full(image.shape, float(value), dtype=torch.float64, device=image.device)
