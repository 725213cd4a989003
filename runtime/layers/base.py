"""What every layer has: a concrete ``forward`` (plain PyTorch) and ``abstract(value, ctx)``."""

from __future__ import annotations

from torch import Tensor, nn

from ..context import AbstractContext
from ..domains import Box, HybridZonotope, Value


class AbstractMixin:
    """Dispatches ``abstract(value, ctx)`` on the value's domain.

    A concrete tensor runs the module itself (so hooks and the concrete forward stay the single source of
    truth); boxes and hybrid zonotopes go to ``abstract_box`` / ``abstract_hz``. Mixed into ``nn.Module``
    subclasses (``class Conv2D(AbstractMixin, nn.Conv2d)``), so a network is an ordinary PyTorch model.
    """

    def abstract(self, x: Value, ctx: AbstractContext) -> Value:
        if isinstance(x, HybridZonotope):
            return self.abstract_hz(x, ctx)
        if isinstance(x, Box):
            return self.abstract_box(x, ctx)
        if isinstance(x, Tensor):
            return self(x)  # type: ignore[operator]
        raise TypeError(f"{type(self).__name__}.abstract: not a domain value: {type(x).__name__}")

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Value:
        raise NotImplementedError(f"{type(self).__name__} has no Box transformer")

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> Value:
        raise NotImplementedError(f"{type(self).__name__} has no hybrid zonotope transformer")


class AbstractLayer(AbstractMixin, nn.Module):
    """An abstract layer (paper Section 3): the identity on concrete values, it only changes abstract ones.

    ``only_train=True``: the layer acts only when ``ctx.training`` is set and is skipped at test time.
    Subclasses override ``abstract_hz`` (and ``abstract_box`` where a box can be changed: by default a box,
    which has no correlated terms, passes through unchanged).
    """

    def __init__(self, only_train: bool = True) -> None:
        super().__init__()
        self.only_train = bool(only_train)

    def forward(self, x: Tensor) -> Tensor:
        return x

    def abstract(self, x: Value, ctx: AbstractContext) -> Value:
        if self.only_train and not ctx.training:
            return x
        if isinstance(x, Tensor):
            return x
        return super().abstract(x, ctx)

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Value:
        return x

    def extra_repr(self) -> str:
        return f"only_train={self.only_train}"
