"""Outward rounding in back-substitution: what the roundings of the rows and of the constants can cost.

Moving rows ``A`` back through a layer computes new coefficients with rounding errors, and those errors
are moved further back in turn. The ledger keeps, for every node rows are owed to, a bound of the l1 norm
of the rows' accumulated error (grown by each layer's largest gain, see `rounding.Rounding`), and the
slack: a bound of what all errors can cost in the total, which is lowered by it at the end.

The l1 norms of the rows themselves are what most of that costs. Through an elementwise layer of gain at
most 1 (a ReLU's slopes lie in [0, 1]) the moved rows are no larger than the rows, so the norm known for
the rows is passed on instead of computed again: a pass over the rows saved per ReLU, at the price of a
slightly larger bound where slopes are below 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from daic.runtime.domains.coeffs import Coeffs, Dense
from daic.runtime.domains.rounding import down as round_down
from daic.runtime.domains.rounding import gamma, underflow, unit
from daic.runtime.domains.rounding import up as round_up

if TYPE_CHECKING:
    from daic.runtime.domains.symbolic import Backward, Symbolic


def rows_dtype(rows: Coeffs) -> torch.dtype:
    return rows.A.dtype if isinstance(rows, Dense) else rows.P.dtype


class RoundingLedger:
    """The error and norm bounds owed to each node (by node id) and the total's slack."""

    def __init__(self) -> None:
        self.errors: dict[int, Tensor | float] = {}
        self.norms: dict[int, Tensor] = {}
        self.slack: Tensor | float = 0.0

    def owe(self, node: Symbolic, error: Tensor | float, norm: Tensor | None = None) -> None:
        """`node` is owed rows with an error of l1 norm at most `error` (and of norm at most `norm`)."""
        self.errors[node.id] = self.errors.get(node.id, 0.0) + error
        if norm is not None:
            self.norms[node.id] = norm

    def merged(self, node: Symbolic, total: Coeffs) -> None:
        """The rows owed to `node` were just added up into `total`: one more rounding each."""
        norm = total.l1()
        self.errors[node.id] = self.errors.get(node.id, 0.0) + 2 * unit(rows_dtype(total)) * norm
        self.norms[node.id] = norm

    def take(self, node: Symbolic, rows: Coeffs) -> tuple[Tensor | float, Tensor]:
        """The error bound of the rows owed to `node`, and their norm (known, else computed)."""
        norm = self.norms.pop(node.id, None)
        return self.errors.pop(node.id, 0.0), rows.l1() if norm is None else norm

    def at_input(
        self, rows: Coeffs, center: Tensor, radius: Tensor, error: Tensor | float, norm: Tensor
    ) -> None:
        """The rows were bounded over the input box: each coefficient's error costs at most the box's
        magnitude, and the sum of ``n`` products rounds within ``gamma(n)``."""
        size = rows.per_image((center.abs() + radius).flatten(1).amax(1))
        n = rows.features
        self.slack = self.slack + (error + gamma(n, size.dtype) * norm) * size + underflow(n, size.dtype)

    def at_companions(self, rows: Coeffs, node: Symbolic, error: Tensor | float) -> None:
        """The rows were bounded by `node`'s companion domains (which round their own sums outward): the
        error costs at most the node's magnitude."""
        lower, upper = node.bounds()
        self.slack = self.slack + error * rows.per_image(
            torch.maximum(lower.abs(), upper.abs()).flatten(1).amax(1)
        )

    def at_layer(
        self,
        node: Symbolic,
        how: Backward,
        rows: Coeffs,
        moved: Coeffs | None,
        has_constant: bool,
        error: Tensor | float,
        norm: Tensor,
    ) -> None:
        """The rows (of error `error`, norm `norm`) went back through `node`'s layer, giving `moved` on its
        input and, with `has_constant`, a constant (the rows times the layer's constants): both computed
        with rounding."""
        rounding = node.layer.rounding(node.parents[0])
        dtype = norm.dtype
        if rounding is None:  # the rows moved unchanged
            if moved is not None:
                self.owe(node.parents[0], error, norm)
            return
        if moved is not None:
            gain = rounding.largest_gain()
            grown = (error + gamma(rounding.back_terms, dtype) * norm) * max(1.0, gain)
            split = how.split_term(node) is not None
            if split:  # the split constraints' term: one addition per coefficient
                grown = grown + 2 * unit(dtype) * moved.l1()
            no_larger = rounding.terms == 0 and rounding.back_terms == 0 and gain <= 1 and not split
            self.owe(node.parents[0], grown, norm if no_larger else None)
        if has_constant:
            n = rows.features
            largest = rounding.largest_back_constant()
            self.slack = self.slack + (error + gamma(n, dtype) * norm) * largest + underflow(n, dtype)

    def added(self, total: Tensor) -> None:
        """A part was added into the total: one rounding of it."""
        self.slack = self.slack + 2 * unit(total.dtype) * total.abs()

    def lowered(self, total: Tensor) -> Tensor:
        """The total lowered by the slack: a lower bound in exact arithmetic."""
        slack = self.slack if torch.is_tensor(self.slack) else torch.full_like(total, self.slack)
        return round_down(total - round_up(slack))
