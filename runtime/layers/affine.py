"""Affine layers: Normalize, Conv2D, Linear, Flatten.

An affine map ``y = W x + b`` is exact on both domains and costs two passes for a box (the center with the
bias; the radius through ``|W|`` without it) and ``m + 2`` for a hybrid zonotope (head with the bias; beta
through ``|W|``; the ``m`` terms folded into the batch, through ``W`` without the bias).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable
from torch.nn.utils import parametrize

from daic.runtime import native
from daic.runtime.context import AbstractContext
from daic.runtime.domains import Box, HybridZonotope
from daic.runtime.domains.local_terms import LocalTerms
from daic.runtime.domains.rounding import Rounding
from daic.runtime.domains.zonotope import MAP_CHUNK_BYTES, map_terms
from daic.runtime.layers.base import AbstractMixin

if TYPE_CHECKING:
    from daic.runtime.domains.coeffs import Coeffs
    from daic.runtime.domains.symbolic import Backward, Symbolic

AffineFn = Callable[[Tensor, bool], Tensor]
"""``fn(x, with_bias)``: the layer's affine map on a batch, with or without its constant part."""


class _BoxLinear(torch.autograd.Function):
    """``(center, radius) -> (center W^T + b, radius |W|^T)`` with one weight gradient.

    Autograd would take |W|'s gradient through ``sign(W) * g`` and then add it to the center's weight
    gradient: two more passes over the weight, which for a wide layer (ResNet-Tiny's 32768 x 500)
    cost as much as a matrix product. Here the radius' part is added in place: ``G += sign(W) * G_r``.

    On the CPU a weight larger than the cache is worked through in blocks of input columns
    (`weight_blocks`): |W|, sign(W) and each block's two weight-gradient products then meet in cache,
    and no weight-sized temporary is made whole (11% of the layer's step at ResNet-Tiny's 32768 x 500).
    """

    @staticmethod
    def forward(ctx, center: Tensor, radius: Tensor, weight: Tensor, bias: Tensor | None):  # type: ignore[override]
        ctx.has_bias = bias is not None
        ctx.blocks = weight_blocks(weight)
        if len(ctx.blocks) == 1:
            abs_weight = weight.abs()
            ctx.save_for_backward(center, radius, weight, abs_weight)
            return F.linear(center, weight, bias), F.linear(radius, abs_weight)
        ctx.save_for_backward(center, radius, weight)
        out_radius = radius.new_zeros((radius.shape[0], weight.shape[0]))
        for cols in ctx.blocks:
            out_radius.addmm_(radius[:, cols], weight[:, cols].abs().t())
        return F.linear(center, weight, bias), out_radius

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_center: Tensor | None, grad_radius: Tensor | None):  # type: ignore[override]
        center, radius, weight, *saved_abs = ctx.saved_tensors
        need_c, need_r, need_w, need_b = ctx.needs_input_grad
        gc = grad_center if grad_center is not None else center.new_zeros((center.shape[0], weight.shape[0]))
        gr = grad_radius if grad_radius is not None else radius.new_zeros((radius.shape[0], weight.shape[0]))
        grad_b = gc.sum(0) if need_b and ctx.has_bias else None
        if saved_abs:
            grad_w = None
            if need_w:
                grad_w = gc.t() @ center
                _add_signed_product(grad_w, weight, gr.t() @ radius)
            grad_c = _transposed_product(weight, gc) if need_c else None
            grad_r = _transposed_product(saved_abs[0], gr) if need_r else None
            return grad_c, grad_r, grad_w, grad_b
        grad_c = torch.empty_like(center) if need_c else None
        grad_r = torch.empty_like(radius) if need_r else None
        grad_w = torch.empty_like(weight) if need_w else None
        for cols in ctx.blocks:
            w = weight[:, cols]
            if grad_c is not None:
                grad_c[:, cols] = gc @ w
            if grad_r is not None:
                grad_r[:, cols] = gr @ w.abs()
            if grad_w is not None:
                block = gc.t() @ center[:, cols]
                _add_signed_product(block, w, gr.t() @ radius[:, cols])
                grad_w[:, cols] = block
        return grad_c, grad_r, grad_w, grad_b


def _add_signed_product(grad: Tensor, weight: Tensor, product: Tensor) -> None:
    """``grad += sign(weight) * product``: the radius path's weight gradient, through |W|."""
    if not native.add_signed_product_(grad, weight, product):
        grad.addcmul_(torch.sign(weight), product)


