"""The linear-relaxation domain: CROWN back-substitution over the network's graph (DeepPoly is the same).

A `Symbolic` value is a node of the graph the network computes from its input box: which layer made it from
which nodes. Running a network on one records that graph (one node per layer, sum and concatenation) and,
alongside, runs *companion* elements of cheaper domains through the same layers: always a `Box` (interval
bound propagation), and the exact-input `HybridZonotope` when asked. They give every node interval bounds,
and the ReLUs' linear relaxations are built from the bounds of their inputs.

A linear function of a node's neurons (a specification: the margins ``y_t - y_j``) is bounded below by
moving it back to the input one layer at a time, each layer replacing its output by its input through its
own back-substitution method (``layer.back_symbolic``): exactly for affine layers, through the relaxation
``ls * x <= relu(x) <= us * x + ub`` for a ReLU (a positive coefficient takes the lower line, a negative one
the upper), and at the input the box gives the least value. Every node's coefficients are the sum of what
its consumers sent back, so residual and concatenating blocks need nothing special.

Intermediate bounds (the ReLUs' inputs) come from the companions, elementwise best, and with ``crown`` from
back-substituting each such node's own neurons as well (full CROWN, layer by layer, for verification);
training uses the Box companion's (CROWN-IBP). Only the neurons the companions leave unstable are
back-substituted, in chunks that keep the coefficients within a memory budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from daic.runtime.domains.box import Box
from daic.runtime.domains.coeffs import Coeffs, Dense, Patches
from daic.runtime.domains.element import Element, margin_others, spread_margins
from daic.runtime.domains.rounding import enclosing_radius, rounds_outward
from daic.runtime.domains.rounding_ledger import RoundingLedger
from daic.runtime.domains.zonotope import HybridZonotope

if TYPE_CHECKING:
    from daic.runtime.context import AbstractContext

COMPANIONS = ("box", "hbox")
"""Domains that may run beside the relaxation to give intermediate bounds: Box always, the hybrid zonotope
(exact input zonotope) on request."""

SAMPLE = 32
"""The unstable neurons per image a layer's sample takes (with ``least_gain``): evenly spaced among them,
so that the sample spans the layer's channels. A layer with at most four times as many is refined whole."""

BUDGET_BYTES = 2**30
"""Largest coefficient tensor one back-substitution of intermediate bounds may hold (the rows are split
into chunks to stay within it)."""


@dataclass
class Backward:
    """How one back-substitution relaxes the ReLUs, and what it keeps.

    - ``alphas`` maps a ReLU's output node id to its lower slopes, one per row of the specification and
      neuron, shaped as the rows are there (`Coeffs.per_row`: ``(B, S, *F)`` for the margins' rows,
      windows for rows kept as windows; alpha-CROWN); a node without one takes CROWN's adaptive choice,
      or with ``grow``, gets slopes made from it, to optimise (alpha-CROWN of every layer, whose rows'
      shapes are known only once they reach each ReLU).
    - ``betas`` maps a ReLU's output node id to the multipliers (``(B, S, *F)``, >= 0) of its input's split
      constraints ``sign * x >= 0`` (``signs``, ``(B, *F)`` in {-1, 0, 1}): each row gains
      ``-beta * sign * x``, which is <= 0 wherever the constraints hold, so the bound stays a bound on the
      subdomain they define and, with the best multipliers, is its exact minimum over the relaxation
      (beta-CROWN, Wang et al. 2021).
    - ``record``: ids of nodes whose rows, once complete, are kept in ``recorded`` (for branching and
      counterexamples).
    """

    alphas: dict[int, Tensor] = field(default_factory=dict)
    betas: dict[int, Tensor] = field(default_factory=dict)
    signs: dict[int, Tensor] = field(default_factory=dict)
    record: set[int] = field(default_factory=set)
    recorded: dict[int, Coeffs] = field(default_factory=dict)
    grow: bool = False

    def lower_slope(self, node: Symbolic, rows: Coeffs, initial: Tensor) -> Tensor | None:
        """The lower slopes of `rows` at the ReLU of output `node` (``initial``: CROWN's, a neuron map)."""
        alpha = self.alphas.get(node.id)
        if alpha is None and self.grow:
            alpha = rows.per_row(initial).detach().clone().requires_grad_(True)
            self.alphas[node.id] = alpha
        return alpha

    def split_term(self, node: Symbolic) -> Tensor | None:
        """``-beta * sign`` for the ReLU at output `node`, per row, or None."""
        beta = self.betas.get(node.id)
        return None if beta is None else -beta * self.signs[node.id].unsqueeze(1)


