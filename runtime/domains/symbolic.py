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

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .box import Box
from .coeffs import Coeffs, Dense, Patches
from .element import Element, margin_others, spread_margins
from .zonotope import HybridZonotope

if TYPE_CHECKING:
    from ..context import AbstractContext

COMPANIONS = ("box", "hbox")
"""Domains that may run beside the relaxation to give intermediate bounds: Box always, the hybrid zonotope
(exact input zonotope) on request."""

BUDGET_BYTES = 2**30
"""Largest coefficient tensor one back-substitution of intermediate bounds may hold (the rows are split
into chunks to stay within it)."""


@dataclass
class Backward:
    """How one back-substitution relaxes the ReLUs: ``alphas`` maps a ReLU node's id to its lower slopes,
    one per row of the specification and neuron (``(B, S, *F)``, alpha-CROWN); a node without one takes
    CROWN's adaptive choice."""

    alphas: dict[int, Tensor] = field(default_factory=dict)

    def lower_slope(self, node: Symbolic) -> Tensor | None:
        return self.alphas.get(node.id)


class Analysis:
    """What the nodes of one analysis share: the input box, the settings, and the ids of new nodes."""

    def __init__(
        self, lower: Tensor, upper: Tensor, crown: bool, budget_bytes: int, crown_weight: float, tighten: bool
    ) -> None:
        self.center, self.radius = (upper + lower) / 2, (upper - lower) / 2
        self.crown = crown
        self.tighten = tighten
        self.crown_weight = crown_weight
        self.budget_bytes = budget_bytes
        self.widest = lower[0].numel()  # neurons of the widest node so far (sizes the chunks)
        self.nodes = 0

    def new_id(self) -> int:
        self.nodes += 1
        return self.nodes