def _transposed_product(weight: Tensor, grad: Tensor) -> Tensor:
    """``grad @ weight``, (B, out) x (out, in), computed as ``(weight^T grad^T)^T``: the same products, but
    MKL runs this orientation faster on the CPU (4.5 vs 7 ms for ConvBig's 512 x 4096 weight at batch 50,
    measured with the cache flushed as a step leaves it). The result is a transposed view; its consumers
    (the flattening copy, the ReLU's kernel) read any layout. Elsewhere the plain product."""
    if weight.device.type != "cpu":
        return grad @ weight
    return torch.mm(weight.t(), grad.t()).t()


BLOCK_ELEMENTS = 2**19
"""Weight elements per block of `weight_blocks` (2 MiB of float32; 1 and 4 MiB measured slower): with
its |W|, sign and gradient products, a block's working set stays within a typical L3 cache."""
BLOCKED_ABOVE = 2**22
"""Weights up to this many elements (16 MiB of float32) stay whole: they fit in cache as they are, and
blocking one (ConvBig's 4096 x 512) measured 10% slower."""


def weight_blocks(weight: Tensor) -> list[slice]:
    """Slices of input columns that split a CPU weight into blocks of about `BLOCK_ELEMENTS`; one slice
    on other devices, where a kernel launch per block would cost more than the cache saves."""
    columns = weight.shape[1]
    if weight.device.type != "cpu" or weight.numel() <= BLOCKED_ABOVE:
        return [slice(0, columns)]
    width = max(1, BLOCK_ELEMENTS // max(1, weight.shape[0]))
    return [slice(start, min(start + width, columns)) for start in range(0, columns, width)]


def affine_box(x: Box, fn: AffineFn, abs_fn: Callable[[Tensor], Tensor]) -> Box:
    return Box(fn(x.center, True), abs_fn(x.radius))


def affine_hz(x: HybridZonotope, fn: AffineFn, abs_fn: Callable[[Tensor], Tensor]) -> HybridZonotope:
    head = fn(x.head, True)
    beta = abs_fn(x.beta)
    errors = x.map_errors(lambda e: fn(e, False), head.shape)
    return x.replace(head, beta, errors)


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(a) for a in v)
    if len(v) == 1:
        return (v[0], v[0])
    if len(v) != 2:
        raise ValueError(f"expected an int or two ints, got {v}")
    return v  # type: ignore[return-value]


def fold_channel_affine(
    weight: Tensor, bias: Tensor | None, scale: Tensor, shift: Tensor
) -> tuple[Tensor, Tensor]:
    """The weight and bias of an affine layer followed by ``y * scale + shift`` per output channel:
    ``(W x + b) * s + t = (s W) x + (s b + t)``."""
    scale, shift = scale.to(weight.dtype), shift.to(weight.dtype)
    folded = weight * scale.view(-1, *[1] * (weight.dim() - 1))
    return folded, shift if bias is None else bias * scale + shift


class _AbsorbsChannelAffine:
    """Conv2D and Linear absorb a per-output-channel affine map that follows them (`AbstractMixin.folded`)."""

    weight: Tensor
    bias: Tensor | None

    def _positions(self, given: torch.Size) -> int:
        """Output positions per channel for inputs of shape ``given``."""
        raise NotImplementedError

    def folded(self, scale: Tensor, shift: Tensor, given: torch.Size) -> AbstractMixin | None:
        """Where the map's passes over the outputs (three each way per element or row) cost more than
        the fold's over the weight (a product each way, and the scale's gradient): a convolution's
        outputs outnumber its weights, a wide linear layer's weights its outputs (MNIST CNN7's 25088 x
        512 folded took 86 ms a step, where its BatchNorm's passes take 5). Not a layer whose weight or
        bias torch's parametrizations compute: they are read through properties no copy can replace."""
        if scale.numel() != self.weight.shape[0] or parametrize.is_parametrized(self):  # type: ignore[arg-type]
            return None
        if self.weight.numel() >= given[0] * self.weight.shape[0] * self._positions(given):
            return None
        weight, bias = fold_channel_affine(self.weight, self.bias, scale, shift)
        twin = copy.copy(self)
        # A copy of the layer whose weight and bias are tensors computed from the parameters (so that the
        # gradients reach those), the layer itself left as it is; nn.Module reads `weight` and `bias` from
        # this dictionary, so every method of the layer's kind computes with the folded ones.
        twin._parameters = {"weight": weight, "bias": bias}  # type: ignore[attr-defined]
        return twin  # type: ignore[return-value]


