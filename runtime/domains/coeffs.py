"""Linear coefficients of a back-substitution: how a specification's rows depend on one node's neurons.

Back-substitution (CROWN, DeepPoly) carries, for each row of a specification, a linear function of the
neurons of the node it has reached, and moves it one layer towards the input at a time. Two
representations hold those functions:

- `Dense`: ``A`` of shape ``(G, S, *F)``, one coefficient per row and neuron. Without ``image``, ``G`` is
  the batch and every image has the same ``S`` rows (the margins, ``S`` = classes - 1). With ``image``
  (``(G,)``), each group belongs to that image: the rows of intermediate bounds, which are the neurons
  left unstable in each image, so that no image pays for the others' unstable neurons.
- `Patches`: rows over a convolutional node's own neurons (its intermediate bounds). A neuron ``(c, i, j)``
  depends only on a window of each earlier map (its receptive field), so its row is kept as that window:
  ``P`` of shape ``(R, C, Kh, Kw)``, the row of image ``image[r]`` at grid position ``position[r]``, whose
  window starts at ``(i * stride - padding)`` of the map (auto_LiRPA's "patches" mode). Convolutions move a
  window back by a transposed convolution of the window alone, so a convolutional specification is never a
  ``(batch, neurons, neurons)`` matrix: its memory is ``rows x C x Kh x Kw``, the receptive field, and never
  more than the map (a window as large as the map is made dense, see `Patches.compact`).

Both offer the operations the layers' back-substitution methods are written in: elementwise scaling by a
neuron map (`mul`), contraction with one (`dot`), the least value over a box (`bound`), a relaxation
(`relaxed`), the transposed convolution (`conv_back`), and sums of branches. Maps are given per image
(``(B, *F)``) or broadcast (``(1, ...)``); coefficients outside a map (in its zero padding) are absent.
Every contraction returns ``(G, S)`` (``(R, 1)`` for patches).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from daic.runtime import native
from daic.runtime.domains.fused_rows import bound_rows, relaxed_rows

Pair = tuple[int, int]


def transposed_conv(
    x: Tensor, weight: Tensor, stride: Pair, padding: Pair, extra: Pair = (0, 0), groups: int = 1
) -> Tensor:
    """``conv_transpose2d(x, weight, ...)``, the way the device runs fastest (the same numbers).

    On the CPU (measured at the sizes of ConvSmall's and ConvBig's back-substitution):
    - float32, one or two output channels (a network's first layer, where the rows reach the image): the
      product with the kernel followed by `fold`, up to 2x faster than oneDNN;
    - float32, more channels: oneDNN on channels-last inputs, 3-5x faster than on NCHW ones;
    - float64 (certification): the input gradient of the forward convolution, 2-17x faster than the
      transposed convolution, which works through its batch one image at a time; with a gradient to
      the rows alone (alpha-CROWN of every layer), its own gradient being the forward convolution.
    Elsewhere the plain call.
    """
    if x.device.type != "cpu" or groups != 1:
        return F.conv_transpose2d(x, weight, None, stride, padding, extra, groups)
    c_in, c_out, kh, kw = weight.shape
    n, _, h, w = x.shape
    out_h = (h - 1) * stride[0] - 2 * padding[0] + kh + extra[0]
    out_w = (w - 1) * stride[1] - 2 * padding[1] + kw + extra[1]
    if x.dtype == torch.float32 and c_out <= 2:
        cols = torch.matmul(weight.reshape(c_in, c_out * kh * kw).t(), x.reshape(n, c_in, h * w))
        return F.fold(cols, (out_h, out_w), (kh, kw), stride=stride, padding=padding)
    if x.dtype == torch.float32:
        x = x.contiguous(memory_format=torch.channels_last)
        return F.conv_transpose2d(x, weight, None, stride, padding, extra, groups)
    return _InputGradient.apply(x, weight, stride, padding, (out_h, out_w))


class _InputGradient(torch.autograd.Function):
    """``conv_transpose2d(x, W)`` as the input gradient of the forward convolution at ``x``. Its gradient
    follows from ``<conv_transpose2d(x, W), g> = <x, conv2d(g, W)>``: to ``x``, ``conv2d(g, W)``; to
    ``W``, the forward convolution's weight gradient at input ``g`` for the output gradient ``x``."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, stride: Pair, padding: Pair, out_hw: Pair) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.stride, ctx.padding = stride, padding
        shape = x.new_empty(()).expand(x.shape[0], weight.shape[1], *out_hw)  # only its shape is read
        return torch.ops.aten.convolution_backward(
            x, shape, weight, None, stride, padding, (1, 1), False, (0, 0), 1, (True, False, False)
        )[0]

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[:2]
        grad_x = F.conv2d(grad, weight, None, ctx.stride, ctx.padding) if need_x else None
        grad_w = None
        if need_w:
            grad_w = torch.ops.aten.convolution_backward(
                x, grad, weight, None, ctx.stride, ctx.padding, (1, 1), False, (0, 0), 1, (False, True, False)
            )[1]
        return grad_x, grad_w, None, None, None


class Dense:
    """``A`` of shape ``(G, S, *F)``: row ``s`` of group ``g`` is ``sum_f A[g, s, f] * x[image(g), f]``."""

    __slots__ = ("A", "image")

    def __init__(self, A: Tensor, image: Tensor | None = None) -> None:
        self.A, self.image = A, image

    @property
    def rows(self) -> int:
        return self.A.shape[1]

    def gathered(self, m: Tensor) -> Tensor:
        """A neuron map ``(B, *F)`` (or broadcast ``(1, ...)``) as ``(G, 1, *F)``, each group's image's;
        per-row maps ``(G, S, *F)`` as they are."""
        if m.dim() == self.A.dim():
            return m
        return self.per_group(m).unsqueeze(1)

    def per_row(self, m: Tensor) -> Tensor:
        """A neuron map ``(B, *F)`` as each row sees it, ``(G, S, *F)`` (a view: a group's rows share it)."""
        return self.gathered(m).expand(self.A.shape)

    def _like(self, A: Tensor) -> Dense:
        return Dense(A, self.image)

    def mul(self, m: Tensor) -> Dense:
        """Each coefficient times its neuron's factor."""
        return self._like(self.A * self.gathered(m))

    def dot(self, m: Tensor) -> Tensor:
        """``(G, S)``: each row applied to the neuron values ``m``; a map broadcast over some dimensions
        (a bias per channel) meets the rows summed over them first, with no product as large as the rows."""
        m = self.gathered(m)
        A = self.A
        spread = [d for d in range(2, A.dim()) if m.shape[d] == 1 and A.shape[d] != 1]
        if spread:
            A = A.sum(spread, keepdim=True)
        if m.shape[0] == A.shape[0] and m.shape[2:] == A.shape[2:]:
            return torch.bmm(A.flatten(2), m.flatten(2).transpose(1, 2)).squeeze(2)
        return (A * m).flatten(2).sum(2)

    def per_group(self, m: Tensor) -> Tensor:
        """A neuron map ``(B, *F)`` as ``(G, *F)``, each group's image's (one shared ``(1, *F)`` as it is):
        the fused kernels' layout."""
        return m if self.image is None or m.shape[0] == 1 else m.index_select(0, self.image)

    def bound(self, center: Tensor, radius: Tensor) -> Tensor:
        """``(G, S)``: the least value of each row over the box ``center +- radius``."""
        if center.shape[1:] == self.A.shape[2:]:
            return bound_rows(self.A, self.per_group(center), self.per_group(radius))
        return self.dot(center) - self._like(self.A.abs()).dot(radius)

    def relaxed(
        self, lower_slope: Tensor, upper_slope: Tensor, upper_bias: Tensor, per_row: bool = False
    ) -> tuple[Dense, Tensor]:
        """The rows through an elementwise relaxation ``ls * x <= f(x) <= us * x + ub``, for lower bounds: a
        positive coefficient takes the lower line, a negative one the upper. Returns the coefficients on
        ``x`` and the constant ``(G, S)``. With ``per_row``, ``lower_slope`` is each row's (alpha-CROWN:
        ``(G, S, *F)``, or anything `per_row` gives that broadcasts to it)."""
        if upper_slope.shape[1:] == self.A.shape[2:]:
            per_row = per_row and lower_slope.dim() == self.A.dim()
            slopes = (lower_slope if per_row else self.per_group(lower_slope), self.per_group(upper_slope))
            moved, bias = relaxed_rows(self.A, *slopes, self.per_group(upper_bias))
            return self._like(moved), bias
        positive = self.A.clamp(min=0)
        negative = self.A - positive
        moved = positive * self.gathered(lower_slope) + negative * self.gathered(upper_slope)
        return self._like(moved), self._like(negative).dot(upper_bias)

    def relaxed_per_row(self, ls: Tensor, lb: Tensor, us: Tensor, ub: Tensor) -> tuple[Dense, Tensor]:
        """The rows through lines given per row (each ``(G, S, *F)``, as `per_row` gives them: alpha-CROWN's
        tangent lines): a positive coefficient takes the lower line ``ls x + lb``, a negative one the upper
        ``us x + ub``. Returns the coefficients on ``x`` and the constant ``(G, S)``, one sum of one product
        per coefficient."""
        positive = self.A.clamp(min=0)
        negative = self.A - positive
        moved = positive * ls + negative * us
        return self._like(moved), (positive * lb + negative * ub).flatten(2).sum(2)

    def conv_back(self, weight: Tensor, stride: Pair, padding: Pair, in_hw: Pair, groups: int = 1) -> Dense:
        """The rows on a convolution's input, by the transposed convolution (no dense matrix)."""
        g, s, c, h, w = self.A.shape
        kh, kw = weight.shape[2:]
        extra = (
            in_hw[0] - ((h - 1) * stride[0] - 2 * padding[0] + kh),
            in_hw[1] - ((w - 1) * stride[1] - 2 * padding[1] + kw),
        )
        out = transposed_conv(self.A.reshape(g * s, c, h, w), weight, stride, padding, extra, groups)
        return self._like(out.reshape(g, s, *out.shape[1:]))

    def linear_back(self, weight: Tensor, in_shape: Sequence[int]) -> Dense:
        """The rows on a fully connected layer's input (``weight`` is ``(out, in)``), in its shape."""
        out = self.A.flatten(2) @ weight
        return self._like(out.reshape(*self.A.shape[:2], *in_shape))

    def reshape(self, in_shape: Sequence[int]) -> Dense:
        return self._like(self.A.reshape(*self.A.shape[:2], *in_shape))

    def taken(self, at: Tensor, in_shape: Sequence[int]) -> Dense:
        """Coefficients over another order of the same values: input value ``j``'s is this one's at
        ``at[j]`` (a permutation), shaped ``in_shape``."""
        return self._like(self.A.flatten(2)[:, :, at].reshape(*self.A.shape[:2], *in_shape))

    def l1(self) -> Tensor:
        """``(G, S)``: each row's sum of |coefficients| (for bounding rounding errors)."""
        return torch.linalg.vector_norm(self.A.flatten(2), 1, dim=2)  # no |A| copy: 3x faster

    @property
    def features(self) -> int:
        return self.A[0, 0].numel()

    def per_image(self, values: Tensor) -> Tensor:
        """``values`` (``(B,)``, one per image) as ``(G, 1)``, each group's image's."""
        return (values if self.image is None else values[self.image]).unsqueeze(1)

    def split(self, sizes: Sequence[int], dim: int) -> list[Dense]:
        """Rows on each part of a concatenation along feature dimension ``dim`` (1 = channels)."""
        return [self._like(part) for part in self.A.split(list(sizes), dim=dim + 1)]

    def __add__(self, other: Dense | Patches) -> Dense:
        if isinstance(other, Patches):
            other = other.to_dense()
        return self._like(self.A + other.A)


class Patches:
    """Rows over a ``(C, H, W)`` map, each nonzero only in a window (see the module docstring).

    ``P`` is ``(R, C, Kh, Kw)``; row ``r`` belongs to image ``image[r]`` and to the grid position
    ``position[r]`` (a flat index into ``grid``, ``(Hs, Ws)``), whose window covers rows
    ``i * stride[0] - padding[0] + a``, ``0 <= a < Kh``, of the ``map_hw`` map (and columns alike).
    Coefficients outside the map are zero.
    """

    __slots__ = ("P", "grid", "image", "map_hw", "padding", "position", "stride")

    def __init__(
        self,
        P: Tensor,
        image: Tensor,
        position: Tensor,
        grid: Pair,
        stride: Pair = (1, 1),
        padding: Pair = (0, 0),
        map_hw: Pair | None = None,
    ) -> None:
        self.P, self.image, self.position, self.grid = P, image, position, grid
        self.stride, self.padding, self.map_hw = stride, padding, map_hw or grid

    @classmethod
    def neurons(cls, image: Tensor, neuron: Tensor, sign: Tensor, shape: Sequence[int]) -> Patches:
        """One row ``sign * x[c, i, j]`` per entry: image ``image[r]``'s neuron ``neuron[r]`` (flat in
        ``shape`` = ``(C, H, W)``), its window 1 x 1."""
        c, h, w = shape
        P = sign.new_zeros((sign.shape[0], c, 1, 1))
        P[torch.arange(sign.shape[0], device=sign.device), neuron // (h * w), 0, 0] = sign
        return cls(P, image, neuron % (h * w), (h, w))

    # ----------------------------------------------------------------------------------------------
    # the window of every row, as a view of a map

    def _pads(self) -> tuple[int, int, int, int]:
        """(left, right, top, bottom) padding of the map (negative: cropping) that makes grid position
        (0, 0)'s window start at the corner and the last position's window end inside."""
        (kh, kw), (sh, sw), (ph, pw) = self.P.shape[-2:], self.stride, self.padding
        (hs, ws), (h, w) = self.grid, self.map_hw
        return pw, (ws - 1) * sw - pw + kw - w, ph, (hs - 1) * sh - ph + kh - h

    def unfold(self, *maps: Tensor) -> list[Tensor]:
        """Each map (``(B, C, H, W)``, or broadcast ``(1, C, 1 or H, 1 or W)``) as each row's window of
        its image: ``(R, C, Kh, Kw)``, zero outside the map. Maps of one shape are unfolded together.

        Rows far fewer than the windows of every image are gathered element by element; otherwise every
        window is unfolded once and the rows' copied out (rows often share a window: one per channel)."""
        kh, kw = self.P.shape[-2:]
        batch = max(m.shape[0] for m in maps)
        channels = [m.shape[1] for m in maps]
        full = [m.expand(batch, m.shape[1], *self.map_hw) for m in maps]
        padded = F.pad(full[0] if len(full) == 1 else torch.cat(full, 1), self._pads())
        n_h = (padded.shape[2] - kh) // self.stride[0] + 1
        n_w = (padded.shape[3] - kw) // self.stride[1] + 1
        ws = self.grid[1]
        if self.P.shape[0] * 4 < batch * n_h * n_w:
            picked = self._gathered(padded, kh, kw)
        else:
            cols = F.unfold(padded, (kh, kw), stride=self.stride)  # (B, C * kh * kw, nH * nW)
            window = (self.position // ws) * n_w + self.position % ws
            if batch > 1:
                window = self.image * (n_h * n_w) + window
            picked = cols.transpose(1, 2).reshape(-1, cols.shape[1]).index_select(0, window)
        picked = picked.view(-1, sum(channels), kh, kw)
        return list(picked.split(channels, dim=1))

    def _gathered(self, padded: Tensor, kh: int, kw: int) -> Tensor:
        """``(R, C * kh * kw)``: each row's window, picked element by element from the padded maps."""
        width, ws = padded.shape[3], self.grid[1]
        top = (self.position // ws) * self.stride[0]
        left = (self.position % ws) * self.stride[1]
        rows = top[:, None] + torch.arange(kh, device=top.device)
        cols = left[:, None] + torch.arange(kw, device=top.device)
        flat = (rows[:, :, None] * width + cols[:, None, :]).reshape(-1, 1, kh * kw)  # (R, 1, kh * kw)
        maps = padded.flatten(2)  # (B, C, Hp * Wp)
        image = self.image if padded.shape[0] > 1 else torch.zeros_like(self.image)
        channel = torch.arange(padded.shape[1], device=top.device)[None, :, None]
        return maps[image[:, None, None], channel, flat].flatten(1)

    # ----------------------------------------------------------------------------------------------
    # the operations of `Dense`

    @property
    def rows(self) -> int:
        return 1

    def _like(self, P: Tensor) -> Patches:
        return Patches(P, self.image, self.position, self.grid, self.stride, self.padding, self.map_hw)

    def mul(self, m: Tensor) -> Patches:
        per_channel = self._per_channel(m)
        if per_channel is not None:
            return self._like(self.P * per_channel)
        return self._like(self.P * self.unfold(m)[0])

    def dot(self, m: Tensor) -> Tensor:
        """``(R, 1)``: each row applied to the neuron values ``m``."""
        per_channel = self._per_channel(m)
        if per_channel is not None:
            return (self.P.sum((2, 3)) * per_channel.flatten(1)).sum(1, keepdim=True)
        return _row_dot(self.P, self.unfold(m)[0])

    def _per_channel(self, m: Tensor) -> Tensor | None:
        """A map constant over each channel (``(B or 1, C, 1, 1)``: BatchNorm's scale and shift, a bias) as
        each row's ``(R or 1, C, 1, 1)``, or None. Such a map needs no windows: the coefficients outside
        the map are zero, so scaling the whole window is scaling its part inside."""
        if m.dim() != 4 or m.shape[2:] != (1, 1):
            return None
        return m if m.shape[0] == 1 else m.index_select(0, self.image)

    def bound(self, center: Tensor, radius: Tensor) -> Tensor:
        fused = native.patches_bound(self, center, radius)
        if fused is not None:
            return fused
        c, r = self.unfold(center, radius)
        return _row_dot(self.P, c) - _row_dot(self.P.abs(), r)

    def per_row(self, m: Tensor) -> Tensor:
        """A neuron map ``(B, C, H, W)`` as each row's window of its image, ``(R, C, Kh, Kw)`` (false or 0
        outside the map)."""
        if m.dtype == torch.bool:
            return self.unfold(m.to(self.P.dtype))[0] > 0
        return self.unfold(m)[0]

    def relaxed(
        self, lower_slope: Tensor, upper_slope: Tensor, upper_bias: Tensor, per_row: bool = False
    ) -> tuple[Patches, Tensor]:
        """As `Dense.relaxed`; with ``per_row``, ``lower_slope`` is each row's window (`per_row`'s shape)."""
        if per_row:
            ls, (us, ub) = lower_slope, self.unfold(upper_slope, upper_bias)
        else:
            fused = native.patches_relaxed(self, lower_slope, upper_slope, upper_bias)
            if fused is not None:
                return self._like(fused[0]), fused[1]
            ls, us, ub = self.unfold(lower_slope, upper_slope, upper_bias)
        negative = self.P.clamp(max=0)
        # A+ ls + A- us = A us + A+ (ls - us): the second term is zero but at unstable neurons.
        moved = self.P * us + (self.P - negative) * (ls - us)
        return self._like(moved), _row_dot(negative, ub)

    def relaxed_per_row(self, ls: Tensor, lb: Tensor, us: Tensor, ub: Tensor) -> tuple[Patches, Tensor]:
        """As `Dense.relaxed_per_row`, with each row's window of lines; the constant ``(R, 1)``."""
        positive = self.P.clamp(min=0)
        negative = self.P - positive
        moved = positive * ls + negative * us
        return self._like(moved), (positive * lb + negative * ub).flatten(1).sum(1, keepdim=True)

    def conv_back(
        self, weight: Tensor, stride: Pair, padding: Pair, in_hw: Pair, groups: int = 1
    ) -> Patches | Dense:
        """Each window through the transposed convolution: it grows to ``(K - 1) * s + k``, and the
        windows then start at ``i * S * s - (P * s + p)`` of the input map."""
        P = transposed_conv(self.P, weight, stride, (0, 0), (0, 0), groups)
        moved = Patches(
            P,
            self.image,
            self.position,
            self.grid,
            (self.stride[0] * stride[0], self.stride[1] * stride[1]),
            (self.padding[0] * stride[0] + padding[0], self.padding[1] * stride[1] + padding[1]),
            in_hw,
        )
        return moved.compact()

    def compact(self) -> Patches | Dense:
        """Coefficients outside the map zeroed, and the window cut to the rows and columns that some grid
        position's window has inside the map; a window larger than the map is made a dense map (it would
        only hold more zeros)."""
        (inside,) = self.unfold(self.P.new_ones((1, 1, *self.map_hw)))
        P = self.P * inside
        (sh, sw), (ph, pw), (hs, ws), (h, w) = self.stride, self.padding, self.grid, self.map_hw
        kh, kw = P.shape[-2:]
        top, bottom = max(0, ph - (hs - 1) * sh), min(kh, ph + h)
        left, right = max(0, pw - (ws - 1) * sw), min(kw, pw + w)
        cut = Patches(
            P[..., top:bottom, left:right],
            self.image,
            self.position,
            self.grid,
            self.stride,
            (ph - top, pw - left),
            self.map_hw,
        )
        if (bottom - top) * (right - left) > h * w:
            return cut.to_dense()
        return cut

    def to_dense(self) -> Dense:
        """``(R, 1, C, H, W)``, each row's window placed in its map."""
        r, c, kh, kw = self.P.shape
        (sh, sw), (ph, pw), (h, w) = self.stride, self.padding, self.map_hw
        ws = self.grid[1]
        row0 = (self.position // ws) * sh - ph  # (R,) first map row of each window
        col0 = (self.position % ws) * sw - pw
        # Windows may reach past the map (their coefficients there are zero): place them in a padded map.
        top = max(0, -int(row0.min()))
        left = max(0, -int(col0.min()))
        height = max(h, int(row0.max()) + kh) + top
        width = max(w, int(col0.max()) + kw) + left
        rows = (row0 + top)[:, None, None] + torch.arange(kh, device=row0.device)[None, :, None]
        cols = (col0 + left)[:, None, None] + torch.arange(kw, device=col0.device)[None, None, :]
        index = torch.arange(r, device=row0.device)[:, None, None]
        dense = self.P.new_zeros((r, height, width, c))
        dense[index, rows, cols] = self.P.permute(0, 2, 3, 1)
        dense = dense[:, top : top + h, left : left + w].permute(0, 3, 1, 2)
        return Dense(dense.unsqueeze(1), self.image)

    def l1(self) -> Tensor:
        """``(R, 1)``: each row's sum of |coefficients|."""
        return torch.linalg.vector_norm(self.P.flatten(1), 1, dim=1, keepdim=True)

    @property
    def features(self) -> int:
        return self.P[0].numel()

    def per_image(self, values: Tensor) -> Tensor:
        """``values`` (``(B,)``, one per image) as ``(R, 1)``, each row's image's."""
        return values[self.image].unsqueeze(1)

    def split(self, sizes: Sequence[int], dim: int) -> list[Patches] | list[Dense]:
        if dim != 1:
            return self.to_dense().split(sizes, dim)
        return [self._like(part) for part in self.P.split(list(sizes), dim=1)]

    def __add__(self, other: Dense | Patches) -> Dense | Patches:
        if isinstance(other, Dense) or other.stride != self.stride or other.map_hw != self.map_hw:
            return self.to_dense() + other
        # Align the windows: both start at the earlier start and end at the later end.
        ph, pw = max(self.padding[0], other.padding[0]), max(self.padding[1], other.padding[1])
        end_h = max(p.P.shape[-2] - p.padding[0] for p in (self, other))
        end_w = max(p.P.shape[-1] - p.padding[1] for p in (self, other))

        def aligned(p: Patches) -> Tensor:
            kh, kw = p.P.shape[-2:]
            top, left = ph - p.padding[0], pw - p.padding[1]
            return F.pad(p.P, (left, end_w - (kw - p.padding[1]), top, end_h - (kh - p.padding[0])))

        return Patches(
            aligned(self) + aligned(other),
            self.image,
            self.position,
            self.grid,
            self.stride,
            (ph, pw),
            self.map_hw,
        )


def _row_dot(P: Tensor, windows: Tensor) -> Tensor:
    """``(R, 1)``: each row's coefficients times its windows, summed."""
    return torch.bmm(P.flatten(1).unsqueeze(1), windows.flatten(1).unsqueeze(2)).view(-1, 1)


Coeffs = Dense | Patches
