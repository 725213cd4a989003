"""alpha-CROWN (Xu et al. 2021): the ReLUs' lower slopes of a back-substitution optimised by Adam.

Any slope in [0, 1] gives a sound lower line for an unstable ReLU, so every bound found on the way is a
bound, and the best of each is kept. Two reaches:

- the output's slopes alone (`optimized_lower`): one slope per image, row and neuron, the intermediate
  bounds fixed; a step is one back-substitution of the rows;
- every layer's (`optimized_every_layer`): the rows of each intermediate bound have slopes of their own
  too, and every step recomputes the intermediate bounds with them, so that the rows' bound improves
  through tighter relaxations of the layers before (auto_LiRPA's CROWN-Optimized). A step is a whole
  analysis, each intermediate node bounding the neurons unstable in some image of the batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import Tensor

from daic.runtime.domains.coeffs import Dense
from daic.runtime.domains.rounding import outward_rounding, rounds_outward
from daic.runtime.domains.symbolic import Backward, LayerSlopes, Symbolic, backsubstitute, relaxed_by

PATIENCE, STALE_GAIN = 20, 1e-4
"""alpha-CROWN stops once `PATIENCE` steps in a row each raised its rows' bounds by less than `STALE_GAIN`
of their mean magnitude (alpha-beta-CROWN stops on a patience too; 10 steps stopped 0.7% short on a
kink that Adam crosses back and forth for a while before it settles): the last steps of a long
optimisation of a layer's neurons gain little, and the time is worth more to the layers after it."""

Prior = dict[int, tuple[Tensor, Tensor]]


def optimized_lower(
    output: Symbolic, rows: Dense, start: Tensor, steps: int, lr: float, deadline: float = float("inf")
) -> Tensor:
    """``(B, S)``: the best lower bounds of ``rows`` (over ``output``'s neurons) that alpha-CROWN finds in
    ``steps`` Adam steps of rate ``lr`` (decayed by 0.98 a step), from the bounds ``start``; stops early
    once every row is positive, once the bounds stall (`PATIENCE`), or at ``deadline`` (a
    `time.perf_counter()` reading). The intermediate bounds stay as they are; only the ReLUs' lower slopes
    move, each kept in [0, 1] by clamping after the step (a projection: the gradient itself is never cut
    off).

    The steps round to nearest: their bounds steer Adam and choose each row's best slopes. Where
    certification rounds outward, the rows are bounded once more at those slopes, soundly (a step's ledger
    of rounding errors cost a quarter to a half of its time in two profiles and took part in its gradient)."""
    if steps == 0 or bool((start > 0).all()):
        return start
    alphas = initial_slopes(output, rows.rows)
    if not alphas:  # no ReLU to relax: CROWN's bound is the network's exact range, nothing to optimise
        return start
    how = Backward(alphas)
    kept = {key: alpha.detach().clone() for key, alpha in alphas.items()}

    def keep(improved: Tensor) -> None:
        for key, alpha in alphas.items():
            kept[key] = kept_where(improved, kept[key], alpha)

    with outward_rounding(False):
        best = _optimise(
            list(alphas.values()), lambda: backsubstitute(output, rows, how), start, steps, lr, deadline, keep
        )
    if not rounds_outward():
        return best
    with torch.no_grad():
        return torch.maximum(start, backsubstitute(output, rows, Backward(kept)))


def optimized_every_layer(
    analyse: Callable[[LayerSlopes, Prior], Symbolic], first: Symbolic, rows: Dense, start: Tensor,
    steps: int, lr: float, deadline: float = float("inf"),
) -> Tensor:  # fmt: skip
    """``(B, S)``: the best lower bounds of ``rows`` that alpha-CROWN of every layer finds in ``steps``
    Adam steps (stopping as `optimized_lower` does), from ``start``. ``first`` is the network's analysis
    with CROWN's intermediate bounds (the analysis of `analyse` with no slopes); ``analyse(slopes,
    prior)`` runs it again with those slopes, each intermediate bound intersected with the best found so
    far (``prior``), so that bounds only tighten from step to step. Each intermediate node's rows are its
    neurons unstable in some image of the batch at the start (windows on a map, as CROWN's), and their
    slopes are made by the first of those analyses, shaped as the rows are at each ReLU."""
    if steps == 0 or bool((start > 0).all()):
        return start
    crown_bounded, readers = _crown_bounded(first), _readers(first)
    bounded = _sloped(crown_bounded, readers)
    slopes = LayerSlopes(
        {node.id: _relaxed_neurons(node, readers) for node in bounded},
        fixed=frozenset(node.id for node in crown_bounded if node not in bounded),
    )
    prior: Prior = {node.id: tuple(b.detach() for b in node.bounds()) for node in crown_bounded}
    output_slopes = initial_slopes(first, rows.rows)
    with torch.enable_grad():
        made = [analyse(slopes, prior)]  # the first analysis with the slopes makes them (and is step 1's)
    leaves = slopes.leaves() + list(output_slopes.values())
    if not leaves:
        return start

    def bound() -> Tensor:
        output = made.pop() if made else analyse(slopes, prior)
        for node in _crown_bounded(output):  # the best intermediate bounds so far: the next step's prior
            if node.id in slopes.fixed:
                continue
            low, up = (b.detach() for b in node.bounds())
            known = prior[node.id]
            prior[node.id] = (torch.maximum(known[0], low), torch.minimum(known[1], up))
        return backsubstitute(output, rows, Backward(output_slopes))

    return _optimise(leaves, bound, start, steps, lr, deadline)


AUTOGRAD_COPIES = 3
"""How many tensors of a back-substitution's rows' size a step of `optimized_every_layer` keeps alive per
node the rows pass (the rows, their relaxed copy, and what autograd saves of them): its memory plan."""


