"""Regularisers a scheme adds to its goal's loss: the warm-up regularisers of Shi et al. ("Fast Certified
Robust Training with Short Warmup", NeurIPS 2021), and an L1 penalty of the weights.

During the epsilon ramp, Shi et al. add ``L_tightness + L_relu`` (averaged over the ReLU layers: here every
piecewise-linear activation whose input's sign decides it, ReLU, LeakyReLU and Abs, as it declares), computed
from the interval bounds ``[l, u]`` of every such layer's input for the step's epsilon-box:

- tightness: ``relu(tau - r0 / mean((u - l) / 2)) / tau``, ``r0`` the mean radius of the first affine
  layer's input box: it keeps the interval bounds from growing faster than the input's;
- ReLU balance: with ``c = (u + l) / 2`` and the always-active (``l > 0``) and always-inactive (``u < 0``)
  neurons, the ratios of their mean ``c`` (``mean(c [active]) / -mean(c [inactive])``) and of their
  variances of ``c``, each taken as ``min(r, 1 / r)``; the loss ``(relu(tau - r_mean) + relu(tau - r_var))
  / tau`` keeps both kinds balanced, so that neither dominates and the bounds stay tight. A layer whose
  ratio is not finite (no neuron of a kind) adds nothing, as in their code.

``tau`` is 0.5, their default.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from daic.runtime import native
from daic.runtime.context import AbstractContext
from daic.runtime.domains import Box, HybridZonotope, Symbolic, Value
from daic.runtime.layers.affine import Conv2D, Linear, Normalize
from daic.runtime.layers.base import Pass, trace
from daic.runtime.layers.taps import Latent

TAU = 0.5


def warmup_regulariser(
    model: nn.Module, lower: Tensor, upper: Tensor, relu: str = "hybrid", relu_inputs: list[Box] | None = None
) -> Tensor:
    """Shi et al.'s ``L_tightness + L_relu`` for the boxes [lower, upper], averaged over the ReLU layers
    (0 for a network without ReLUs). `relu_inputs`, when given, are the interval bounds of every ReLU's
    input for these boxes that a pass already computed (see `interval_relu_inputs`); otherwise an interval
    pass computes them."""
    if relu_inputs is None:
        run = trace(model, Box.from_bounds(lower, upper), AbstractContext(training=True, relu=relu))
        relu_inputs = [Box.from_bounds(*x.bounds()) for layer, x in run.visits if _balanced(layer)]
    if not relu_inputs:
        return lower.new_zeros(())
    r0 = _first_affine_input(model, Box.from_bounds(lower, upper)).radius.mean()
    radii = torch.stack([box.radius.mean() for box in relu_inputs])
    tightness = F.relu(TAU - r0 / radii.clamp_min(1e-12)) / TAU
    balance = _balance(torch.stack([_kinds(box) for box in relu_inputs]))
    return (tightness.sum() + balance) / len(relu_inputs)


def interval_relu_inputs(run: Pass, relu: str) -> list[Box] | None:
    """The bounds that reached every ReLU in an epsilon-box's pass, when they are the interval pass's:
    boxes, TAPS's companion boxes, a folded box's Box companions, and hybrid zonotopes without correlated
    terms under the hybrid ReLU (which is the box ReLU on them). None otherwise: then `warmup_regulariser`
    makes its own interval pass."""
    found = [_as_interval(x, relu) for layer, x in run.visits if _balanced(layer)]
    return None if any(box is None for box in found) else found


def _as_interval(value: Value, relu: str) -> Box | None:
    if isinstance(value, Box):
        return value
    if isinstance(value, Latent):
        return value.box
    if isinstance(value, Symbolic) and not value.analysis.crown:
        return value.companions[0]  # the interval pass of a folded box (its Box companion)
    if isinstance(value, HybridZonotope) and value.m == 0 and relu == "hybrid":
        return Box(value.head, value.beta)
    return None


def _first_affine_input(model: nn.Module, box: Box) -> Box:
    """The box after the network's leading Normalize layers: the input's radius in the units the first
    weights see (Shi et al. normalise the data instead)."""
    for layer in model.children():
        if not isinstance(layer, Normalize):
            break
        box = layer.abstract(box, AbstractContext(training=True))
    return box


def _kinds(box: Box) -> Tensor:
    """``(2, 2)``: for the always-active neurons (``l > 0``, row 0) and the always-inactive ones (``u < 0``,
    row 1), the mean over all neurons of their centre (column 0) and the sum of their centre's squared
    deviation from its mean (column 1): two products with the kinds' masks instead of a pass per statistic,
    for every ReLU every step (a dozen small ops a layer each way made a warm-up step 2.4x the IBP step on a
    GPU, launch-bound, on MNIST ConvSmall; 2x on this CPU)."""
    centre, radius = _values(box.center), _values(box.radius)
    with torch.no_grad():  # the masks, as numbers: compared into them (a bool mask's conversion took 3x)
        kinds = centre.new_empty(2, len(centre))
        torch.gt(centre, radius, out=kinds[0])  # l = c - r > 0
        torch.lt(centre, radius.neg(), out=kinds[1])  # u = c + r < 0
    deviation = (centre - centre.mean()).square()
    return torch.stack((kinds @ centre / len(centre), kinds @ deviation), 1)


def _values(t: Tensor) -> Tensor:
    """All of `t`'s values, as one row in the order they lie in memory (sums do not care for the order): a
    view of a channels-last map, where flattening would copy it."""
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return t.permute(0, 2, 3, 1).reshape(-1)
    return t.reshape(-1)


def _balance(kinds: Tensor) -> Tensor:
    """The ReLU-balance losses of every layer, summed, from each layer's `_kinds` (``(L, 2, 2)``)."""
    num = kinds[:, 0]  # the active neurons' mean and variance
    den = torch.stack((-kinds[:, 1, 0], kinds[:, 1, 1]), 1)  # the inactive ones': -mean and variance
    # No neuron of a kind (den = 0, the ratio not finite): nothing to balance. Chosen on the device, not by a
    # branch on the host, which would wait for the GPU every step; the ratio is taken over a denominator
    # that is never 0, so that the term left out passes no NaN to the gradient either.
    safe_den = torch.where(den != 0, den, torch.ones_like(den))
    ratio = num / safe_den
    defined = (den != 0) & torch.isfinite(ratio)
    ratio = torch.where(defined, ratio, torch.ones_like(ratio))
    term = F.relu(TAU - torch.minimum(ratio, 1 / ratio)) / TAU
    return torch.where(defined, term, torch.zeros_like(term)).sum()