class Normalize(AbstractMixin, nn.Module):
    """``(x - mean[c]) / std[c]`` per channel (dimension 1), as the paper's fixed first layer."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        if len(mean) != len(std):
            raise ValueError(f"Normalize: {len(mean)} means but {len(std)} stds")
        if any(s == 0 for s in std):
            raise ValueError("Normalize: std must be nonzero")
        # CPU: a module's buffers are made on the host; moving the module moves them
        self.register_buffer("mean", torch.tensor([float(v) for v in mean]))
        self.register_buffer("std", torch.tensor([float(v) for v in std]))

    def _per_channel(self, v: Tensor, x: Tensor) -> Tensor:
        return v.to(x.dtype).reshape(1, -1, *([1] * (x.dim() - 2)))

    def _affine(self, x: Tensor, with_bias: bool) -> Tensor:
        if with_bias:
            x = x - self._per_channel(self.mean, x)
        return x / self._per_channel(self.std, x)

    def _abs(self, x: Tensor) -> Tensor:
        return x / self._per_channel(self.std, x).abs()

    def forward(self, x: Tensor) -> Tensor:
        return self._affine(x, True)

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Box:
        return affine_box(x, self._affine, self._abs)

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        if x.onehot is None:
            return affine_hz(x, self._affine, self._abs)
        # A one-hot term value * e_i stays one-hot: value / std[channel of i] (the exact input zonotope
        # reaches the first convolution still lazy, see Conv2D).
        head, beta = self._affine(x.head, True), self._abs(x.beta)
        dense = x.map_dense_errors(lambda e: self._affine(e, False), head.shape)
        positions, values = x.onehot
        std = self._per_channel(self.std, x.head).expand(x.shape).reshape(x.batch, -1)[0]
        return x.replace(head, beta, dense, onehot=(positions, values / std[positions]))

    def rounding(self, x) -> Rounding:
        """A subtraction and a division per neuron: within ``gamma(2)`` of ``(|x| + |mean|) / |std|``."""
        per_channel = (-1, *[1] * (len(x.shape) - 2))
        gain = 1 / self.std.abs().view(per_channel)
        return Rounding(1, 0, gain, (self.mean.view(per_channel) * gain).abs())

    def back_symbolic(self, coeffs: Coeffs, node: Symbolic, how: Backward) -> tuple[Coeffs, Tensor]:
        """``A (x - mean) / std = (A / std) x - A mean / std``."""
        like = node.analysis.center.new_empty(node.shape)
        scale = 1 / self._per_channel(self.std, like)
        return coeffs.mul(scale), -coeffs.dot(self._per_channel(self.mean, like) * scale)

    def extra_repr(self) -> str:
        return f"mean={self.mean.tolist()}, std={self.std.tolist()}"


class Conv2D(_AbsorbsChannelAffine, AbstractMixin, nn.Conv2d):
    """2-D convolution, NCHW. ``filters`` is the number of output channels (the listings' name)."""

    def __init__(
        self,
        in_channels: int,
        filters: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        bias: bool = True,
    ) -> None:
        super().__init__(
            in_channels, filters, _pair(kernel_size), stride=_pair(stride), padding=_pair(padding), bias=bias
        )

    def _positions(self, given: torch.Size) -> int:
        """The kernel's places on inputs of shape ``given``."""
        (kh, kw), (sh, sw), (ph, pw) = self.kernel_size, self.stride, self.padding
        return ((given[2] + 2 * ph - kh) // sh + 1) * ((given[3] + 2 * pw - kw) // sw + 1)

    def forward(self, x: Tensor) -> Tensor:
        # Channels-last on the CPU, as a box's maps are (see `_fast_layout`): a training step's clean
        # pass (BatchNorm's statistics, a point part, an attack) convolves as fast as its boxes do.
        return _fast_layout(self._affine(_fast_layout(x), True))

    def _affine(self, x: Tensor, with_bias: bool) -> Tensor:
        return F.conv2d(x, self.weight, self.bias if with_bias else None, self.stride, self.padding)

    def _abs(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight.abs(), None, self.stride, self.padding)

    def _fast(self, center: Tensor, radius: Tensor) -> tuple[Tensor, Tensor]:
        """Center (with the bias) and radius (through |W|) of a box, channels-last (see `_fast_layout`).

        The outputs are made channels-last too: from a one-channel input oneDNN returns NCHW (its layout
        is ambiguous), and the elementwise passes before the next convolution would then mix layouts.
        """
        center = _fast_layout(self._affine(_fast_layout(center), True))
        return center, _fast_layout(self._abs(_fast_layout(radius)))

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Box:
        return Box(*self._fast(x.center, x.radius))

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        if x.m == 0:
            head, beta = self._fast(x.head, x.beta)
            return x.replace(head, beta, x.map_errors(lambda e: e, head.shape))
        dense, local, onehot = x.term_parts()
        if local is None and onehot is None:
            return affine_hz(x, self._affine, self._abs)
        # One-hot terms (the exact input zonotope, a correlation layer before this one) become windows of
        # the kernel's footprint, and windows stay windows while that is cheaper than full maps (see
        # `LocalTerms`): convolving k * B maps that are zero but near one neuron costs the full maps.
        head, beta = self._affine(x.head, True), self._abs(x.beta)
        convolve = lambda e: self._affine(e, False)  # noqa: E731
        if local is not None and not self._windows_pay(local, head.shape):
            # Full maps: made and convolved a chunk of terms at a time, never all at once.
            b, c = local.values.shape[1:3]
            step = max(1, MAP_CHUNK_BYTES // (b * c * local.height * local.width * head.element_size()))
            parts = [map_terms(dense, convolve, head.shape)]
            for start in range(0, local.k, step):
                parts.append(map_terms(local.terms(start, start + step).dense(), convolve, head.shape))
            dense, local = torch.cat(parts), None
        else:
            dense = map_terms(dense, convolve, head.shape)
        parts = [] if local is None else [local]
        if onehot is not None:
            parts.append(LocalTerms.from_onehot(*onehot, x.shape[1:]))
        out_hw = (head.shape[2], head.shape[3])
        stride, padding = self.stride, self.padding
        convolved = [p.conv2d(self.weight, stride, padding, out_hw) for p in parts]  # type: ignore[arg-type]
        return x.replace(head, beta, dense, local=LocalTerms.cat(convolved) if convolved else None)

    def rounding(self, x) -> Rounding:
        c_out, c_in, kh, kw = self.weight.shape
        gain = self.weight.detach().abs().sum((1, 2, 3)).view(-1, 1, 1)
        constant = 0.0 if self.bias is None else self.bias.detach().abs().view(-1, 1, 1)
        return Rounding(c_in * kh * kw, c_out * kh * kw, gain, constant)

    def back_symbolic(self, coeffs: Coeffs, node: Symbolic, how: Backward) -> tuple[Coeffs, Tensor | None]:
        """The rows through the transposed convolution (the layer's own weight, no matrix); the bias
        contributes ``sum A * b[c]``."""
        bias = None if self.bias is None else coeffs.dot(self.bias.view(1, -1, 1, 1))
        in_hw = tuple(node.parents[0].shape[2:])
        return coeffs.conv_back(self.weight, self.stride, self.padding, in_hw), bias  # type: ignore[arg-type]

    def _windows_pay(self, local: LocalTerms, out_shape: torch.Size) -> bool:
        """Whether convolving windows (each fully: ``(Qh + kh - 1) x (Qw + kw - 1)`` outputs) costs less
        than convolving full maps (``H' x W'`` outputs each)."""
        (qh, qw), (kh, kw) = local.window, self.kernel_size
        return (qh + kh - 1) * (qw + kw - 1) < out_shape[2] * out_shape[3]


def _fast_layout(x: Tensor) -> Tensor:
    """``x`` channels-last when it is a CPU float32 map that will be convolved.

    oneDNN, which runs CPU float32 convolutions, computes channels-last and reorders NCHW inputs, outputs
    and gradients on every call: 10-40% of a convolution at these sizes. Its channels-last output keeps
    the layout through the elementwise transformers, so only the first convolution converts (a copy of a
    small input). Not on other devices, nor float64 (no oneDNN there). Terms of a hybrid zonotope stay
    NCHW: their sum over terms, in every interval concretization, would come out NCHW and mix layouts.
    """
    if x.dim() == 4 and x.device.type == "cpu" and x.dtype == torch.float32 and not _exporting():
        x = x.contiguous(memory_format=torch.channels_last)
        _, c, h, w = x.shape
        canonical = (c * h * w, 1, w * c, c)
        if x.stride() != canonical:
            # A size-1 dimension (one input channel) leaves the layout ambiguous: the tensor counts as
            # channels-last but keeps NCHW strides, and oneDNN then computes and returns NCHW (measured on
            # ConvSmall: NCHW outputs, and two copies each way to convert them). The canonical strides
            # address the same elements, so without a gradient they are a free view.
            if not x.requires_grad:
                return x.as_strided(x.shape, canonical)
            return torch.empty_strided(x.shape, canonical, dtype=x.dtype).copy_(x)
    return x


def _exporting() -> bool:
    """Whether the network is being traced for export (ONNX, torch.export): a layout is no part of the
    function, and the strided view `_fast_layout` takes would be written into the graph (an `as_strided`
    Gather that no verifier, daic's import included, reads as a layer)."""
    compiling = getattr(torch.compiler, "is_compiling", None)  # torch 2.3 and later
    return torch.onnx.is_in_onnx_export() or torch.jit.is_tracing() or bool(compiling and compiling())


class _FlattenChannelsLast(torch.autograd.Function):
    """Flattens a channels-last map in NCHW order (a copy), with a channels-last gradient.

    The plain reshape's gradient would be NCHW, and every elementwise backward pass before it would then
    mix layouts (slower) and hand oneDNN an NCHW gradient to reorder.
    """

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        ctx.shape = x.shape
        return x.contiguous().flatten(1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        return grad.reshape(ctx.shape).contiguous(memory_format=torch.channels_last)


def _flatten(x: Tensor) -> Tensor:
    """``x.flatten(1)``, keeping a channels-last gradient for a channels-last map (see `_fast_layout`)."""
    if x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
        return _FlattenChannelsLast.apply(x)
    return x.flatten(1)


class Linear(_AbsorbsChannelAffine, AbstractMixin, nn.Linear):
    """Fully connected layer; flattens its input's feature dimensions (``out``: the listings' name)."""

    def __init__(self, in_features: int, out: int, bias: bool = True) -> None:
        super().__init__(in_features, out, bias=bias)

    def _positions(self, given: torch.Size) -> int:
        """One: each output is one neuron, whatever the input's shape."""
        return 1

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(_flatten(x), self.weight, self.bias)

    def _affine(self, x: Tensor, with_bias: bool) -> Tensor:
        return F.linear(_flatten(x), self.weight, self.bias if with_bias else None)

    def _abs(self, x: Tensor) -> Tensor:
        return F.linear(_flatten(x), self.weight.abs())

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Box:
        center, radius = _BoxLinear.apply(_flatten(x.center), _flatten(x.radius), self.weight, self.bias)
        return Box(center, radius)

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        if x.onehot is None:
            return affine_hz(x, self._affine, self._abs)
        # Terms with a single nonzero coefficient (fresh from a correlation layer): the image of
        # value * e_i is value * W[:, i], a gathered column, instead of a full product per term.
        head = self._affine(x.head, True)
        beta = self._abs(x.beta)
        dense = x.dense_errors
        b = x.batch
        dense = F.linear(dense.reshape(dense.shape[0], b, self.in_features), self.weight)
        positions, values = x.onehot
        k = positions.shape[0]
        # index_select along the weight's own layout: its gradient is an index_add into a tensor shaped
        # like the weight (gathering from weight.t() made the accumulation a transposed copy).
        columns = self.weight.index_select(1, positions.reshape(-1))  # (out, k * B)
        gathered = columns.t().reshape(k, b, -1) * values.unsqueeze(-1)  # (k, B, out)
        return x.replace(head, beta, torch.cat([dense, gathered], dim=0))

    def rounding(self, x) -> Rounding:
        gain = self.weight.detach().abs().sum(1)
        constant = 0.0 if self.bias is None else self.bias.detach().abs()
        return Rounding(self.in_features, self.out_features, gain, constant)

    def back_symbolic(self, coeffs: Coeffs, node: Symbolic, how: Backward) -> tuple[Coeffs, Tensor | None]:
        bias = None if self.bias is None else coeffs.dot(self.bias.view(1, -1))
        return coeffs.linear_back(self.weight, node.parents[0].shape[1:]), bias  # type: ignore[union-attr]


class Flatten(AbstractMixin, nn.Module):
    """Flattens every dimension but the batch."""

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(1)

    def _affine(self, x: Tensor, with_bias: bool) -> Tensor:
        return x.flatten(1)

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Box:
        return Box(x.center.flatten(1), x.radius.flatten(1))

    def rounding(self, x) -> None:
        return None

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        # Pending one-hot terms index the flattened neurons already, so they stay pending.
        return x.replace(x.head.flatten(1), x.beta.flatten(1), x.dense_errors.flatten(2), x.onehot)

    def back_symbolic(self, coeffs: Coeffs, node: Symbolic, how: Backward) -> tuple[Coeffs, None]:
        return coeffs.reshape(node.parents[0].shape[1:]), None  # type: ignore[union-attr]