@dataclass
class LayerSlopes:
    """alpha-CROWN's slopes for the intermediate bounds too (every layer's, as auto_LiRPA's CROWN-Optimized):
    for each node whose neurons CROWN bounds (by id), the neurons its rows bound (``neurons``: flat
    indices ``(N,)``, the same for every image; each has a row of its lower bound and one of its upper
    bound, negated), and, for each ReLU output node before it (by id), the lower slopes of those rows
    (`Backward.alphas`), made by the first analysis that uses them. Node ids, and the rows' shapes at each
    ReLU, are the same in every analysis of one network."""

    neurons: dict[int, Tensor]
    alphas: dict[int, dict[int, Tensor]] = field(default_factory=dict)
    fixed: frozenset[int] = frozenset()
    """Nodes whose bounds no slope reaches (no ReLU before them): they keep the analysis's prior bounds."""

    def leaves(self) -> list[Tensor]:
        """Every slope made so far, to optimise."""
        return [alpha for per_node in self.alphas.values() for alpha in per_node.values()]


class Analysis:
    """What the nodes of one analysis share: the input box, the settings, and the ids of new nodes."""

    def __init__(
        self,
        lower: Tensor,
        upper: Tensor,
        crown: bool,
        budget_bytes: int,
        tighten: bool,
        splits: dict[int, Tensor] | None = None,
        prior: dict[int, tuple[Tensor, Tensor]] | None = None,
        deadline: float = math.inf,
        least_gain: float = 0.0,
        slopes: LayerSlopes | None = None,
    ) -> None:
        self.center = (upper + lower) / 2
        if rounds_outward():
            self.radius = enclosing_radius(self.center, lower, upper)
        else:
            self.radius = (upper - lower) / 2
        self.crown = crown
        self.tighten = tighten
        self.splits = splits or {}
        self.prior = prior or {}
        self.infeasible = torch.zeros(lower.shape[0], dtype=torch.bool, device=lower.device)
        self.budget_bytes = budget_bytes
        self.widest = lower[0].numel()  # neurons of the widest node so far (sizes the chunks)
        self.deadline = deadline  # `time.perf_counter()` past which CROWN refines no more neurons
        self.least_gain = least_gain  # the share a layer's sample must narrow by for CROWN to go on
        # alpha-CROWN's slopes of the intermediate bounds' rows, where they are optimised
        self.slopes = slopes
        # Seconds per neuron and per node behind it (back-substitution passes through them all) of the
        # last chunk refined: a chunk that would end past the deadline at that rate is not started (a
        # chunk of a CNN7's layer takes seconds, and a later layer's takes longer).
        self.neuron_seconds = 0.0
        self.nodes = 0

    def new_id(self) -> int:
        self.nodes += 1
        return self.nodes


