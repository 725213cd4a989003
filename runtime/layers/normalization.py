"""Batch normalisation: per channel (images) or per feature (vectors), ``(x - mean) / sqrt(var + eps) *
weight + bias``.

With its statistics fixed, the layer is an affine map with one scale and one shift per channel, which
every domain bounds exactly (a box's radius scales by ``|scale|``, a zonotope's terms by ``scale``, a
linear relaxation's rows by ``scale``). Which statistics:

- at test time (`eval()`), verification and export: the running (population) statistics;
- in a training step, the statistics of one batch of points, fixed for the whole step (`fixed_statistics`),
  so that every pass of the step, concrete (attacks) and abstract (bounds), computes the same function:
  from the clean batch, as CTBench does, or from the centres of a goal's boxes (the scheme's `bn_stats`);
- a training-mode pass with nothing fixed (a network used outside the trainer) uses its own batch's
  statistics, as torch's BatchNorm does; an abstract one uses the statistics of its element's centres.

`reestimate_statistics` is Precise-BN: the population statistics measured again over the training set
(an equal-weight average over its batches), rather than the momentum average of the steps, whose weights
kept changing while they were measured.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from daic.runtime.context import AbstractContext
from daic.runtime.domains import Box, HybridZonotope
from daic.runtime.domains.rounding import Rounding
from daic.runtime.layers.affine import AffineFn, affine_box, affine_hz, fold_channel_affine
from daic.runtime.layers.base import AbstractMixin


class _Moments(torch.autograd.Function):
    """Per channel (dimension 1), the mean and the biased variance of ``x`` over every other dimension.

    torch's `var` reduces in one Welford pass, which on the CPU runs 3-4x slower than two plain passes
    (the mean, then the centred squares: 6 against 23 ms on a 50 x 64 x 28 x 28 channels-last map), and its
    backward is composed of several elementwise passes. Here the backward is the one elementwise pass
    ``dx = (g_mean + 2 g_var (x - mean)) / n``; a step's clean pass takes the statistics of every
    BatchNorm of an MNIST CNN7 through it (about 4% of an IBP training step)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        dims = [0, *range(2, x.dim())]
        wide = _at_least_single(x)  # a mixed-precision pass's maps: statistics in float32, as torch's
        mean = wide.mean(dims, keepdim=True)
        centred = wide - mean
        var = (centred * centred).mean(dims)
        ctx.save_for_backward(x, mean)
        return mean.view(-1), var

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_mean: Tensor | None, grad_var: Tensor | None):  # type: ignore[override]
        x, mean = ctx.saved_tensors
        n = x.numel() // x.shape[1]
        per_channel = (1, -1, *[1] * (x.dim() - 2))
        g_mean = (grad_mean if grad_mean is not None else mean.new_zeros(mean.numel())).view(per_channel) / n
        if grad_var is None:
            return g_mean.expand_as(x).to(x.dtype, copy=True)
        grad = (_at_least_single(x) - mean).mul_((2 / n) * grad_var.view(per_channel)).add_(g_mean)
        return grad.to(x.dtype)


def _at_least_single(x: Tensor) -> Tensor:
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


