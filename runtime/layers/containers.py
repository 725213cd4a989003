"""Containers: Sequential, Residual (ParNet1/ParNet2/ParSum) and Concat (SkipNet1/SkipNet2/SkipCat)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from daic.runtime.context import AbstractContext
from daic.runtime.domains import Value, add_values, cat_values
from daic.runtime.layers.base import AbstractMixin, Walk, finish

Branch = nn.Module | Iterable[nn.Module] | None


class _Container(AbstractMixin):
    """A layer made of layers: its abstract value is built by them and by the domain's sums and
    concatenations (`add_values`, `cat_values`), each of which accounts for its own rounding. A container
    says how it walks its layers (`walk`); its ``abstract`` is that walk, finished."""

    def abstract(self, x: Value, ctx: AbstractContext) -> Value:
        return finish(self.walk(x, ctx))

    def rounding(self, x: object) -> None:
        """No arithmetic of its own: never one step of a domain, so never asked."""
        return None


class Sequential(_Container, nn.Sequential):
    """Layers in order; ``abstract`` threads the value (and the context) through each of them."""

    def walk(self, x: Value, ctx: AbstractContext) -> Walk:
        """Each layer in turn; on an abstract value, a layer that absorbs the fixed per-channel map of the
        layer after it (a convolution before a BatchNorm in a training step) runs as one layer with it,
        their fold (`AbstractMixin.folded`), visited in the pair's place: the same function, where the
        map would cost three elementwise passes each way over every element and back-substituted row
        (on MNIST CNN7, 5-10% of a fused CROWN-IBP step, 11-14% of a Box step)."""
        layers, index = list(self), 0
        while index < len(layers):
            fold = self._fold_at(layers, index, x)
            layer = layers[index] if fold is None else fold
            index += 1 if fold is None else 2
            x = yield from layer.walk(x, ctx)
        return x

    @staticmethod
    def _fold_at(layers: list, index: int, x: Value) -> AbstractMixin | None:
        """The fold of ``layers[index]`` and the layer after it for the value ``x``, or None."""
        if isinstance(x, Tensor) or index + 1 == len(layers):
            return None
        affine = layers[index + 1].channel_affine()
        return None if affine is None else layers[index].folded(*affine, x.shape)


def as_branch(branch: Branch) -> Sequential:
    """A branch as a `Sequential`; ``None`` or an empty list is the identity."""
    if branch is None:
        return Sequential()
    if isinstance(branch, Sequential):
        return branch
    if isinstance(branch, nn.Module):
        return Sequential(branch)
    return Sequential(*branch)


class Residual(_Container, nn.Module):
    """``branch1(x) + branch2(x)``; an empty branch is the identity.

    Abstractly the two branches' values are summed with their correlated terms matched by identity
    (see `domains.term_ids`), so one branch may add terms (a correlation layer) while the other removes some
    (a decorrelation layer).
    """

    def __init__(self, branch1: Branch = None, branch2: Branch = None) -> None:
        super().__init__()
        self.branch1 = as_branch(branch1)
        self.branch2 = as_branch(branch2)

    def forward(self, x: Tensor) -> Tensor:
        return self.branch1(x) + self.branch2(x)

    def walk(self, x: Value, ctx: AbstractContext) -> Walk:
        first = yield from self.branch1.walk(x, ctx)
        second = yield from self.branch2.walk(x, ctx)
        return add_values(first, second)


class Concat(_Container, nn.Module):
    """``cat([branch1(x), branch2(x)], dim)``; ``dim=1`` is the channel dimension in NCHW."""

    def __init__(self, branch1: Branch = None, branch2: Branch = None, dim: int = 1) -> None:
        super().__init__()
        if dim == 0:
            raise ValueError("Concat: dim 0 is the batch; concatenate along a feature dimension (>= 1)")
        self.branch1 = as_branch(branch1)
        self.branch2 = as_branch(branch2)
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.branch1(x), self.branch2(x)], self.dim)

    def walk(self, x: Value, ctx: AbstractContext) -> Walk:
        first = yield from self.branch1.walk(x, ctx)
        second = yield from self.branch2.walk(x, ctx)
        return cat_values([first, second], self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
