"""Pooling layers: AvgPool2D (affine) and MaxPool2D."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from daic.runtime.context import AbstractContext
from daic.runtime.domains import Box, HybridZonotope
from daic.runtime.domains.coeffs import Dense
from daic.runtime.domains.rounding import Rounding
from daic.runtime.layers.affine import _pair, affine_box, affine_hz
from daic.runtime.layers.base import AbstractMixin

if TYPE_CHECKING:
    from daic.runtime.domains.coeffs import Coeffs
    from daic.runtime.domains.symbolic import Backward, Symbolic


class AvgPool2D(AbstractMixin, nn.AvgPool2d):
    """Average pooling; by default stride = kernel and no padding (the paper's DenseNet-100 pads by 1).

    Padded positions count as zeros in the average (``count_include_pad``), so the layer is one fixed
    linear map with non-negative weights: exact on boxes and zonotopes, beta goes through the same map.
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
    ) -> None:
        kernel = _pair(kernel_size)
        super().__init__(kernel, stride=kernel if stride is None else _pair(stride), padding=_pair(padding))

    def forward(self, x: Tensor) -> Tensor:
        return self._affine(x, True)

    def _affine(self, x: Tensor, with_bias: bool) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, count_include_pad=True)

    def _abs(self, x: Tensor) -> Tensor:
        return self._affine(x, False)

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Box:
        return affine_box(x, self._affine, self._abs)

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        return affine_hz(x, self._affine, self._abs)

    def rounding(self, x) -> Rounding:
        """Sums of ``kh kw`` terms of weight ``fl(1 / (kh kw))`` (one more rounding for the weight)."""
        kh, kw = _pair(self.kernel_size)
        return Rounding(kh * kw + 1, kh * kw + 1, 1.0, 0.0)

    def back_symbolic(self, coeffs: Coeffs, node: Symbolic, how: Backward) -> tuple[Coeffs, None]:
        """As the convolution of each channel with a constant kernel ``1 / (kh kw)`` (padding counted)."""
        channels = node.shape[1]
        kernel = _pair(self.kernel_size)
        weight = node.analysis.center.new_full((channels, 1, *kernel), 1 / (kernel[0] * kernel[1]))
        in_hw = tuple(node.parents[0].shape[2:])
        stride, padding = _pair(self.stride), _pair(self.padding)
        return coeffs.conv_back(weight, stride, padding, in_hw, groups=channels), None  # type: ignore[arg-type]


class MaxPool2D(AbstractMixin, nn.MaxPool2d):
    """Max pooling (stride defaults to the kernel size; padding counts as -inf, as in PyTorch).

    Box: the max of the lower and of the upper bounds (exact, max is monotone). Hybrid zonotope: a window
    whose element with the largest lower bound is at least every other element's upper bound *is* that
    element, so the output copies its head, beta and correlated terms; any other window becomes the box
    [max lower, max upper] with no correlated terms (sound, and exact per neuron).

    Linear relaxation: below, the output is at least the element with the largest lower bound (the max is
    at least each element); above, it is that element in a window where it dominates, else the constant
    max upper bound. Rows kept as windows (`Patches`, intermediate bounds of later convolutions) stop
    here and take the output's interval bounds.
    """

    relaxes_input = True

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
    ) -> None:
        kernel = _pair(kernel_size)
        super().__init__(kernel, stride=kernel if stride is None else _pair(stride), padding=_pair(padding))

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Box:
        lower, upper = x.bounds()
        return Box.from_bounds(self(lower), self(upper))

    def _windows(
        self, lower: Tensor, upper: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[int, int]]:
        """Per output neuron (``(B, C, L)``, ``L`` windows): the largest lower bound, the largest upper
        bound, whether that element dominates its window (0/1, blended by arithmetic as in relu), and the
        element's flat position in its input map; and the output's (height, width)."""
        (kh, kw), (sh, sw), (ph, pw) = _pair(self.kernel_size), _pair(self.stride), _pair(self.padding)
        b, c, h, w = lower.shape
        out_h, out_w = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1

        def windows(v: Tensor) -> Tensor:  # (B, C, kh * kw, out_h * out_w)
            padded = F.pad(v, (pw, pw, ph, ph), value=float("-inf"))
            return F.unfold(padded, (kh, kw), stride=(sh, sw)).reshape(b, c, kh * kw, out_h * out_w)

        lw, uw = windows(lower), windows(upper)
        best_lower, arg = lw.max(dim=2)  # (B, C, L); a padded slot is never the argmax (its lower is -inf)
        best_upper = uw.amax(dim=2)
        others_upper = uw.scatter(2, arg.unsqueeze(2), float("-inf")).amax(dim=2)
        exact = (best_lower >= others_upper).to(lower.dtype)
        win = torch.arange(out_h * out_w, device=lower.device)
        row = (win // out_w) * sh - ph + arg // kw
        col = (win % out_w) * sw - pw + arg % kw
        return best_lower, best_upper, exact, row * w + col, (out_h, out_w)

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        b, c, h, w = x.shape
        best_lower, best_upper, exact, flat, (out_h, out_w) = self._windows(*x.bounds())

        head = x.head.reshape(b, c, h * w).gather(2, flat)
        beta = x.beta.reshape(b, c, h * w).gather(2, flat)
        head = torch.lerp((best_upper + best_lower) / 2, head, exact)
        beta = torch.lerp((best_upper - best_lower) / 2, beta, exact)
        out_shape = (b, c, out_h, out_w)
        if x.m:
            m = x.m
            errors = x.errors.reshape(m, b, c, h * w).gather(3, flat.expand(m, b, c, flat.shape[-1]))
            errors = (errors * exact).reshape(m, *out_shape)
        else:
            errors = x.errors.new_zeros((0, *out_shape))
        return x.replace(head.reshape(out_shape), beta.reshape(out_shape), errors)

    def rounding(self, x) -> Rounding:
        """Maxima are exact; back-substitution adds the coefficients of overlapping windows (at most
        ``kh kw`` into one neuron) and, for rows kept below the upper bound, the largest upper bound."""
        kh, kw = _pair(self.kernel_size)
        return Rounding(0, kh * kw, back_constant=lambda: x.bounds()[1].abs().amax())

    def back_symbolic(self, coeffs: Coeffs, node: Symbolic, how: Backward) -> tuple[Coeffs | None, Tensor]:
        if not isinstance(coeffs, Dense):
            return None, node.concretize(coeffs)
        lower, upper = node.parents[0].bounds()
        _, best_upper, exact, flat, _ = (
            coeffs.gathered(t) if isinstance(t, Tensor) else t for t in self._windows(lower, upper)
        )
        g, s, c = coeffs.A.shape[:3]
        A = coeffs.A.reshape(g, s, c, -1)
        negative = A.clamp(max=0)
        chosen = A - negative * (1 - exact)  # positive rows, and negative ones where exact
        constant = (negative * ((1 - exact) * best_upper)).sum((2, 3))
        moved = A.new_zeros((g, s, c, lower.shape[2] * lower.shape[3]))
        moved.scatter_add_(3, flat.expand(g, s, c, flat.shape[-1]), chosen)
        return Dense(moved.reshape(g, s, *lower.shape[1:]), coeffs.image), constant