class BatchNorm(AbstractMixin, nn.Module):
    """Batch normalisation over dimension 1 (channels of ``(B, C, H, W)``, features of ``(B, F)``)."""

    def __init__(self, features: int, eps: float = 1e-5, momentum: float = 0.1) -> None:
        super().__init__()
        self.features, self.eps, self.momentum = int(features), float(eps), float(momentum)
        # CPU: a module's parameters and buffers are made on the host; moving the module moves them
        self.weight = nn.Parameter(torch.ones(self.features))
        self.bias = nn.Parameter(torch.zeros(self.features))
        self.register_buffer("running_mean", torch.zeros(self.features))
        self.register_buffer("running_var", torch.ones(self.features))
        self.register_buffer("num_batches_tracked", torch.zeros((), dtype=torch.long))
        # A training step's statistics, fixed by `measure` within `fixed_statistics` (a step's, never
        # saved); `measuring` is set only for `measure`'s own pass, whose statistics become the fixed ones.
        self.fixed: tuple[Tensor, Tensor] | None = None
        self.measuring: bool | None = None  # during that pass: whether it also updates the running ones
        self.cumulative = False  # Precise-BN: running statistics as an equal-weight average of batches

    # --- statistics -------------------------------------------------------------------------------------

    def batch_statistics(self, x: Tensor, update: bool) -> tuple[Tensor, Tensor]:
        """The mean and (biased) variance of ``x`` per channel; with ``update``, folded into the running
        statistics as torch's BatchNorm does (the unbiased variance, by momentum)."""
        mean, var = _Moments.apply(x)
        if update:
            self._update_running(mean.detach(), var.detach(), x.numel() // self.features)
        return mean, var

    @torch.no_grad()
    def _update_running(self, mean: Tensor, var: Tensor, n: int) -> None:
        self.num_batches_tracked += 1
        # Precise-BN's 1/n as a tensor on the device: `int(num_batches_tracked)` would wait for the GPU.
        dtype = self.running_mean.dtype
        rate = (1.0 / self.num_batches_tracked).to(dtype) if self.cumulative else self.momentum
        unbiased = var * (n / max(1, n - 1))
        self.running_mean.lerp_(mean.to(dtype), rate)
        self.running_var.lerp_(unbiased.to(self.running_var.dtype), rate)

    def statistics(self, x: Tensor | None) -> tuple[Tensor, Tensor]:
        """The statistics this pass uses (see the module docstring); ``x`` is the batch they come from when
        none are fixed: the input itself (concrete) or the element's centres (abstract)."""
        if not self.training:
            return self.running_mean, self.running_var
        if self.fixed is not None:
            return self.fixed
        if x is None:
            raise RuntimeError("BatchNorm in training mode needs a batch to take its statistics from")
        return self.batch_statistics(x, update=False)

    def scale_shift(self, mean: Tensor, var: Tensor, like: Tensor) -> tuple[Tensor, Tensor]:
        """The affine map of these statistics, per channel, shaped to broadcast over ``like``."""
        shape = (1, -1, *([1] * (like.dim() - 2)))
        dtype = like.dtype
        scale = self.weight.to(dtype) / torch.sqrt(var.to(dtype) + self.eps)
        shift = self.bias.to(dtype) - mean.to(dtype) * scale
        return scale.view(shape), shift.view(shape)

    # --- concrete and abstract passes -------------------------------------------------------------------

    def forward(self, x: Tensor) -> Tensor:
        if self.training and self.measuring is not None:
            self.fixed = self.batch_statistics(x, update=self.measuring)
        if self.training and self.fixed is None:
            mean, var = self.batch_statistics(x, update=True)
        else:
            mean, var = self.statistics(x)
        scale, shift = self.scale_shift(mean, var, x)
        return x * scale + shift

    def _maps(self, centre: Tensor) -> tuple[AffineFn, Callable[[Tensor], Tensor]]:
        """The affine map of the statistics for an element with this centre, and its map of radii."""
        scale, shift = self.scale_shift(*self.statistics(centre), centre)
        magnitude = scale.abs()
        return (lambda v, with_bias: v * scale + shift if with_bias else v * scale), (lambda r: r * magnitude)

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Box:
        return affine_box(x, *self._maps(x.center))

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        return affine_hz(x, *self._maps(x.head))

    def channel_affine(self) -> tuple[Tensor, Tensor] | None:
        """In a training step whose statistics are fixed, the one map every pass of the step computes:
        the convolution or linear layer before may absorb it (`Sequential` folds them on abstract values,
        where the map costs three elementwise passes each way per element, and per row back-substituted).
        Not at test time: a certificate's rounding is bounded layer by layer as the network computes."""
        if not (self.training and self.fixed is not None):
            return None
        scale, shift = self.scale_shift(*self.fixed, self.weight.new_empty(1, self.features))
        return scale.view(-1), shift.view(-1)

    def rounding(self, x) -> Rounding:
        """``x * scale + shift`` with the scale and shift computed from the statistics: two roundings per
        output, the scale within ``gamma(3)`` (an addition, a square root, a division) and the shift within
        ``gamma(2)`` of ``|bias| + |mean * scale|``; seven roundings' room covers them all."""
        mean, var = (v.detach().double() for v in self.statistics(None))
        per_channel = (-1, *[1] * (len(x.shape) - 2))
        scale, _shift = self.scale_shift(mean, var, mean.new_empty(1, self.features))
        gain = scale.abs().view(per_channel)
        constant = self.bias.detach().double().abs().view(per_channel) + mean.abs().view(per_channel) * gain
        return Rounding(6, 4, gain, constant)

    def back_symbolic(self, coeffs, node, how):
        """``A (x * scale + shift) = (A scale) x + A shift``."""
        like = node.analysis.center.new_empty(node.shape)
        scale, shift = self.scale_shift(*self.statistics(None), like)
        return coeffs.mul(scale), coeffs.dot(shift)

    def extra_repr(self) -> str:
        return f"{self.features}, eps={self.eps:g}, momentum={self.momentum:g}"


def batch_norms(model: nn.Module) -> list[BatchNorm]:
    return [m for m in model.modules() if isinstance(m, BatchNorm)]


@contextmanager
def fixed_statistics(model: nn.Module) -> Iterator[None]:
    """Within it, `measure(model, x)` fixes every BatchNorm's training statistics to those of the points
    ``x``, for every pass until the next `measure`; on leaving, nothing is fixed."""
    layers = batch_norms(model)
    try:
        yield
    finally:
        for layer in layers:
            layer.fixed = None


def measure(
    model: nn.Module, x: Tensor, update: bool, forward: Callable[[Tensor], Tensor] | None = None
) -> None:
    """Fixes every BatchNorm's statistics to those of the batch ``x`` (one concrete pass, `forward` or the
    model's own, whose gradient flows into the statistics as it does in torch's BatchNorm); with
    ``update``, the running statistics take them in too."""
    layers = batch_norms(model)
    for layer in layers:
        layer.fixed, layer.measuring = None, update
    try:
        (forward or model)(x)
    finally:
        for layer in layers:
            layer.measuring = None


@torch.no_grad()
def reestimate_statistics(model: nn.Module, x: Tensor, batch: int) -> None:
    """Precise-BN: every BatchNorm's running statistics measured again as the equal-weight average of the
    statistics of the batches of ``x`` (in order), the network's other layers fixed."""
    layers = batch_norms(model)
    if not layers:
        return
    was_training = model.training
    model.train()
    for layer in layers:
        layer.running_mean.zero_()
        layer.running_var.zero_()
        layer.num_batches_tracked.zero_()
        layer.cumulative, layer.fixed = True, None
    try:
        device = layers[0].running_mean.device
        for start in range(0, len(x), batch):
            model(x[start : start + batch].to(device))
    finally:
        for layer in layers:
            layer.cumulative = False
        model.train(was_training)


@torch.no_grad()
def fold_batch_norms(model: nn.Module) -> nn.Module:
    """A copy of the (test-time) network with every BatchNorm that directly follows a Conv2D or Linear in
    a sequence folded into that layer's weights and bias: the network verifiers and ONNX tools expect,
    computing the same function (up to rounding). A BatchNorm with no such layer before it stays."""
    from daic.runtime.layers.affine import Conv2D, Linear
    from daic.runtime.layers.containers import Sequential

    folded = copy.deepcopy(model).eval()
    for sequence in [m for m in folded.modules() if isinstance(m, Sequential)]:
        layers = list(sequence)
        kept: list[nn.Module] = []
        for layer in layers:
            before = kept[-1] if kept else None
            if isinstance(layer, BatchNorm) and isinstance(before, (Conv2D, Linear)):
                _fold_in_place(before, layer)
                continue
            kept.append(layer)
        if len(kept) != len(layers):
            for name in list(sequence._modules):
                del sequence._modules[name]
            for i, layer in enumerate(kept):
                sequence.add_module(str(i), layer)
    return folded


def _fold_in_place(affine: nn.Module, norm: BatchNorm) -> None:
    like = affine.weight.new_empty(1, norm.features)
    scale, shift = (v.view(-1) for v in norm.scale_shift(norm.running_mean, norm.running_var, like))
    weight, bias = fold_channel_affine(affine.weight, affine.bias, scale, shift)
    affine.weight.copy_(weight)
    affine.bias = nn.Parameter(bias)
