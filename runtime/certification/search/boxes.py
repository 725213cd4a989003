"""Cutting input boxes in two, for the searches that bound ever smaller boxes: InputSplit's every box, and
branch and bound's leaves on networks whose activations are not affine on a leaf (a Sigmoid, a HardTanh
that is not split). Each box is halved across the input that moves its least margin most; bounds hold over
each half, and the halves cover the box, so proofs of both are a proof of it."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from daic.runtime.certification.search.frontier import Frontier
from daic.runtime.domains.element import margin_others

WIDTH_WEIGHT = 0.3
"""The weight of each input's width (relative to the whole box) beside its normalised smear in the choice
of cut. On ACAS Xu's property 1 (networks 1_1 to 1_6, this machine's CPU) 0.3 proved them all in 0.5 to 33
s, where the widest input alone (weight 1, no smear) left two past 20 s and a weight of 0.001 others."""


def margin_gradient(model: nn.Module, lower: Tensor, upper: Tensor, y: Tensor) -> Tensor:
    """The gradient of each box's least margin at its centre."""
    centres = ((lower + upper) / 2).requires_grad_(True)
    if len(lower) == 0:
        return lower
    with torch.enable_grad():
        logits = model(centres)
        rows, _ = margin_others(y, logits.shape[1], logits.dtype)
        (grad,) = torch.autograd.grad(torch.einsum("bsc,bc->bs", rows, logits).amin(1).sum(), centres)
    return grad


def cut(boxes: Frontier, gradient: Tensor, scale: Tensor) -> tuple[Frontier, Tensor]:
    """The subdomains' boxes (columns ``lower`` and ``upper``) halved (`halved` by `smear`), every other
    column copied to both halves; and the mask of those that could not be: an input can be cut where a
    float lies strictly inside its interval, and a box none of whose inputs can (one point, or a float's
    width) is a leaf, its bound and its candidates all there is."""
    lower, upper = boxes["lower"], boxes["upper"]
    middle = (lower + upper) / 2
    movable = (middle > lower) & (middle < upper)
    cuttable = movable.flatten(1).any(1)
    boxes, gradient, scale = boxes.take(cuttable), gradient[cuttable], scale[cuttable]
    chosen = smear(boxes["lower"], boxes["upper"], gradient, scale).masked_fill(
        ~movable[cuttable], -torch.inf
    )
    twice = {name: torch.cat([column, column]) for name, column in boxes.columns.items()}
    twice["lower"], twice["upper"] = halved(boxes["lower"], boxes["upper"], chosen)
    return Frontier(twice), ~cuttable


def smear(lower: Tensor, upper: Tensor, gradient: Tensor, scale: Tensor) -> Tensor:
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


def halved(lower: Tensor, upper: Tensor, score: Tensor) -> tuple[Tensor, Tensor]:
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
