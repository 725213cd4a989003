"""What every layer has: a concrete ``forward`` (plain PyTorch) and ``abstract(value, ctx)``; and an abstract
pass as a walk (`walk`, `trace`), for callers that read what reached each layer on the way."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from daic.runtime.context import AbstractContext
from daic.runtime.domains import Box, HybridZonotope, Value
from daic.runtime.domains.rounding import Rounding

if TYPE_CHECKING:
    from daic.runtime.domains.coeffs import Coeffs
    from daic.runtime.domains.symbolic import Backward, Symbolic


class AbstractMixin:
    """Runs ``abstract(value, ctx)`` in the value's domain.

    A concrete tensor runs the module itself (so hooks and the concrete forward stay the single source of
    truth); an abstract value runs the layer through its domain (``value.through(layer, ctx)``), which calls
    the layer's method for that domain: ``abstract_box``, ``abstract_hz``, and for the linear relaxation
    ``back_symbolic``, which moves a specification's coefficients from the layer's output to its input.
    Mixed into ``nn.Module`` subclasses (``class Conv2D(AbstractMixin, nn.Conv2d)``), so a network is an
    ordinary PyTorch model.
    """

    relaxes_input = False
    """Whether the layer's linear relaxation depends on its input's bounds (ReLU, MaxPool2D): full CROWN
    bounds that input first."""

    splittable = False
    """Whether branch and bound may split the layer's input at zero, each side making its relaxation exact
    (ReLU; such a layer also gives `initial_slopes` and its split constraints' multipliers a meaning)."""

    def abstract(self, x: Value, ctx: AbstractContext) -> Value:
        if isinstance(x, Tensor):
            return self(x)  # type: ignore[operator]
        return x.through(self, ctx)

    def walk(self, x: Value, ctx: AbstractContext) -> Walk:
        """``abstract`` as a walk: yields ``(layer, its input)`` for every layer that is not made of layers,
        in the order they run, and returns the output. A container walks its layers; `trace` collects."""
        yield self, x
        return self.abstract(x, ctx)

    def step_loss(self, x: Value, ctx: AbstractContext) -> Tensor | None:
        """A loss the layer adds to a training step for its input ``x`` (DeepLoss); None for most layers.
        The trainer reads it from the pass's `trace`, so a layer hands nothing on by a side channel."""
        return None

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Value:
        raise NotImplementedError(f"{type(self).__name__} has no Box transformer")

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> Value:
        raise NotImplementedError(f"{type(self).__name__} has no hybrid zonotope transformer")

    def rounding(self, x: Any) -> Rounding | None:
        """The layer's arithmetic on its input `x`, for bounding its rounding errors (`domains.rounding`);
        None where the layer only moves values. Every layer declares its own: no default can be right for
        both an elementwise layer and one that sums products."""
        raise NotImplementedError(f"{type(self).__name__} does not declare its rounding")

    def channel_affine(self) -> tuple[Tensor, Tensor] | None:
        """The per-channel ``(scale, shift)`` of ``x * scale + shift`` this layer computes in the present
        pass, where that map is the same for every value the pass gives it (a BatchNorm whose statistics
        a training step fixed), so that the layer before it may absorb it (`folded`); None for most."""
        return None

    def folded(self, scale: Tensor, shift: Tensor, given: torch.Size) -> AbstractMixin | None:
        """This layer followed by ``y * scale + shift`` per output channel, as one layer of its own kind,
        for inputs of shape ``given``; None where it cannot absorb such a map (only affine layers can) or
        where absorbing it would cost more than applying it."""
        return None

    back_symbolic: Any = None
    """``back_symbolic(coeffs, node, how) -> (coeffs on the input, constant (B, S) or None)``: the rows
    ``coeffs`` over the layer's output ``node`` as rows over its input, for lower bounds (a layer without
    it has no linear-relaxation transformer)."""


class AbstractLayer(AbstractMixin, nn.Module):
    """An abstract layer (paper Section 3): the identity on concrete values, it only changes abstract ones.

    ``only_train=True``: the layer acts only when ``ctx.training`` is set and is skipped at test time.
    Subclasses override ``abstract_hz`` (and ``abstract_box`` where a box can be changed: by default a box,
    which has no correlated terms, passes through unchanged). For the linear relaxation an abstract layer is
    the identity (it changes how a domain represents a set, never the network's function).
    """

    def __init__(self, only_train: bool = False) -> None:
        super().__init__()
        self.only_train = bool(only_train)

    def forward(self, x: Tensor) -> Tensor:
        return x

    def rounding(self, x: Any) -> Rounding | None:
        """Correlating moves values into new terms unchanged: no arithmetic (decorrelating sums them)."""
        return None

    def abstract(self, x: Value, ctx: AbstractContext) -> Value:
        if self.only_train and not ctx.training:
            return x
        if isinstance(x, Tensor):
            return x
        return super().abstract(x, ctx)

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Value:
        return x

    def back_symbolic(self, coeffs: Coeffs, node: Symbolic, how: Backward) -> tuple[Coeffs, None]:
        return coeffs, None

    def extra_repr(self) -> str:
        return f"only_train={self.only_train}"


Visit = tuple[AbstractMixin, Value]
Walk = Generator[Visit, None, Value]


def finish(walk: Walk) -> Value:
    """The output a walk returns, its visits passed over."""
    while True:
        try:
            next(walk)
        except StopIteration as stop:
            return stop.value


@dataclass(frozen=True)
class Pass:
    """An abstract pass with what reached each layer: ``output`` and ``visits``, the ``(layer, input)``
    pairs in the order the layers ran (none for a concrete pass)."""

    output: Value
    visits: tuple[Visit, ...] = ()

    def step_losses(self, ctx: AbstractContext) -> list[Tensor]:
        """The losses the pass's layers add to the training step (`AbstractMixin.step_loss`)."""
        found = (layer.step_loss(x, ctx) for layer, x in self.visits)
        return [loss for loss in found if loss is not None]


def trace(model: AbstractMixin, x: Value, ctx: AbstractContext) -> Pass:
    """``model.abstract(x, ctx)`` with every layer's input kept."""
    walk, visits = model.walk(x, ctx), []
    while True:
        try:
            visits.append(next(walk))
        except StopIteration as stop:
            return Pass(stop.value, tuple(visits))


def placement(module: nn.Module) -> tuple[torch.device, torch.dtype]:
    """Where a network computes: the device and dtype of its first parameter, else of its first floating
    buffer (a network of a Normalize and ReLUs has no parameter), else the CPU in float32."""
    for tensor in (*module.parameters(), *(b for b in module.buffers() if b.is_floating_point())):
        return tensor.device, tensor.dtype
    return torch.device("cpu"), torch.float32
