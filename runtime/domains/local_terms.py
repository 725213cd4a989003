"""Correlated terms that are nonzero only inside a small window of a ``(C, H, W)`` map.

A term made by a correlation layer at one neuron (a one-hot term) spreads, through a k x k convolution, to a
k x k window; through a few more to a window still much smaller than the map. Kept as full ``(C, H, W)`` maps,
such terms are almost all zeros, and every convolution, ReLU and sum over them pays for the zeros: the exact
input zonotope of certification has one such term per input pixel, a correlation layer early in a training
network a few dozen per sample. `LocalTerms` keeps each term as its window only:

- ``values`` ``(k, B, C, Qh, Qw)``: the coefficients of term ``t`` of sample ``s`` on the window whose
  top-left neuron is at row ``top[t, s]`` and column ``left[t, s]`` (``(k, B)`` int64, may be negative);
- coefficients outside the window are zero, and so are the window's entries that fall outside the
  ``height x width`` map (every operation keeps this so).

A convolution of windows convolves each window, zero-padded so that its outputs are exactly the output
neurons it reaches: a ``Qh``-row window becomes about ``(Qh + kh - 2) // stride + 1`` rows. Everything here
is plain differentiable PyTorch (convolutions, gathers, index sums), so gradients need no hand-written rules.
Indices are broadcast, never spelled out per entry, so no index tensor is as large as the values.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


class LocalTerms:
    __slots__ = ("height", "left", "top", "values", "width")

    def __init__(self, values: Tensor, top: Tensor, left: Tensor, height: int, width: int) -> None:
        if values.dim() != 5 or top.shape != values.shape[:2] or left.shape != values.shape[:2]:
            raise ValueError("LocalTerms: values must be (k, B, C, Qh, Qw) and top, left (k, B)")
        self.values = values
        self.top = top
        self.left = left
        self.height = height
        self.width = width

    @classmethod
    def from_onehot(cls, positions: Tensor, values: Tensor, shape: torch.Size) -> LocalTerms:
        """One-hot terms ``values[t, s]`` at flat neuron ``positions[t, s]`` of a ``(C, H, W)`` map,
        as 1 x 1 windows."""
        c, h, w = shape
        k, b = positions.shape
        window = values.new_zeros((k, b, c))
        window = window.scatter(2, (positions // (h * w))[..., None], values[..., None])
        pixel = positions % (h * w)
        return cls(window[..., None, None], pixel // w, pixel % w, h, w)

    # ----------------------------------------------------------------------------------------------
    # shape

    @property
    def k(self) -> int:
        return self.values.shape[0]

    @property
    def window(self) -> tuple[int, int]:
        return self.values.shape[3], self.values.shape[4]

    def terms(self, start: int, stop: int) -> LocalTerms:
        """The terms ``start`` to ``stop - 1`` of every sample."""
        return LocalTerms(
            self.values[start:stop], self.top[start:stop], self.left[start:stop], self.height, self.width
        )

    def select(self, index: Tensor) -> LocalTerms:
        """The terms ``index[j, s]`` of each sample ``s`` (``(k', B)`` int64)."""
        batch = torch.arange(index.shape[1], device=index.device)[None, :].expand_as(index)
        values, top, left = self.values[index, batch], self.top[index, batch], self.left[index, batch]
        return LocalTerms(values, top, left, self.height, self.width)

    def pad_to(self, qh: int, qw: int) -> LocalTerms:
        """The same terms on larger windows (zeros added below and to the right)."""
        h, w = self.window
        if (qh, qw) == (h, w):
            return self
        values = F.pad(self.values, (0, qw - w, 0, qh - h))
        return LocalTerms(values, self.top, self.left, self.height, self.width)

    @staticmethod
    def cat(parts: list[LocalTerms]) -> LocalTerms:
        """Terms of several sets after one another (on the largest window)."""
        qh = max(p.window[0] for p in parts)
        qw = max(p.window[1] for p in parts)
        parts = [p.pad_to(qh, qw) for p in parts]
        first = parts[0]
        return LocalTerms(
            torch.cat([p.values for p in parts]),
            torch.cat([p.top for p in parts]),
            torch.cat([p.left for p in parts]),
            first.height,
            first.width,
        )

    # ----------------------------------------------------------------------------------------------
    # windows on the map

    def _rows_cols(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(rows, cols, inside)``: map row ``(k, B, Qh)`` and column ``(k, B, Qw)`` of every window
        entry, clamped into the map, and ``(k, B, Qh, Qw)`` whether the entry lies in the map."""
        qh, qw = self.window
        device = self.top.device
        rows = self.top[..., None] + torch.arange(qh, device=device)
        cols = self.left[..., None] + torch.arange(qw, device=device)
        row_in = (rows >= 0) & (rows < self.height)
        col_in = (cols >= 0) & (cols < self.width)
        inside = row_in[..., :, None] & col_in[..., None, :]
        return rows.clamp(0, self.height - 1), cols.clamp(0, self.width - 1), inside

    def _index(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Broadcasting indices ``(term, sample, row, col)`` of every window entry, each shaped to
        broadcast to ``(k, B, Qh, Qw)``, for advanced indexing of channels-last views ``(.., H, W, C)``.

        Indices broadcast rather than spelled out per entry and channel: no index tensor as large as the
        values. Entries outside the map are clamped onto it; they hold zeros, so they add nothing there.
        """
        k, b = self.top.shape
        rows, cols, _ = self._rows_cols()
        term = torch.arange(k, device=rows.device).reshape(k, 1, 1, 1)
        sample = torch.arange(b, device=rows.device).reshape(1, b, 1, 1)
        return term, sample, rows[..., :, None], cols[..., None, :]

    def _channels_last(self) -> Tensor:
        """The values as ``(k, B, Qh, Qw, C)`` (a view)."""
        return self.values.permute(0, 1, 3, 4, 2)

    def dense(self) -> Tensor:
        """The terms as full maps, ``(k, B, C, H, W)``."""
        k, b, c = self.values.shape[:3]
        out, target = _zeros(self.values, k, b, c, self.height, self.width)
        # Distinct entries of one window land on distinct neurons, except those clamped from outside the
        # map, which add 0: accumulating is exact.
        target.index_put_(self._index(), self._channels_last(), accumulate=True)
        return out

    def abs_sum(self, total: Tensor) -> Tensor:
        """``total`` (``(B, C, H, W)``) plus the sum over terms of the absolute coefficients."""
        _, sample, rows, cols = self._index()
        b, c, h, w = total.shape
        acc = total.new_zeros((b, h, w, c))  # fresh (in place, see `dense`)
        acc.index_put_((sample, rows, cols), self._channels_last().abs(), accumulate=True)
        return total + acc.permute(0, 3, 1, 2)

    def at(self, field: Tensor) -> Tensor:
        """A per-neuron ``(B, C, H, W)`` field read at every window entry: ``(k, B, C, Qh, Qw)`` (a view)."""
        _, sample, rows, cols = self._index()
        return field.permute(0, 2, 3, 1)[sample, rows, cols].permute(0, 1, 4, 2, 3)

    def scaled(self, factor: Tensor) -> LocalTerms:
        """Every coefficient times ``factor`` (``(B, C, H, W)``) at its neuron."""
        return LocalTerms(self.values * self.at(factor), self.top, self.left, self.height, self.width)

    def weighted(self, weights: Tensor) -> LocalTerms:
        """Every term times its own number, ``weights`` ``(k, B)``."""
        values = self.values * weights[:, :, None, None, None]
        return LocalTerms(values, self.top, self.left, self.height, self.width)

    def live(self) -> Tensor:
        """``(k, B)``: whether the term has a nonzero coefficient (NaN counts)."""
        return self.values.flatten(2).any(2)

    def abs_totals(self) -> Tensor:
        """``(k, B)``: the sum of the absolute coefficients of each term (DecorrelateMin's score)."""
        return self.values.abs().sum((2, 3, 4))

    # ----------------------------------------------------------------------------------------------
    # sums of branches

    @staticmethod
    def union(a: LocalTerms, b: LocalTerms, dest: Tensor, slots: int, b_live: Tensor) -> LocalTerms:
        """The terms of ``a`` in slots ``0 .. a.k - 1`` plus each term ``j`` of ``b`` in slot ``dest[j, s]``
        (``(b.k, B)``, as `term_ids.union_layout` gives) of a ``slots``-slot layout; a slot holding terms of
        both gets their sum, on a window covering both.

        ``b_live`` (``(b.k, B)`` bool) is False for ``b``'s empty slots (id `DEAD`, all zeros): they may be
        sent anywhere, so they must not stretch the window. The window size depends on where the windows
        lie, so it is read from the device (one wait); slots that get no term are windows at (0, 0).
        """
        k_a = a.k
        top, bottom = _hull(a.top, a.window[0], b.top, b.window[0], dest, slots, b_live)
        left, right = _hull(a.left, a.window[1], b.left, b.window[1], dest, slots, b_live)
        hull = torch.stack([(bottom - top).max(), (right - left).max()]) if slots else top.new_zeros(2)
        qh, qw = (max(int(v), a.window[i], b.window[i]) for i, v in enumerate(hull.tolist()))
        values, target = _zeros(a.values, slots, a.values.shape[1], a.values.shape[2], qh, qw)
        own = torch.arange(k_a, device=dest.device)[:, None].expand(k_a, dest.shape[1])
        _place(target, a, own, top, left)
        _place(target, b, dest, top, left)
        return LocalTerms(values, top, left, a.height, a.width)

    # ----------------------------------------------------------------------------------------------
    # convolution

    def conv2d(
        self, weight: Tensor, stride: tuple[int, int], padding: tuple[int, int], out_hw: tuple[int, int]
    ) -> LocalTerms:
        """The convolution (without bias) of every term; ``out_hw`` is the output map's size.

        Each window is convolved with the layer's stride after zero padding that makes its outputs exactly
        the map outputs the window reaches. That padding depends on the window's position modulo the
        stride, so with a stride above 1 the windows are first moved onto a common residue (grown by
        ``stride - 1``): one convolution then serves all of them.
        """
        terms = self._aligned(stride)
        k, b, c, qh, qw = terms.values.shape
        kh, kw = weight.shape[2], weight.shape[3]
        top, n_h, pad_h = _output_window(terms.top, qh, kh, stride[0], padding[0])
        left, n_w, pad_w = _output_window(terms.left, qw, kw, stride[1], padding[1])
        window = F.pad(terms.values.reshape(k * b, c, qh, qw), (*pad_w, *pad_h))
        out = F.conv2d(window, weight, None, stride)
        out = out.reshape(k, b, out.shape[1], n_h, n_w)
        # Window entries that fell outside the output map must hold zeros (they are not neurons). Always
        # multiplied, rather than checked first, so that nothing waits for the device.
        _, _, inside = LocalTerms(out, top, left, *out_hw)._rows_cols()
        return LocalTerms(out * inside[:, :, None].to(out.dtype), top, left, out_hw[0], out_hw[1])

    def _aligned(self, stride: tuple[int, int]) -> LocalTerms:
        """The same terms on windows whose top and left are multiples of the stride (``stride - 1``
        larger, each shifted by its own remainder)."""
        sh, sw = stride
        if (sh, sw) == (1, 1):
            return self
        top, left = self.top - self.top % sh, self.left - self.left % sw
        qh, qw = self.window
        k, b, c = self.values.shape[:3]
        values, target = _zeros(self.values, k, b, c, qh + sh - 1, qw + sw - 1)
        own = torch.arange(self.k, device=top.device)[:, None].expand_as(top)
        _place(target, self, own, top, left)
        return LocalTerms(values, top, left, self.height, self.width)


def _hull(
    start_a: Tensor, size_a: int, start_b: Tensor, size_b: int, dest: Tensor, slots: int, b_live: Tensor
) -> tuple[Tensor, Tensor]:
    """Per slot and sample, ``(start, end)`` of the interval covering the windows placed there (see
    `LocalTerms.union`); an empty slot gets ``(0, 0)``."""
    batch = start_a.shape[1]
    far = torch.iinfo(torch.int64).max // 4
    start = start_a.new_full((slots, batch), far)
    end = start_a.new_full((slots, batch), -far)
    start[: start_a.shape[0]] = start_a
    end[: start_a.shape[0]] = start_a + size_a
    start = start.scatter_reduce(0, dest, start_b.masked_fill(~b_live, far), "amin")
    end = end.scatter_reduce(0, dest, (start_b + size_b).masked_fill(~b_live, -far), "amax")
    empty = end < start
    return start.masked_fill(empty, 0), end.masked_fill(empty, 0)


def _zeros(like: Tensor, n: int, b: int, c: int, h: int, w: int) -> tuple[Tensor, Tensor]:
    """A fresh zero ``(n, B, C, H, W)`` tensor, and the same memory as ``(n, B, H, W, C)`` to write into.

    Channels-last memory for CPU float32, which oneDNN convolves in that layout; then the writes also go to
    the base tensor, not to a view, which autograd would replay by cloning the whole base. NCHW otherwise
    (the float64 and GPU convolutions want it).
    """
    if like.device.type == "cpu" and like.dtype == torch.float32:
        base = like.new_zeros((n, b, h, w, c))
        return base.permute(0, 1, 4, 2, 3), base
    base = like.new_zeros((n, b, c, h, w))
    return base, base.permute(0, 1, 3, 4, 2)


def _place(out: Tensor, terms: LocalTerms, slots: Tensor, top: Tensor, left: Tensor) -> None:
    """Adds every window of ``terms`` into ``out`` (``(n, B, Qh, Qw, C)``, windows at ``top, left``) at
    slot ``slots[t, s]``, shifted to where it lies in that slot's window. In place: ``out`` is fresh
    (see `_zeros`).

    Shifts are clamped into ``out``'s window: only empty (all-zero) terms, which `LocalTerms.union`
    leaves out of the window sizes, can need that, and they add nothing wherever they land.
    """
    _, b, _, qh, qw = terms.values.shape
    batch = torch.arange(b, device=slots.device)[None, :].expand_as(slots)
    dy = (terms.top - top[slots, batch]).clamp(0, out.shape[2] - qh)
    dx = (terms.left - left[slots, batch]).clamp(0, out.shape[3] - qw)
    rows = (dy[..., None] + torch.arange(qh, device=slots.device))[..., :, None]
    cols = (dx[..., None] + torch.arange(qw, device=slots.device))[..., None, :]
    index = (slots[..., None, None], batch[..., None, None], rows, cols)
    out.index_put_(index, terms._channels_last(), accumulate=True)


def _output_window(
    start: Tensor, size: int, kernel: int, stride: int, pad: int
) -> tuple[Tensor, int, tuple[int, int]]:
    """Along one axis, for input windows ``[start, start + size)`` with ``start`` a multiple of
    ``stride``: the first output index they reach ``(k, B)``, the number of outputs ``n``, and the
    (before, after) zero padding (negative: cropping) of the window for a convolution at ``stride``.

    Output ``i`` reads input ``i * stride - pad + a``, ``a < kernel``, so the window reaches outputs
    ``ceil((start + pad - kernel + 1) / stride)`` to ``floor((start + size - 1 + pad) / stride)``. With
    ``start = stride * j`` both are ``j`` plus a constant, so one padding fits every window: output
    ``first + o`` reads window row ``o * stride + first * stride - pad - start + a``.
    """
    first_0 = -((kernel - 1 - pad) // stride)  # ceil((pad - kernel + 1) / stride): start = 0
    n = (size - 1 + pad) // stride - first_0 + 1
    before = pad - first_0 * stride
    after = (n - 1) * stride + kernel - before - size
    return start // stride + first_0, n, (before, after)
