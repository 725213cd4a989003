"""The activation family (`Activation`: what a nonlinearity declares once) and its first member, ReLU, with
its fused transformers; the other members are in `activations`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from daic.runtime import native
from daic.runtime.context import AbstractContext
from daic.runtime.domains import Box, HybridZonotope, rounding
from daic.runtime.domains.coeffs import Dense
from daic.runtime.domains.rounding import Rounding, rounds_outward, unit
from daic.runtime.layers.base import AbstractMixin

if TYPE_CHECKING:
    from daic.runtime.domains.coeffs import Coeffs
    from daic.runtime.domains.symbolic import Backward, Symbolic


class _BoxReLU(torch.autograd.Function):
    """(center, radius) -> the box of relu on the bounds, in three passes forward.

    With ``h = (c + r) / 2`` (half the upper bound): ``r' = clamp(h, 0, r)`` and ``c' = max(c, r')``. By
    cases: an active neuron (``l = c - r > 0``) has ``h >= r`` and ``c >= h``, so ``(c', r') = (c, r)``;
    a crossing one (``u > 0 >= l``, output ``[0, u]``) has ``0 < h <= r`` and ``c <= h``, so
    ``c' = r' = u / 2``; a dead one (``u <= 0``) gets ``(0, 0)``. (Composed ops take seven passes.)

    Backward, by the same cases: an active neuron passes ``(g_c', g_r')`` through; a crossing one sends
    ``s = (g_c' + g_r') / 2`` to both ``c`` and ``r``; a dead one nothing. With ``d = (g_c' - g_r') / 2``
    that is ``g_c = [u > 0] s + [l > 0] d`` and ``g_r = [u > 0] s - [l > 0] d``, where ``u > 0`` iff
    ``c' > 0`` and ``l > 0`` iff ``c' > r'``: the saved outputs, which the next layer keeps anyway.

    On the CPU both directions run as one fused pass (`runtime.native`) where a C compiler is available:
    the composed passes are bound by memory traffic, and the fused ones cut the ReLUs' share of a ConvBig
    Box step from 20 to 9 ms. The ATen ops below are the same arithmetic, for every other case.
    """

    @staticmethod
    def forward(ctx, center: Tensor, radius: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        fused = native.box_relu_forward(center, radius)
        if fused is not None:
            new_center, new_radius = fused
        else:
            zero = torch.zeros((), dtype=center.dtype, device=center.device)
            new_radius = torch.lerp(center, radius, 0.5).clamp_(min=zero, max=radius)
            new_center = torch.maximum(center, new_radius)
        ctx.save_for_backward(new_center, new_radius)
        return new_center, new_radius

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_center: Tensor | None, grad_radius: Tensor | None):  # type: ignore[override]
        new_center, new_radius = ctx.saved_tensors
        if grad_center is None:
            grad_center = torch.zeros_like(new_center)
        if grad_radius is None:
            grad_radius = torch.zeros_like(new_center)
        fused = native.box_relu_backward(grad_center, grad_radius, new_center, new_radius)
        if fused is not None:
            return fused
        shared = torch.lerp(grad_center, grad_radius, 0.5)
        half_diff = torch.sub(grad_center, shared)
        # threshold_backward(g, t, 0) is g where t > 0, else 0: one pass, no mask tensor.
        crossing_or_active = torch.ops.aten.threshold_backward(shared, new_center, 0)
        active = torch.ops.aten.threshold_backward(half_diff, new_center - new_radius, 0)
        return torch.add(crossing_or_active, active), crossing_or_active.sub_(active)


def relu_box(x: Box) -> Box:
    """Exact interval ReLU: ReLU is monotone, so it maps the bounds."""
    center, radius = _BoxReLU.apply(x.center, x.radius)
    return Box(center, radius)


def _relu_masks(lower: Tensor, upper: Tensor) -> tuple[Tensor, Tensor]:
    """0/1 float masks ``keep`` (``l >= 0``) and ``cross`` (``l < 0 < u``).

    Transformers blend with these by multiplication rather than ``torch.where``: on the CPU a bool-mask
    ``where`` is an order of magnitude slower than a multiply. (Bounds are finite, so ``0 * bound`` is 0.)
    """
    keep = (lower >= 0).to(lower.dtype)
    cross = (upper > 0).to(lower.dtype).sub_(keep).clamp_(min=0)
    return keep, cross


def relu_hybrid(x: HybridZonotope) -> HybridZonotope:
    """The reference DiffAI hybrid-zonotope ReLU.

    With ``[l, u]`` the interval concretization: a neuron with ``l >= 0`` is kept as it is; one with
    ``u <= 0`` becomes 0; a crossing one (``l < 0 < u``) becomes the box ``[0, u]``: head = beta = u / 2, its
    correlated coefficients zeroed. The term slots (and ids) are unchanged, except in certification
    (`domains.dropping_dead_terms`), where the slots left all zero are dropped: there most terms die within
    a few layers, and every later layer carries fewer.
    """
    if x.m == 0:
        # Without correlated terms the hybrid ReLU is the box ReLU of (head, beta): the fused one.
        head, beta = _BoxReLU.apply(x.head, x.beta)
        return x.replace(head, beta, x.errors)
    lower, upper = x.bounds()
    keep, cross = _relu_masks(lower, upper)
    half_u = upper * 0.5
    head = torch.addcmul(x.head * keep, half_u, cross)
    beta = torch.addcmul(x.beta * keep, half_u, cross)
    return x.scale_terms(keep, head, beta)


def relu_deepz(x: HybridZonotope) -> HybridZonotope:
    """The minimal-area zonotope ReLU (DeepZ), with the fresh term folded into the uncorrelated beta.

    For a crossing neuron ``lambda = u / (u - l)``, ``mu = -lambda * l / 2``: ``relu(x)`` lies between
    ``lambda * x`` and ``lambda * x - lambda * l``, i.e. in ``lambda * x + mu +- mu``. Head, beta and
    errors are scaled by ``lambda``; ``mu`` is added to head and to beta (``lambda * beta * b1 + mu * b2``
    over independent ``b1, b2`` is exactly ``(lambda * beta + mu) * b``). Kept neurons have ``lambda = 1``,
    dead ones ``lambda = 0``.
    """
    lower, upper = x.bounds()
    keep, cross = _relu_masks(lower, upper)
    # Width 1 where the neuron does not cross keeps u / width finite there (and its gradient not NaN).
    width = torch.addcmul(1 - cross, upper - lower, cross)
    lam = torch.addcmul(keep, upper / width, cross)
    mu = (lam * lower) * (cross * -0.5)
    head = lam * x.head + mu
    beta = lam * x.beta + mu
    return x.scale_terms(lam, head, beta)


def crown_relaxation(lower: Tensor, upper: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """CROWN's linear relaxation of ``relu`` on ``[lower, upper]``: ``ls * x <= relu(x) <= us * x + ub``.

    Returns ``(ls, us, ub, exact)``, ``exact`` where both lines are relu itself. Active neurons
    (``l >= 0``): ``ls = us = 1``, ``ub = 0``; dead ones (``u <= 0``): all 0 (both exact in floating
    point). An unstable one (``l < 0 < u``) has the chord ``us = u / (u - l)``, ``ub = -l us`` above, and
    below the line through 0 of slope 1 where ``u > -l``, else 0 (the adaptive choice of Zhang et al. 2018,
    the smaller area); any slope in [0, 1] is sound there (alpha-CROWN optimises it). With outward rounding
    the intercept is raised until the line stays above relu at both ends in exact arithmetic (the
    composed ops below); without it, on the CPU, one fused pass each way (`_CrownReLU`).
    """
    if not rounds_outward() and native.walks("crown_relu_forward", lower, upper):
        return _CrownReLU.apply(lower, upper)
    low, high = lower.clamp(max=0), upper.clamp(min=0)
    # A width of 0 only where l = u = 0 (us = 0 is exact there). Not clamped to the smallest normal: an
    # active neuron of subnormal bounds would get us = u / tiny < 1, its upper line below relu.
    width = high - low
    us = high / torch.where(width == 0, 1, width)
    ub = -low * us
    unstable = (lower < 0) & (upper > 0)
    if rounds_outward():
        # The line must stay above relu at both ends in exact arithmetic for the slope us as rounded:
        # ub >= -us l and ub >= u - us u. Computed, each is within 2u (-l + u) of the exact value (the
        # second cancels: its error is relative to u, not to the result); 6u of it, and the smallest
        # normal for underflow, cover that and the roundings of the sum.
        room = (high - low) * (6 * unit(lower.dtype)) + torch.finfo(lower.dtype).tiny
        ub = torch.where(unstable, torch.maximum(ub, high - high * us) + room, ub)
    ls = ((lower >= 0) | (unstable & (upper > -lower))).to(lower.dtype)
    return ls, us, ub, ~unstable


class _CrownReLU(torch.autograd.Function):
    """`crown_relaxation` without outward rounding as one pass each way (`runtime.native`): ``(ls, us, ub,
    exact)`` from the bounds. CROWN-IBP differentiates its lines through the interval bounds of every
    layer, where the composed ops took seven passes forward and about fifteen backward: on an MNIST
    ConvBig at batch 50, 66 ms of a 415 ms loss-fused step. Differentiable once (nothing in daic takes a
    gradient of a gradient through a relaxation)."""

    @staticmethod
    def forward(ctx, lower: Tensor, upper: Tensor):  # type: ignore[override]
        lines = native.crown_relu_forward(lower, upper)
        if lines is None:  # pragma: no cover - `crown_relaxation` checked the layout
            raise RuntimeError("the relaxation kernel refused bounds it was given")
        ctx.save_for_backward(lower, upper)
        ctx.mark_non_differentiable(lines[0], lines[3])
        ctx.set_materialize_grads(False)  # a missing gradient becomes zeros in the bounds' own layout
        return lines

    @staticmethod
    @once_differentiable
    def backward(ctx, _ls, grad_us: Tensor | None, grad_ub: Tensor | None, _exact):  # type: ignore[override]
        lower, upper = ctx.saved_tensors
        grad_us = torch.zeros_like(lower) if grad_us is None else grad_us
        grad_ub = torch.zeros_like(lower) if grad_ub is None else grad_ub
        grads = native.crown_relu_backward(lower, upper, grad_us, grad_ub)
        if grads is None:  # pragma: no cover - the incoming gradients are copied into the bounds' layout
            raise RuntimeError("the relaxation kernel refused the gradients it was given")
        return grads


def _largest_intercept(lower: Tensor, upper: Tensor) -> float:
    """A bound of every upper intercept `crown_relaxation` gives on these bounds: each is below
    ``max(-l, u)`` plus its room of ``8u (u - l)``, and ``u - l <= 2 max(-l, u)``."""
    reach = max(-float(lower.detach().amin()), float(upper.detach().amax()), 0.0)
    return reach * (1 + 16 * unit(lower.dtype)) + 2 * torch.finfo(lower.dtype).tiny


@dataclass
class Lines:
    """A linear relaxation of an activation ``f`` on ``[lower, upper]``, per neuron: ``ls x + lb <= f(x) <=
    us x + ub`` over the interval, in exact arithmetic for the floats given; ``exact``: the neurons where
    both lines are ``f`` itself (``f`` is affine there), the others are the ones a relaxation loosens."""

    ls: Tensor
    lb: Tensor
    us: Tensor
    ub: Tensor
    exact: Tensor


class Activation(AbstractMixin, nn.Module):
    """A nonlinearity applied neuron by neuron: a member declares, once, its function (`forward`), its
    interval image (`interval`) and its linear relaxation on given input bounds (`relaxation`), and from
    these every domain's transformer follows: the box (the interval image), the hybrid zonotope (a crossing
    neuron becomes the box of its image; with ``ctx.relu == "deepz"`` the parallel lines of its relaxation)
    and back-substitution (the lines, a positive coefficient taking the lower one). It also says:

    - ``slopes``: the range of lower slopes through the origin alpha-CROWN may optimise for its neurons
      the relaxation loosens (``f(0) = 0`` and ``a x <= f(x)`` for every ``a`` in it), or None;
    - ``splittable``: branch and bound may split its input at zero; ``piecewise_linear``: each side of its
      pieces makes it affine (a split leaf of such members is decided exactly; a smooth member split at
      zero is only relaxed more tightly on each side);
    - ``bounded_output``: the largest ``|f(x)|`` when ``f`` is bounded (the magnitude its rounding is
      relative to), else None (``|f(x)| <= |x|``);
    - ``lower_through_origin``: every lower line of its relaxation has a zero intercept (declared, not
      read off the lines: that would be a host read per bounding, a GPU round trip per training step).
    """

    relaxes_input = True
    activation = True
    piecewise_linear = True
    slopes: tuple[float, float] | None = None
    bounded_output: float | None = None
    lower_through_origin = False

    def interval(self, lower: Tensor, upper: Tensor) -> tuple[Tensor, Tensor]:
        """Bounds of ``f`` over ``[lower, upper]`` in exact arithmetic (a monotone ``f`` by default)."""
        return outward(self(lower), self(upper), self.bounded_output)

    def relaxation(self, lower: Tensor, upper: Tensor) -> Lines:
        raise NotImplementedError(f"{type(self).__name__} declares no linear relaxation")

    def relaxed_neurons(self, lower: Tensor, upper: Tensor) -> Tensor:
        """The neurons its relaxation loosens on these input bounds: those CROWN bounds its input for."""
        return ~self.relaxation(lower, upper).exact

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Box:
        return Box.from_bounds(*self.interval(*x.bounds()))

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        lower, upper = x.bounds()
        lines = self.relaxation(lower, upper)
        if ctx.relu == "deepz":  # y - ls x lies in [lb, ub + max over the interval of (us - ls) x]
            slope, low = lines.ls, lines.lb
            gap = lines.us - lines.ls
            high = rounding.up(lines.ub + torch.maximum(rounding.up(gap * lower), rounding.up(gap * upper)))
        else:  # affine neurons map exactly, the others become the box of their image
            image_low, image_high = self.interval(lower, upper)
            exact = lines.exact.to(lower.dtype)
            slope = lines.ls * exact
            low = torch.where(lines.exact, lines.lb, image_low)
            high = torch.where(lines.exact, lines.ub, image_high)
        middle = (low + high) / 2
        radius = (
            rounding.enclosing_radius(middle, low, high) if rounding.rounds_outward() else (high - low) / 2
        )
        return x.scale_terms(slope, slope * x.head + middle, slope.abs() * x.beta + radius)

    def rounding(self, x) -> Rounding:
        """Elementwise, slopes of magnitude at most 1; a bounded output's rounding is relative to its bound.
        Back-substitution's constants are the lines' intercepts (`back_symbolic` sums two of them)."""
        bound = self.bounded_output or 0.0

        def intercepts() -> float:
            lines = self.relaxation(*x.bounds())
            largest = (lines.ub - lines.lb).abs().max() + lines.lb.abs().max()
            return 2 * float(largest.detach()) + torch.finfo(lines.lb.dtype).tiny

        return Rounding(constant=bound, back_constant=lambda: _memo(x, f"intercepts{id(self)}", intercepts))

    @property
    def initial_slopes(self):
        """``initial_slopes(node)``: the relaxation's lower slopes at this layer's output ``node``, where
        alpha-CROWN starts; None for a member without optimisable slopes (alpha-CROWN leaves it)."""
        if self.slopes is None:
            return None
        return lambda node: self.relaxation(*node.parents[0].bounds()).ls

    def back_symbolic(self, coeffs: Coeffs, node: Symbolic, how: Backward) -> tuple[Coeffs, Tensor]:
        # Made once per node: the bounds no longer change while alpha-CROWN optimises.
        lines = node.memo("relaxation", lambda: self.relaxation(*node.parents[0].bounds()))
        ls = lines.ls
        alpha = how.lower_slope(node, coeffs, ls) if self.slopes is not None else None
        if alpha is not None:  # alpha-CROWN's lines pass through the origin (lb = 0 where they apply)
            # Used within the member's own range whatever the optimiser's projection left (sound as used),
            # the gradient passed straight through: CROWN's slopes start at the range's ends, where a clamp's
            # own gradient is zero and alpha-CROWN would never move them.
            alpha = alpha + (alpha.clamp(*self.slopes) - alpha).detach()
            ls = torch.where(coeffs.per_row(~lines.exact), alpha, coeffs.per_row(ls))
        if self.lower_through_origin:
            moved, constant = coeffs.relaxed(ls, lines.us, lines.ub, per_row=alpha is not None)
        else:
            lb = lines.lb if alpha is None else torch.where(lines.exact, lines.lb, torch.zeros_like(lines.lb))
            moved, constant = coeffs.relaxed(ls, lines.us, lines.ub - lb, per_row=alpha is not None)
            constant = constant + coeffs.dot(lb)
        split = how.split_term(node)
        if split is not None:  # beta-CROWN: the split constraints, weighed into the rows (a dense term)
            moved = moved + Dense(split)
        return moved, constant


def outward(low: Tensor, high: Tensor, bound: float | None) -> tuple[Tensor, Tensor]:
    """``[low, high]`` widened by the rounding of the function values that gave them when rounding outward:
    a few units in the last place of the value (an absolute few of the bound's for a bounded function,
    whose library implementations err by a few ulps of it)."""
    if not rounding.rounds_outward():
        return low, high
    u, tiny = rounding.unit(low.dtype), torch.finfo(low.dtype).tiny
    room_low = 8 * u * (low.abs() + (bound or 0.0)) + tiny
    room_high = 8 * u * (high.abs() + (bound or 0.0)) + tiny
    return low - room_low, high + room_high


class ReLU(Activation):
    """ReLU, the family's first member; on hybrid zonotopes the transformer is chosen by ``ctx.relu``
    (``"hybrid"`` or ``"deepz"``); in the linear relaxation it is CROWN's (`crown_relaxation`), with
    alpha-CROWN's slopes when given. Its transformers are its own fused ones (the family's would give the
    same sets)."""

    splittable = True
    slopes = (0.0, 1.0)
    lower_through_origin = True

    def interval(self, lower: Tensor, upper: Tensor) -> tuple[Tensor, Tensor]:
        return F.relu(lower), F.relu(upper)

    def relaxation(self, lower: Tensor, upper: Tensor) -> Lines:
        ls, us, ub, exact = crown_relaxation(lower, upper)
        return Lines(ls, torch.zeros_like(ls), us, ub, exact)

    def relaxed_neurons(self, lower: Tensor, upper: Tensor) -> Tensor:
        return (lower < 0) & (upper > 0)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Box:
        return relu_box(x)

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        if ctx.relu == "deepz":
            return relu_deepz(x)
        return relu_hybrid(x)

    def rounding(self, x) -> Rounding:
        """Elementwise; back-substitution's constants are the upper lines' intercepts (slopes <= 1)."""
        return Rounding(
            back_constant=lambda: _memo(
                x, f"largest_intercept{id(self)}", lambda: _largest_intercept(*x.bounds())
            )
        )


def _memo(value, key: str, make):
    """``make()``, made once per node where `value` is a node of the linear relaxation (whose bounds no
    longer change), else made now (a box or a hybrid zonotope of a forward pass)."""
    memo = getattr(value, "memo", None)
    return make() if memo is None else memo(key, make)