class Symbolic(Element):
    """A node: its ``layer`` (or ``kind`` "input", "add", "cat") applied to ``parents``, with the companion
    elements that reached it."""

    __slots__ = (
        "_bounds",
        "_memo",
        "_nearest",
        "_refined",
        "analysis",
        "companions",
        "dim",
        "id",
        "kind",
        "layer",
        "parents",
    )

    def __init__(
        self,
        analysis: Analysis,
        kind: str,
        parents: tuple[Symbolic, ...],
        companions: tuple[Element, ...],
        layer: Any = None,
        dim: int = 1,
    ) -> None:
        self.analysis, self.kind, self.parents, self.companions = analysis, kind, parents, companions
        self.layer, self.dim = layer, dim
        self.id = analysis.new_id()
        self._bounds: tuple[Tensor, Tensor] | None = None
        self._nearest = False  # whether `_bounds` were made rounding to nearest
        self._refined = False
        self._memo: dict[tuple[str, bool], Any] = {}
        analysis.widest = max(analysis.widest, self.shape[1:].numel())

    @classmethod
    def input(
        cls,
        lower: Tensor,
        upper: Tensor,
        companions: Sequence[str] = ("box",),
        crown: bool = False,
        budget_bytes: int = BUDGET_BYTES,
        tighten: bool = True,
        splits: dict[int, Tensor] | None = None,
        prior: dict[int, tuple[Tensor, Tensor]] | None = None,
        deadline: float = math.inf,
        least_gain: float = 0.0,
        slopes: LayerSlopes | None = None,
    ) -> Symbolic:
        """The input box ``[lower, upper]``. ``companions`` run beside it (Box always); ``crown``: the
        ReLUs' inputs are bounded by back-substitution too (full CROWN), and with ``tighten`` those bounds
        are intersected with the companions' (without: CROWN's alone where it ran, as auto_LiRPA's
        'backward' method computes them). ``splits`` (branch and bound) maps the id of a node that feeds a
        ReLU to the sign each image's split fixes for its neurons (``(B, *F)``: 1 active, ``x >= 0``; -1
        inactive, ``x <= 0``; 0 free): their bounds are clamped to it, and an image whose bounds then cross
        is infeasible (``analysis.infeasible``). ``prior`` maps node ids to bounds known to hold on the
        whole input box (an earlier analysis of a box that contains this one, as branch and bound's root):
        the node's bounds are intersected with them before they are used. Past ``deadline`` (a
        `time.perf_counter()` value) CROWN refines no more neurons: the rest keep their companions' bounds,
        sound but looser, so that a search's time limit holds on a network whose full CROWN bounds take
        minutes. With ``least_gain`` > 0, CROWN refines a sample of each image's unstable neurons of a
        layer first (`spread_sample`) and the rest of an image's only if it narrowed its sample's intervals
        by at least that share: on a network trained with intervals the companions' bounds are often as
        tight, and full CROWN then costs most of a search's time for nothing. With ``slopes``, the nodes it
        names are bounded by their rows with those lower slopes (alpha-CROWN of every layer), the others
        as usual."""
        values = _companion_inputs(lower, upper, companions)
        analysis = Analysis(
            lower, upper, crown, budget_bytes, tighten, splits, prior, deadline, least_gain, slopes
        )
        return cls(analysis, "input", (), values)

    # ----------------------------------------------------------------------------------------------
    # shape

    @property
    def shape(self) -> torch.Size:
        return self.companions[0].shape  # type: ignore[attr-defined]

    @property
    def batch(self) -> int:
        return self.shape[0]

    # ----------------------------------------------------------------------------------------------
    # the graph

    def through(self, layer: Any, ctx: AbstractContext) -> Symbolic:
        if getattr(layer, "back_symbolic", None) is None:
            raise NotImplementedError(f"{type(layer).__name__} has no linear-relaxation transformer")
        if getattr(layer, "relaxes_input", False):
            self.refine(layer)
        companions = tuple(c.through(layer, ctx) for c in self.companions)
        return Symbolic(self.analysis, "layer", (self,), companions, layer=layer)

    def memo(self, key: str, make: Any) -> Any:
        """``make()``, made once for this node: what a layer derives from bounds that no longer change once
        a node is made (its relaxation), where every step of an optimisation would recompute it. Kept apart
        by rounding mode: what is made rounding to nearest must not serve a later outward-rounded bound."""
        key = (key, rounds_outward())
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def ancestors(self) -> list[Symbolic]:
        """This node and every node it was computed from, each once, latest first."""
        found: dict[int, Symbolic] = {}
        work = [self]
        while work:
            node = work.pop()
            if node.id not in found:
                found[node.id] = node
                work.extend(node.parents)
        return [found[i] for i in sorted(found, reverse=True)]

    def __add__(self, other: Symbolic) -> Symbolic:
        if not isinstance(other, Symbolic) or other.analysis is not self.analysis:
            return NotImplemented
        companions = tuple(a + b for a, b in zip(self.companions, other.companions, strict=True))  # type: ignore[operator]
        return Symbolic(self.analysis, "add", (self, other), companions)

    @staticmethod
    def cat(values: Sequence[Symbolic], dim: int = 1) -> Symbolic:  # type: ignore[override]
        if dim < 0:
            dim += len(values[0].shape)
        parts = zip(*(v.companions for v in values), strict=True)
        companions = tuple(type(group[0]).cat(group, dim) for group in parts)
        return Symbolic(values[0].analysis, "cat", tuple(values), companions, dim=dim)

    # ----------------------------------------------------------------------------------------------
    # bounds

    def bounds(self) -> tuple[Tensor, Tensor]:
        """The elementwise best interval of the companions (and of CROWN, once `refine` ran). Read first
        rounding to nearest (an optimisation's steps), they are read again for an outward-rounded bound."""
        if self._bounds is None or (self._nearest and rounds_outward()):
            lows, ups = zip(*(c.bounds() for c in self.companions), strict=True)
            self._bounds = reduce(torch.maximum, lows), reduce(torch.minimum, ups)
            self._nearest = not rounds_outward()
        return self._bounds

    def refine(self, layer: Any = None) -> None:
        """With ``crown``: bounds of this node's neurons by back-substitution, intersected with the
        companions'. Only the neurons each image's companions leave unstable (lower < 0 < upper) are
        back-substituted, each as two rows (its lower and upper bound) of its own image, a chunk of them at
        a time within the memory budget. With ``least_gain``, a sample of each image's goes first, and the
        rest of an image's only if CROWN narrowed its sample by at least that share. The Box companion is
        narrowed to the result, so later interval bounds start from it."""
        if self._refined or self.kind == "input":
            return
        self._refined = True
        self._apply_prior()
        self._apply_split()
        if not self.analysis.crown:
            return
        slopes = self.analysis.slopes
        if slopes is not None and self.id in slopes.fixed:
            return
        if slopes is not None and self.id in slopes.neurons:
            self._refine_by_slopes(slopes)
            return
        lower, upper = self.bounds()
        low, up = lower.flatten(1).clone(), upper.flatten(1).clone()
        unstable = relaxed_by(layer, lower, upper).flatten(1)  # (B, N)
        rest = unstable
        sample = spread_sample(unstable, SAMPLE) if self.analysis.least_gain > 0 else None
        if sample is not None:
            self._refine_neurons(sample, low, up)
            rest = paying_rest(unstable, sample, (lower, upper), (low, up), self.analysis.least_gain)
        self._refine_neurons(rest, low, up)
        self._set_bounds(low.reshape(lower.shape), up.reshape(upper.shape))

    def _refine_neurons(self, neurons: Tensor, low: Tensor, up: Tensor) -> None:
        """CROWN's bounds of the `neurons` (``(B, N)`` mask) written into ``low`` and ``up`` (``(B, N)``),
        a chunk at a time, until the analysis's deadline."""
        per_neuron = 2 * self.analysis.widest * low.element_size()  # its two rows, on the widest node
        per_chunk = max(1, self.analysis.budget_bytes // per_neuron)
        for images, neuron, keep in unstable_chunks(neurons, per_chunk):
            began, count = time.perf_counter(), int(keep.sum())
            if began + count * self.id * self.analysis.neuron_seconds > self.analysis.deadline:
                break
            found_low, found_up = self._crown_bounds(images, neuron, keep)
            self.analysis.neuron_seconds = (time.perf_counter() - began) / max(count * self.id, 1)
            at, which = images[:, None].expand_as(neuron)[keep], neuron[keep]
            if self.analysis.tighten:
                found_low = torch.maximum(low[at, which], found_low)
                found_up = torch.minimum(up[at, which], found_up)
            low[at, which], up[at, which] = found_low, found_up

    def _refine_by_slopes(self, slopes: LayerSlopes) -> None:
        """CROWN's bounds of the neurons `slopes` names for this node, one lower and one upper row each for
        every image, back-substituted with the rows' own lower slopes (made here the first time); as
        windows on a map, as dense rows on a flat node; differentiable in the slopes."""
        lower, upper = self.bounds()
        neurons = slopes.neurons[self.id]
        n, b = len(neurons), lower.shape[0]
        how = Backward(slopes.alphas.setdefault(self.id, {}), grow=True)
        found = backsubstitute(self, self._rows_of(neurons, b), how)
        if len(self.shape) == 4:  # windows: row r of image r // n, the upper bounds' after all lower ones
            found = found.view(2, b, n).permute(1, 0, 2).reshape(b, 2 * n)
        low, up = lower.flatten(1), upper.flatten(1)
        found_low, found_up = found[:, :n], -found[:, n:]
        if self.analysis.tighten:
            # The better bound's value, the rows' gradient (straight through): where the companions' bound
            # is the better one the rows' slopes would otherwise get none, and never overtake it.
            found_low = found_low + (torch.maximum(low[:, neurons], found_low) - found_low).detach()
            found_up = found_up + (torch.minimum(up[:, neurons], found_up) - found_up).detach()
        low, up = low.index_copy(1, neurons, found_low), up.index_copy(1, neurons, found_up)
        self._set_bounds(low.view_as(lower), up.view_as(upper))

    def _rows_of(self, neurons: Tensor, images: int) -> Coeffs:
        """Rows ``+x`` and ``-x`` of each of the `neurons` in every image: windows on a map (lower bounds'
        rows first, image by image; then the upper bounds'), dense rows ``(B, 2N, *F)`` on a flat node."""
        n = len(neurons)
        if len(self.shape) == 4:
            image = torch.arange(images, device=neurons.device).repeat_interleave(n).repeat(2)
            sign = self.analysis.center.new_ones(2 * images * n)
            sign[images * n :] = -1
            return Patches.neurons(image, neurons.repeat(2 * images), sign, self.shape[1:])
        place = torch.arange(n, device=neurons.device)
        A = self.analysis.center.new_zeros((images, 2 * n, self.shape[1:].numel()))
        A[:, place, neurons] = 1
        A[:, n + place, neurons] = -1
        return Dense(A.view(images, 2 * n, *self.shape[1:]))

    def _set_bounds(self, lower: Tensor, upper: Tensor) -> None:
        """Takes ``(lower, upper)`` as this node's bounds, an image's crossing bounds marking it infeasible
        (kept as a point, to stay finite), and narrows the Box companion to them (with ``tighten``)."""
        crossed = lower > upper
        if bool(crossed.any()):
            self.analysis.infeasible |= crossed.flatten(1).any(1)
            upper = torch.where(crossed, lower, upper)
        self._bounds, self._nearest = (lower, upper), not rounds_outward()
        if self.analysis.tighten:
            self.companions = (Box.from_bounds(lower, upper), *self.companions[1:])

    def _apply_prior(self) -> None:
        """Intersects the bounds with those known beforehand for this node (``analysis.prior``)."""
        known = self.analysis.prior.get(self.id)
        if known is None:
            return
        lower, upper = self.bounds()
        self._set_bounds(torch.maximum(lower, known[0]), torch.minimum(upper, known[1]))

    def _apply_split(self) -> None:
        """Clamps the bounds to this node's split signs: ``x >= 0`` where 1, ``x <= 0`` where -1."""
        sign = self.analysis.splits.get(self.id)
        if sign is None:
            return
        lower, upper = self.bounds()
        zero = torch.zeros((), dtype=lower.dtype, device=lower.device)
        lower = torch.where(sign > 0, torch.maximum(lower, zero), lower)
        upper = torch.where(sign < 0, torch.minimum(upper, zero), upper)
        self._set_bounds(lower, upper)

    def _crown_bounds(self, images: Tensor, neuron: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
        """Lower and upper bounds of the neurons ``neuron[g, j]`` (``(G, c)``) of image ``images[g]``
        where ``keep``, in the order of ``neuron[keep]``, by back-substituting the rows ``+x`` and ``-x`` of
        each: as windows on a map, as dense rows on a flat node."""
        if len(self.shape) == 4:
            return self._window_bounds(images, neuron, keep)
        return self._dense_bounds(images, neuron, keep)

    def _window_bounds(self, images: Tensor, neuron: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
        """One window (`Patches`) per kept neuron: an image's windows differ from its batch mates'."""
        image = images[:, None].expand_as(neuron)[keep]
        k = image.shape[0]
        sign = self.analysis.center.new_ones(2 * k)
        sign[k:] = -1
        rows = Patches.neurons(image.repeat(2), neuron[keep].repeat(2), sign, self.shape[1:])
        found = backsubstitute(self, rows).squeeze(1)
        return found[:k], -found[k:]

    def _dense_bounds(self, images: Tensor, neuron: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
        """Dense rows lined up per image of the chunk, ``(G, 2c, *F)``: each image's bounds and slopes
        broadcast over its rows; the rows an image does not keep are zero."""
        g, c = neuron.shape
        mark = keep.to(self.analysis.center.dtype).unsqueeze(2)
        A = mark.new_zeros((g, 2 * c, self.shape[1:].numel()))
        A[:, :c].scatter_(2, neuron.unsqueeze(2), mark)
        A[:, c:].scatter_(2, neuron.unsqueeze(2), -mark)
        found = backsubstitute(self, Dense(A.reshape(g, 2 * c, *self.shape[1:]), images))
        return found[:, :c][keep], -found[:, c:][keep]

    def concretize(self, coeffs: Coeffs) -> Tensor:
        """``(B, S)``: the least value of the rows over this node's companions (the best of them), or its
        interval bounds for rows kept as windows."""
        if isinstance(coeffs, Patches) or coeffs.image is not None:
            lower, upper = self.bounds()
            return coeffs.bound((upper + lower) / 2, (upper - lower) / 2)
        found = [c.linear_lower(coeffs.A) for c in self.companions]
        return reduce(torch.maximum, found)

    def linear_lower(self, coeffs: Tensor, bias: Tensor | None = None) -> Tensor:
        low = backsubstitute(self, Dense(coeffs))
        return low if bias is None else low + bias

    def margin_lower(
        self, target: Tensor, how: Backward | None = None, until_nonlinear: bool = False
    ) -> Tensor:
        """``(B, C - 1)``: lower bounds of ``y_t - y_j`` for the classes ``j != t`` (in class order), the
        specification back-substituted from this output node in one pass. ``until_nonlinear``: only through
        the layers after the last ReLU (the specification folded into them), then the companions' bounds:
        interval bound propagation of the margins, as IBP is reported."""
        rows, _ = margin_others(target, self.shape[1], self.analysis.center.dtype)
        return backsubstitute(self, Dense(rows), how, until_nonlinear=until_nonlinear)

    def margin_upper(self, target: Tensor) -> Tensor:
        """Upper bounds of ``y_j - y_t`` from CROWN's lower bounds of the margins (how a training goal reads
        them otherwise, CROWN-IBP's mixture, is the goal's: `training.parts.CROWNIBPReading`)."""
        _, others = margin_others(target, self.shape[1], self.analysis.center.dtype)
        return spread_margins(self.margin_lower(target), others, self.shape[1])

    def fused_loss(self, target: Tensor, weight: float = 1.0) -> Tensor:
        """``log U`` per example, ``U`` an upper bound of ``sum_j exp(y_j - y_t)`` over the input box: the
        cross-entropy of every point in it is at most this (auto_LiRPA's "loss fusion").

        With ``z_j = y_j - y_t`` in ``[l_j, u_j]`` (interval bounds of the margins, folded into the last
        layers), ``exp`` lies below its chord over that interval, so ``sum_j exp(z_j)`` is at most one linear
        function of the logits, ``sum_j a_j (y_j - y_t) + b``, bounded above by one back-substitution (one
        row, where the margins take one per class). ``U = w U_CROWN + (1 - w) U_IBP`` with ``U_IBP =
        sum_j exp(u_j)``, ``w`` the `weight` (CROWN-IBP's beta); the exponentials are shifted by the largest
        ``u_j`` (and by at least 0, for ``z_t = 0``), which the loss adds back.
        """
        classes, dtype = self.shape[1], self.analysis.center.dtype
        rows, _ = margin_others(target, classes, dtype)  # e_t - e_j
        folded = backsubstitute(self, Dense(torch.cat([rows, -rows], 1)), until_nonlinear=True)
        margin_low, margin_up = folded[:, : classes - 1], -folded[:, classes - 1 :]
        low, up = -margin_up, -margin_low  # bounds of z_j = y_j - y_t, j != t
        shift = up.amax(1, keepdim=True).clamp(min=0).detach()
        target_term = torch.exp(-shift).squeeze(1)  # exp(z_t - shift), z_t = 0
        ibp = torch.exp(up - shift).sum(1) + target_term
        w = weight
        if w == 0:
            return shift.squeeze(1) + torch.log(ibp)
        e_low, e_up = torch.exp(low - shift), torch.exp(up - shift)
        width = up - low
        tiny = width <= torch.finfo(dtype).eps * (1 + up.abs())
        slope = torch.where(tiny, e_up, (e_up - e_low) / torch.where(tiny, 1, width))
        constant = e_low - slope * (low - shift)  # the chord in v = z - shift: slope v + constant
        # sum_j slope_j (y_j - y_t) is at most minus the lower bound of sum_j slope_j (y_t - y_j).
        row = (slope.unsqueeze(2) * rows).sum(1, keepdim=True)
        linear = -backsubstitute(self, Dense(row)).squeeze(1)
        crown = linear + (constant - slope * shift).sum(1) + target_term
        mixed = w * crown + (1 - w) * ibp if w != 1 else crown
        return shift.squeeze(1) + torch.log(mixed.clamp(min=torch.finfo(dtype).tiny))


def _companion_inputs(lower: Tensor, upper: Tensor, companions: Sequence[str]) -> tuple[Element, ...]:
    """The input box in each companion domain (Box always, the exact hybrid zonotope with "hbox")."""
    unknown = set(companions) - set(COMPANIONS)
    if unknown:
        raise ValueError(f"Symbolic: unknown companion domains {sorted(unknown)}; known: {COMPANIONS}")
    values: list[Element] = [Box.from_bounds(lower, upper)]
    if "hbox" in companions:
        values.append(HybridZonotope.exact_from_bounds(lower, upper))
    return tuple(values)


def paying_rest(
    unstable: Tensor, sample: Tensor, before: tuple[Tensor, Tensor], after: tuple[Tensor, Tensor],
    least_gain: float,
) -> Tensor:  # fmt: skip
    """``(B, N)``: the `unstable` neurons outside the `sample` of each image whose sample's intervals shrank
    in total by at least `least_gain` from `before` to `after` (each ``(lower, upper)``, ``B * N``
    elements); an image whose sample had no width pays nothing."""
    width = [((up - low).detach().flatten(1) * sample).sum(1) for low, up in (before, after)]
    tiny = torch.finfo(width[0].dtype).tiny
    narrowing = torch.where(width[0] > 0, 1 - width[1] / width[0].clamp(min=tiny), 0.0)
    return unstable & ~sample & (narrowing >= least_gain)[:, None]


def spread_sample(unstable: Tensor, per_image: int) -> Tensor | None:
    """``(B, N)``: ``min(count, per_image)`` of each image's unstable neurons (`unstable`, ``(B, N)``), evenly
    spaced in their order, and all of an image's with at most four times as many (sampling would not pay);
    None when no image has more."""
    counts = unstable.sum(1, keepdim=True)
    if unstable.numel() == 0 or int(counts.max()) <= 4 * per_image:
        return None
    rank = unstable.cumsum(1) - 1  # each unstable neuron's place among its image's
    step = (counts // per_image).clamp(min=1)
    spread = (rank % step == 0) & (rank < step * per_image)
    return unstable & (spread | (counts <= 4 * per_image))


def unstable_chunks(unstable: Tensor, per_chunk: int) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
    """The unstable neurons of ``unstable`` (``(B, N)``) in chunks of at most `per_chunk` rows per image
    slot: ``(images (G,), neuron (G, c), keep (G, c))``, image ``images[g]``'s neurons ``neuron[g][keep[g]]``.
    Images go most unstable first, and a chunk takes only images with at least 3/4 of its first's count
    (``c``): at most a quarter of its rows are padding, where lining every image up to the batch's most
    unstable one made them most of the work. An image with more than `per_chunk` is split over chunks of
    its own.
    """
    counts = unstable.sum(1)
    order = torch.argsort(counts, descending=True, stable=True)
    order = order[counts[order] > 0]
    ranked = torch.sort((~unstable).to(torch.uint8), dim=1, stable=True).indices  # unstable ones first
    sizes = counts[order].tolist()
    i = 0
    while i < len(sizes):
        most = sizes[i]
        if most >= per_chunk:
            for start in range(0, most, per_chunk):
                neuron = ranked[order[i], start : min(most, start + per_chunk)][None]
                yield order[i : i + 1], neuron, torch.ones_like(neuron, dtype=torch.bool)
            i += 1
            continue
        similar = sum(1 for size in sizes[i : i + per_chunk // most] if 4 * size >= 3 * most)
        images = order[i : i + similar]
        keep = torch.arange(most, device=unstable.device)[None, :] < counts[images][:, None]
        yield images, ranked[images, :most], keep
        i += len(images)


def backsubstitute(
    start: Symbolic, coeffs: Coeffs, how: Backward | None = None, *, until_nonlinear: bool = False
) -> Tensor:
    """``(B, S)``: lower bounds of the rows ``coeffs`` over ``start``'s neurons, moved back node by node to
    the input box (or, with ``until_nonlinear``, to the outputs of the last relaxing layers, bounded there
    by their companions). With outward rounding a `RoundingLedger` follows the rows' rounding errors and
    lowers the result by what they can cost."""
    how = how or Backward()
    ledger = RoundingLedger() if rounds_outward() else None
    pending: dict[int, tuple[Symbolic, Coeffs]] = {start.id: (start, coeffs)}
    total: Tensor | None = None
    while pending:
        node, rows = pending.pop(max(pending))  # ids grow along the graph: every consumer comes first
        error, norm = ledger.take(node, rows) if ledger else (0.0, None)
        if node.id in how.record:
            how.recorded[node.id] = rows
        if node.kind == "input":
            part: Tensor | None = rows.bound(node.analysis.center, node.analysis.radius)
            if ledger:
                ledger.at_input(rows, node.analysis.center, node.analysis.radius, error, norm)
        elif until_nonlinear and getattr(node.layer, "relaxes_input", False):
            part = node.concretize(rows)
            if ledger:
                ledger.at_companions(rows, node, error)
        elif node.kind == "layer":
            moved, part = node.layer.back_symbolic(rows, node, how)
            if ledger:
                ledger.at_layer(node, how, rows, moved, part is not None, error, norm)
            if moved is not None:
                _send(pending, node.parents[0], moved, ledger)
        else:
            part = None
            _send_to_parents(pending, node, rows, error, ledger)
        if part is not None:
            total = part if total is None else total + part
            if ledger:
                ledger.added(total)
    assert total is not None
    return ledger.lowered(total) if ledger else total


def _send_to_parents(
    pending: dict[int, tuple[Symbolic, Coeffs]], node: Symbolic, rows: Coeffs, error: Tensor | float,
    ledger: RoundingLedger | None,
) -> None:  # fmt: skip
    """The rows of an "add" node to every parent, of a "cat" node each parent its piece; each parent owes
    the node's rounding error."""
    if node.kind == "add":
        pieces = [rows] * len(node.parents)
    else:
        pieces = rows.split([p.shape[node.dim] for p in node.parents], node.dim)
    for parent, piece in zip(node.parents, pieces, strict=True):
        if ledger:
            ledger.owe(parent, error)
        _send(pending, parent, piece, ledger)


def _send(
    pending: dict[int, tuple[Symbolic, Coeffs]], node: Symbolic, rows: Coeffs, ledger: RoundingLedger | None
) -> None:
    """Adds `rows` to what `node` is owed (the ledger told of the sum's rounding)."""
    if node.id in pending:
        rows = pending[node.id][1] + rows
        if ledger:
            ledger.merged(node, rows)
    pending[node.id] = (node, rows)


def relaxed_by(layer: Any, lower: Tensor, upper: Tensor) -> Tensor:
    """The neurons the consuming `layer`'s relaxation loosens, those CROWN refines: as the layer declares
    (`relaxed_neurons`: an activation's non-affine ones, which for a smooth one are all but points), else
    those whose interval crosses zero (ReLU's, max pooling's)."""
    declared = getattr(layer, "relaxed_neurons", None)
    return declared(lower, upper) if declared is not None else (lower < 0) & (upper > 0)