class Symbolic(Element):
    """A node: its ``layer`` (or ``kind`` "input", "add", "cat") applied to ``parents``, with the companion
    elements that reached it."""

    __slots__ = ("_bounds", "_refined", "analysis", "companions", "dim", "id", "kind", "layer", "parents")

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
        self._refined = False
        analysis.widest = max(analysis.widest, self.shape[1:].numel())

    @classmethod
    def input(
        cls,
        lower: Tensor,
        upper: Tensor,
        companions: Sequence[str] = ("box",),
        crown: bool = False,
        budget_bytes: int = BUDGET_BYTES,
        crown_weight: float = 1.0,
        tighten: bool = True,
    ) -> Symbolic:
        """The input box ``[lower, upper]``. ``companions`` run beside it (Box always); ``crown``: the
        ReLUs' inputs are bounded by back-substitution too (full CROWN), and with ``tighten`` those bounds
        are intersected with the companions' (without: CROWN's alone where it ran, as auto_LiRPA's
        'backward' method computes them). ``crown_weight``: see `margin_upper`."""
        unknown = set(companions) - set(COMPANIONS)
        if unknown:
            raise ValueError(f"Symbolic: unknown companion domains {sorted(unknown)}; known: {COMPANIONS}")
        values: list[Element] = [Box.from_bounds(lower, upper)]
        if "hbox" in companions:
            values.append(HybridZonotope.exact_from_bounds(lower, upper))
        analysis = Analysis(lower, upper, crown, budget_bytes, crown_weight, tighten)
        return cls(analysis, "input", (), tuple(values))

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
            self.refine()
        companions = tuple(c.through(layer, ctx) for c in self.companions)
        return Symbolic(self.analysis, "layer", (self,), companions, layer=layer)

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
        """The elementwise best interval of the companions (and of CROWN, once `refine` ran)."""
        if self._bounds is None:
            lows, ups = zip(*(c.bounds() for c in self.companions), strict=True)
            self._bounds = reduce(torch.maximum, lows), reduce(torch.minimum, ups)
        return self._bounds

    def refine(self) -> None:
        """With ``crown``: bounds of this node's neurons by back-substitution, intersected with the
        companions'. Only the neurons each image's companions leave unstable (lower < 0 < upper) are
        back-substituted, each as two rows (its lower and upper bound); a map's rows are windows
        (`Patches`). The Box companion is narrowed to the result, so later interval bounds start from it."""
        if not self.analysis.crown or self._refined or self.kind == "input":
            return
        self._refined = True
        lower, upper = self.bounds()
        unstable = ((lower < 0) & (upper > 0)).flatten(1).nonzero()  # (U, 2): image, neuron
        if unstable.shape[0] == 0:
            return
        low, up = lower.flatten(1).clone(), upper.flatten(1).clone()
        per_row = self.analysis.widest * lower.element_size()
        step = max(1, self.analysis.budget_bytes // (2 * per_row))
        for start in range(0, unstable.shape[0], step):
            image, neuron = unstable[start : start + step].T
            k = image.shape[0]
            found = backsubstitute(self, self._rows(image.repeat(2), neuron.repeat(2), k)).squeeze(1)
            if self.analysis.tighten:
                low[image, neuron] = torch.maximum(low[image, neuron], found[:k])
                up[image, neuron] = torch.minimum(up[image, neuron], -found[k:])
            else:
                low[image, neuron], up[image, neuron] = found[:k], -found[k:]
        lower, upper = low.reshape(lower.shape), up.reshape(upper.shape)
        upper = torch.maximum(upper, lower)  # both are sound: rounding alone could cross them
        self._bounds = lower, upper
        if self.analysis.tighten:
            self.companions = (Box.from_bounds(lower, upper), *self.companions[1:])

    def _rows(self, image: Tensor, neuron: Tensor, k: int) -> Coeffs:
        """Rows ``+x[neuron]`` for the first ``k`` entries and ``-x[neuron]`` for the others, each over its
        image's neurons of this node: windows on a map, dense rows otherwise."""
        sign = self.analysis.center.new_ones(2 * k)
        sign[k:] = -1
        features = self.shape[1:]
        if len(features) == 3:
            return Patches.neurons(image, neuron, sign, features)
        A = sign.new_zeros((2 * k, features.numel()))
        A[torch.arange(2 * k, device=A.device), neuron] = sign
        return Dense(A.reshape(2 * k, 1, *features), image)

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
        """Upper bounds of ``y_j - y_t`` from the lower bounds ``w * CROWN + (1 - w) * IBP`` of the margins,
        ``w`` the analysis' ``crown_weight`` (CROWN-IBP's beta, Zhang et al. 2020): both with the
        specification folded into the last layers; the IBP term is skipped at ``w = 1``, CROWN's at 0."""
        w = self.analysis.crown_weight
        _, others = margin_others(target, self.shape[1], self.analysis.center.dtype)
        if w == 0:
            lower = self.margin_lower(target, until_nonlinear=True)
        elif w == 1:
            lower = self.margin_lower(target)
        else:
            lower = w * self.margin_lower(target) + (1 - w) * self.margin_lower(target, until_nonlinear=True)
        return spread_margins(lower, others, self.shape[1])


def backsubstitute(
    start: Symbolic, coeffs: Coeffs, how: Backward | None = None, *, until_nonlinear: bool = False
) -> Tensor:
    """``(B, S)``: lower bounds of the rows ``coeffs`` over ``start``'s neurons, moved back node by node to
    the input box (or, with ``until_nonlinear``, to the outputs of the last relaxing layers, bounded there
    by their companions)."""
    how = how or Backward()
    pending: dict[int, tuple[Symbolic, Coeffs]] = {start.id: (start, coeffs)}
    total: Tensor | None = None
    while pending:
        node, rows = pending.pop(max(pending))  # ids grow along the graph: every consumer comes first
        if node.kind == "input":
            part: Tensor | None = rows.bound(node.analysis.center, node.analysis.radius)
        elif until_nonlinear and getattr(node.layer, "relaxes_input", False):
            part = node.concretize(rows)
        elif node.kind == "layer":
            moved, part = node.layer.back_symbolic(rows, node, how)
            if moved is not None:
                _send(pending, node.parents[0], moved)
        elif node.kind == "add":
            part = None
            for parent in node.parents:
                _send(pending, parent, rows)
        else:  # "cat"
            part = None
            sizes = [p.shape[node.dim] for p in node.parents]
            for parent, piece in zip(node.parents, rows.split(sizes, node.dim), strict=True):
                _send(pending, parent, piece)
        if part is not None:
            total = part if total is None else total + part
    assert total is not None
    return total


def _send(pending: dict[int, tuple[Symbolic, Coeffs]], node: Symbolic, rows: Coeffs) -> None:
    if node.id in pending:
        rows = pending[node.id][1] + rows
    pending[node.id] = (node, rows)