def _l1_weights(model: nn.Module) -> list[Tensor]:
    """The weights the L1 penalty counts: those of every Conv2D and Linear (not biases nor BatchNorm's
    affine parameters, as CTBench, Shi et al. and De Palma et al. count it)."""
    return [m.weight for m in model.modules() if isinstance(m, (Conv2D, Linear))]


def l1_penalty(model: nn.Module) -> Tensor:
    """The sum of |w| over the weights of every Conv2D and Linear."""
    weights = _l1_weights(model)
    return sum((w.abs().sum() for w in weights), weights[0].new_zeros(()))


@torch.no_grad()
def add_l1_gradient_(model: nn.Module, weight: float) -> Tensor:
    """Adds the gradient of ``weight * l1_penalty(model)``, ``weight * sign(w)``, to the weights'
    gradients in place, as an optimizer's weight decay adds its own; returns the penalty's value.

    Through autograd the penalty costs five passes over each weight (|w|, its sum, sign, the product and
    the gradient's accumulation): 160 ms a step for CNN7's 25088 x 512 layer on one core, against 23 ms
    for the value's one pass and one fused in-place update here."""
    total = None
    for w in _l1_weights(model):
        value = torch.linalg.vector_norm(w, 1)
        total = value if total is None else total + value
        if w.grad is None:
            w.grad = torch.zeros_like(w)
        _add_signed_constant_(w.grad, w, weight)
    assert total is not None, "a network without Conv2D or Linear layers has no L1 penalty"
    return weight * total


def _add_signed_constant_(grad: Tensor, w: Tensor, constant: float) -> None:
    """``grad += constant * sign(w)``: one fused pass over a weight whose rows are contiguous (the
    constant as a row read again for every row), two ATen passes otherwise."""
    if grad.is_contiguous() and w.is_contiguous():
        row = grad.new_full((1, w[0].numel()), constant)
        flat_grad, flat_w = grad.view(len(w), -1), w.view(len(w), -1)
        if native.add_signed_product_(flat_grad, flat_w, row.expand_as(flat_w)):
            return
    grad.add_(torch.sign(w), alpha=constant)


def _balanced(layer) -> bool:
    """Whether Shi et al.'s balance of active and inactive neurons applies to `layer`: a piecewise-linear
    activation that its input's sign decides (ReLU, LeakyReLU, Abs), as the layer declares."""
    return getattr(layer, "splittable", False) and getattr(layer, "piecewise_linear", False)
