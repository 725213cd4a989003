"""Decorrelation layers (paper Section 3.2): fold correlated terms into the uncorrelated beta."""

from __future__ import annotations

from daic.runtime.context import AbstractContext
from daic.runtime.domains import HybridZonotope
from daic.runtime.domains.rounding import Rounding
from daic.runtime.layers.base import AbstractLayer


def _folding(x) -> Rounding:
    """Folding terms into beta sums up to all of them per neuron."""
    return Rounding(getattr(x, "m", 0))


class DecorrelateAll(AbstractLayer):
    """Every correlated term is folded into beta (``h'_B = h_B + sum_j |h_E,j|``, ``m' = 0``).

    The listings call it ``Concretize``. The interval concretization is unchanged.
    """

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        return x.concretize()

    def rounding(self, x) -> Rounding:
        return _folding(x)


Concretize = DecorrelateAll


class DecorrelateMin(AbstractLayer):
    """Removes the terms with the smallest sum of |coefficients| over all neurons, keeping the order.

    ``num_to_keep=True``: ``k`` terms remain (the paper's DecorrelateMin_k); ``False``: ``k`` terms are
    removed. The choice is made per sample (each sample is its own zonotope, as in the reference
    implementation); term ids travel with the kept slots, so later residual sums stay aligned.
    """

    def __init__(self, k: int, num_to_keep: bool = True, only_train: bool = False) -> None:
        super().__init__(only_train)
        if k < 0:
            raise ValueError(f"DecorrelateMin: k must be >= 0, got {k}")
        self.k = int(k)
        self.num_to_keep = bool(num_to_keep)

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        keep = self.k if self.num_to_keep else x.m - self.k
        return x.decorrelate_min(keep)

    def rounding(self, x) -> Rounding:
        return _folding(x)

    def extra_repr(self) -> str:
        return f"k={self.k}, num_to_keep={self.num_to_keep}, only_train={self.only_train}"