def every_layer_bytes(first: Symbolic) -> int:
    """A bound of the memory a step of `optimized_every_layer` needs on ``first``'s analysis: each
    intermediate node's rows (two per neuron unstable in some image, for every image) over the maps they
    pass (windows are at most the maps)."""
    total, readers = 0, _readers(first)
    for node in _sloped(_crown_bounded(first), readers):
        rows = 2 * len(_relaxed_neurons(node, readers)) * node.batch
        maps = sum(a.shape[1:].numel() for a in node.ancestors())
        total += rows * maps * node.analysis.center.element_size() * AUTOGRAD_COPIES
    return total


def _optimise(
    alphas: list[Tensor], bound: Callable[[], Tensor], best: Tensor, steps: int, lr: float, deadline: float,
    keep: Callable[[Tensor], None] | None = None,
) -> Tensor:  # fmt: skip
    """Adam on the slopes `alphas` against the sum of ``bound()``'s rows; the best of each row kept (and
    `keep` told which rows a step improved, before the step moves the slopes)."""
    optimizer = torch.optim.Adam(alphas, lr=lr, fused=alphas[0].device.type in ("cpu", "cuda"))
    schedule = torch.optim.lr_scheduler.ExponentialLR(optimizer, 0.98)
    stale = 0
    for _ in range(steps):
        with torch.enable_grad():
            found = bound()
            grads = torch.autograd.grad(-found.sum(), alphas, allow_unused=True)
        if keep is not None:
            keep(found.detach() > best)
        before, best = best, torch.maximum(best, found.detach())
        finite = torch.isfinite(before)
        gain, scale = (best - before)[finite].mean(), best[finite].abs().mean()
        proved, stalled = torch.stack([(best > 0).all(), gain <= STALE_GAIN * scale]).tolist()  # one wait
        stale = stale + 1 if stalled else 0
        if proved or stale >= PATIENCE or time.perf_counter() > deadline:
            break
        for alpha, grad in zip(alphas, grads, strict=True):
            set_gradient(alpha, grad)  # None for slopes the bound does not reach: Adam leaves them
        optimizer.step()
        schedule.step()
        with torch.no_grad():
            for alpha in alphas:
                alpha.clamp_(0, 1)
    return best


def kept_where(improved: Tensor, kept: Tensor, now: Tensor) -> Tensor:
    """`now` (detached) on the rows `improved` (``(N, K)``, the leading dimensions of both), `kept`
    elsewhere: what an optimisation keeps of the step where each row was best."""
    mask = improved.view(*improved.shape, *[1] * (now.dim() - 2))
    return torch.where(mask, now.detach(), kept)


def set_gradient(parameter: Tensor, grad: Tensor | None) -> None:
    """``parameter.grad = grad``, laid out as the parameter is. `torch.autograd.grad` returns a map's
    gradient in the layout its last operation produced (channels-last, out of a float32 convolution on
    the CPU), and torch's fused Adam reads the gradient as if it had the parameter's strides: on torch
    2.14 it moved every slope of a channels-last gradient by another's. (`backward` keeps gradients in
    their parameters' layout itself.)"""
    if grad is not None and grad.stride() != parameter.stride():
        grad = torch.empty_like(parameter).copy_(grad)
    parameter.grad = grad


def initial_slopes(output: Symbolic, rows: int) -> dict[int, Tensor]:
    """A lower slope per row (of `rows`, for each image) for every relaxed node before `output` that has
    one (the ReLUs), from CROWN's choice, as leaves to optimise."""
    slopes: dict[int, Tensor] = {}
    for node in output.ancestors():
        initial = getattr(node.layer, "initial_slopes", None)
        if initial is not None and node is not output:
            start = initial(node).detach().unsqueeze(1)
            start = start.expand(start.shape[0], rows, *start.shape[2:]).clone()
            slopes[node.id] = start.requires_grad_(True)
    return slopes


def _crown_bounded(output: Symbolic) -> list[Symbolic]:
    """The nodes before `output` whose neurons CROWN bounded: the inputs of relaxing layers (the input box's
    own neurons aside), in the order they were made."""
    found = {
        node.parents[0].id: node.parents[0]
        for node in output.ancestors()
        if getattr(node.layer, "relaxes_input", False) and node.parents[0].kind != "input"
    }
    return [found[i] for i in sorted(found)]


def _readers(output: Symbolic) -> dict[int, list]:
    """The relaxing layers reading each node before `output`, by the node's id."""
    found: dict[int, list] = {}
    for node in output.ancestors():
        if getattr(node.layer, "relaxes_input", False):
            found.setdefault(node.parents[0].id, []).append(node.layer)
    return found


def _sloped(nodes: list[Symbolic], readers: dict[int, list]) -> list[Symbolic]:
    """The nodes whose bounds slopes can move: some neuron relaxed, and a layer with slopes before them."""

    def movable(node: Symbolic) -> bool:
        after_slopes = any(getattr(a.layer, "initial_slopes", None) is not None for a in node.ancestors()[1:])
        return after_slopes and bool(len(_relaxed_neurons(node, readers)))

    return [node for node in nodes if movable(node)]


def _relaxed_neurons(node: Symbolic, readers: dict[int, list]) -> Tensor:
    """``(N,)``: the flat indices of the node's neurons that a layer reading it relaxes (an activation's
    non-affine ones, as it declares; a ReLU's and max pooling's: those whose interval crosses zero) in
    some image: the neurons CROWN bounded, and whose bounds the slopes can tighten."""
    lower, upper = node.bounds()
    relaxed = torch.zeros_like(lower, dtype=torch.bool)
    for layer in readers.get(node.id, ()):
        relaxed |= relaxed_by(layer, lower, upper)
    return relaxed.flatten(1).any(0).nonzero().squeeze(1)
