"""Fused CPU kernels for the elementwise hot spots of Box training and of back-substitution (see `build`
for how they are made).

A Box step is bound by memory traffic between its convolutions: the interval ReLU composed of ATen ops
reads and writes its tensors three times forward and seven times backward, where one pass each suffices,
and the Box linear layer's weight gradient makes a sign matrix as large as the weight to add one product.
Back-substitution (CROWN) likewise spends most of its time between its convolutions moving rows through
ReLU relaxations (seven passes over the rows) and bounding them over a box (four), and CROWN-IBP makes
each ReLU's relaxation from its interval bounds in seven passes and differentiates it in about fifteen.
These functions run one pass on CPU tensors whose layout they can walk, and return None (or False) for
anything else (another device or dtype, mixed layouts, a gradient to keep, no compiler), where the caller
keeps its ATen path. The Box kernels and the relaxation's lines give bitwise-equal results on finite
values, the back-substitution ones the same up to the order of a sum (tests/runtime/domains/test_native.py).
"""

from __future__ import annotations

import ctypes
from typing import Protocol

import torch
from torch import Tensor

from daic.runtime.native.build import Loaded, load

_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
_POINTER, _COUNT, _THREADS = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
_ARGUMENTS = {
    "box_kernels": {
        "box_relu_forward": [_POINTER] * 4 + [_COUNT, _THREADS],
        "box_relu_backward": [_POINTER] * 6 + [_COUNT, _THREADS],
        "add_signed_product": [_POINTER, _COUNT] * 3 + [_COUNT, _COUNT, _THREADS],
        "crown_relu_forward": [_POINTER] * 6 + [_COUNT, _THREADS],
        "crown_relu_backward": [_POINTER] * 6 + [_COUNT, _THREADS],
    },
    "linear_kernels": {
        "relaxed": [_POINTER, _POINTER, _COUNT, _COUNT, _POINTER, _POINTER, _COUNT, _POINTER, _POINTER]
        + [_COUNT] * 3
        + [_THREADS],
        "bound": [_POINTER] * 3 + [_COUNT, _POINTER] + [_COUNT] * 3 + [_THREADS],
        "relaxed_backward": [_POINTER, _POINTER, _COUNT] + [_POINTER] * 8 + [_COUNT] * 3 + [_THREADS],
        "bound_backward": [_POINTER] * 3 + [_COUNT] + [_POINTER] * 2 + [_COUNT] * 3 + [_THREADS],
        "patches_relaxed": [_POINTER] * 4 + [_COUNT] + [_POINTER] * 5 + [_THREADS],
        "patches_bound": [_POINTER] * 3 + [_COUNT] + [_POINTER] * 4 + [_THREADS],
    },
}
"""Each source's kernels and their C arguments (the source defines every one for each suffix of
`_SUFFIX`)."""


def _library(source: str = "box_kernels") -> Loaded:
    loaded = load(source)
    if loaded.library is not None and not hasattr(loaded.library, "_daic_typed"):
        for name, arguments in _ARGUMENTS[source].items():
            for suffix in _SUFFIX.values():
                getattr(loaded.library, f"{name}_{suffix}").argtypes = arguments
        loaded.library._daic_typed = True
    return loaded


def status() -> str:
    """Where the kernels were loaded from, or why they were not (for run records and benchmarks)."""
    loaded = _library()
    return ("loaded " if loaded.library is not None else "unavailable: ") + loaded.detail


def _function(name: str, like: Tensor, source: str = "box_kernels"):
    """The kernel `name` of `source` for tensors of `like`'s dtype and device, or None."""
    suffix = _SUFFIX.get(like.dtype)
    if suffix is None or like.device.type != "cpu":
        return None
    library = _library(source).library
    return None if library is None else getattr(library, f"{name}_{suffix}")


def _walkable(tensors: tuple[Tensor, ...]) -> bool:
    """Whether the tensors can be walked as flat arrays in one common order: non-empty, dense, and alike
    in dtype, device, shape and strides."""
    first = tensors[0]
    if first.numel() == 0:
        return False
    dense = first.is_contiguous() or (
        first.dim() == 4 and first.is_contiguous(memory_format=torch.channels_last)
    )
    key = (first.dtype, first.device, first.shape, first.stride())
    return dense and all((t.dtype, t.device, t.shape, t.stride()) == key for t in tensors)


def _like(t: Tensor, layout: Tensor) -> Tensor:
    """`t` with the strides of `layout` (same shape), copied only if they differ."""
    if t.stride() == layout.stride() or t.shape != layout.shape or t.device != layout.device:
        return t
    return torch.empty_like(layout, dtype=t.dtype).copy_(t)


def _run_flat(
    kernel, tensors: tuple[Tensor, ...], like: Tensor, outputs: tuple[torch.dtype | None, ...] = (None, None)
) -> tuple[Tensor, ...]:
    """Runs `kernel` on `tensors` and new outputs shaped and strided like `like`, one per entry of
    `outputs` (its dtype; None: `like`'s). empty_like keeps the strides of a dense tensor, so the outputs
    share the inputs' flat order."""
    out = tuple(torch.empty_like(like, dtype=dtype) for dtype in outputs)
    pointers = [ctypes.c_void_p(t.data_ptr()) for t in (*tensors, *out)]
    kernel(*pointers, like.numel(), torch.get_num_threads())
    return out


def _flat_kernel(name: str, *tensors: Tensor):
    """The elementwise kernel `name` for these tensors when it can walk them (alike in layout, on the CPU),
    else None."""
    return _function(name, tensors[0]) if _walkable(tensors) else None


def walks(name: str, *tensors: Tensor) -> bool:
    """Whether the elementwise kernel `name` runs on these tensors (alike in layout, on the CPU)."""
    return _flat_kernel(name, *tensors) is not None


def _backward_flat(name: str, saved: tuple[Tensor, ...], incoming: tuple[Tensor, ...]):
    """The backward kernel `name` and the `incoming` gradients in the layout of the `saved` tensors, or None.

    Incoming gradients in another layout (a linear layer's backward may hand over a transposed one) are
    first copied into the saved tensors' layout: one pass, where the composed ops would take several mixed
    ones."""
    kernel = _flat_kernel(name, *saved)
    if kernel is None:
        return None
    grads = tuple(_like(g, saved[0]) for g in incoming)
    return (kernel, grads) if _walkable((saved[0], *grads)) else None


def box_relu_forward(center: Tensor, radius: Tensor) -> tuple[Tensor, Tensor] | None:
    """The interval ReLU's ``(center', radius')`` (see `layers.activation._BoxReLU`), or None."""
    kernel = _flat_kernel("box_relu_forward", center, radius)
    return None if kernel is None else _run_flat(kernel, (center, radius), center)


def box_relu_backward(
    grad_center: Tensor, grad_radius: Tensor, center: Tensor, radius: Tensor
) -> tuple[Tensor, Tensor] | None:
    """The gradients of the interval ReLU's inputs, from those of its outputs ``(center, radius)``."""
    found = _backward_flat("box_relu_backward", (center, radius), (grad_center, grad_radius))
    return None if found is None else _run_flat(found[0], (*found[1], center, radius), center)


def crown_relu_forward(lower: Tensor, upper: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor] | None:
    """CROWN's relaxation of relu on ``[lower, upper]`` without outward rounding: ``(ls, us, ub, exact)``
    as `layers.activation.crown_relaxation` gives it (``exact`` boolean), or None."""
    kernel = _flat_kernel("crown_relu_forward", lower, upper)
    if kernel is None:
        return None
    return _run_flat(kernel, (lower, upper), lower, (None, None, None, torch.bool))


def crown_relu_backward(
    lower: Tensor, upper: Tensor, grad_us: Tensor, grad_ub: Tensor
) -> tuple[Tensor, Tensor] | None:
    """The gradients of ``lower`` and ``upper`` from those of the relaxation's ``us`` and ``ub``, or None."""
    found = _backward_flat("crown_relu_backward", (lower, upper), (grad_us, grad_ub))
    return None if found is None else _run_flat(found[0], (lower, upper, *found[1]), lower)


def add_signed_product_(grad: Tensor, weight: Tensor, product: Tensor) -> bool:
    """``grad += sign(weight) * product`` in place, for matrices whose rows are contiguous; False (and
    nothing done) where the kernel does not apply."""
    tensors = (grad, weight, product)
    if grad.dim() != 2 or grad.numel() == 0:
        return False
    if any(
        (t.shape, t.stride(1), t.dtype, t.device) != (grad.shape, 1, grad.dtype, grad.device) for t in tensors
    ):
        return False
    kernel = _function("add_signed_product", grad)
    if kernel is None:
        return False
    arguments = []
    for t in tensors:
        arguments += [ctypes.c_void_p(t.data_ptr()), t.stride(0)]
    kernel(*arguments, grad.shape[0], grad.shape[1], torch.get_num_threads())
    return True


def has(name: str, like: Tensor) -> bool:
    """Whether the back-substitution kernel `name` runs for tensors like `like`."""
    return _function(name, like, "linear_kernels") is not None


def _feature_order(t: Tensor, lead: int) -> tuple[int, ...] | None:
    """The strides of `t`'s feature dimensions (those after the first `lead`) when they are dense in the
    standard or the channels-last order and each leading index steps over whole feature blocks; else
    None. Rows and maps with the same order hold their neurons in the same order."""
    features = t.shape[lead:]
    dense = [1] * len(features)
    for d in range(len(features) - 2, -1, -1):
        dense[d] = dense[d + 1] * features[d + 1]
    orders = [tuple(dense)]
    if len(features) == 3:
        orders.append((1, features[2] * features[0], features[0]))
    strides = t.stride()[lead:]
    if strides not in orders and features.numel() > 1:
        return None
    step = features.numel()
    for d in range(lead - 1, -1, -1):
        if t.shape[d] != 1 and t.stride(d) != step:
            return None
        step *= t.shape[d]
    return orders[0] if features.numel() == 1 else strides


def _rows_and_maps(A: Tensor, *maps: Tensor) -> tuple[int, int, int, list[int]] | None:
    """``(G, S, N, group strides)`` when ``A`` (``(G, S, *F)``) and the neuron maps (each ``(G or 1,
    *F)``) can be walked by the kernels: one dtype, on the CPU, dense with their neurons in one order
    (standard or channels-last); else None. A map's group stride is 0 when it is shared."""
    if A.dim() < 3 or A.numel() == 0:
        return None
    order = _feature_order(A, 2)
    if order is None:
        return None
    groups, rows, n = A.shape[0], A.shape[1], A[0, 0].numel()
    strides = []
    for m in maps:
        if m.dtype != A.dtype or m.device != A.device or m.shape[1:] != A.shape[2:]:
            return None
        if m.shape[0] not in (1, groups) or _feature_order(m, 1) != order:
            return None
        strides.append(n if m.shape[0] == groups and groups > 1 else 0)
    return groups, rows, n, strides


def _pointer(t: Tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr())


def _needs_grad(*tensors: Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def relaxed(
    A: Tensor, lower_slope: Tensor, upper_slope: Tensor, upper_bias: Tensor
) -> tuple[Tensor, Tensor] | None:
    """Rows ``A`` (``(G, S, *F)``) through the relaxation ``ls x <= f(x) <= us x + ub`` for lower bounds:
    ``(A+ ls + A- us, sum A- ub)``; ``lower_slope`` may be per row (``(G, S, *F)``, then laid out like
    ``A``). None where the kernel does not apply (see `_rows_and_maps`), or with a gradient to keep."""
    per_row = lower_slope.dim() == A.dim()
    kernel = _function("relaxed", A, "linear_kernels")
    if kernel is None or _needs_grad(A, lower_slope, upper_slope, upper_bias):
        return None
    layout = _rows_and_maps(A, upper_slope, upper_bias, *(() if per_row else (lower_slope,)))
    if layout is None or (per_row and (lower_slope.shape, lower_slope.stride()) != (A.shape, A.stride())):
        return None
    groups, rows, n, strides = layout
    ls_group, ls_row = (rows * n, n) if per_row else (strides[2], 0)
    out = torch.empty_like(A)  # empty_like keeps A's strides: its neurons in the same order
    bias = A.new_empty((groups, rows))
    kernel(
        _pointer(A), _pointer(lower_slope), ls_group, ls_row, _pointer(upper_slope), _pointer(upper_bias),
        strides[0], _pointer(out), _pointer(bias), groups, rows, n, torch.get_num_threads(),
    )  # fmt: skip
    return out, bias


def relaxed_backward(
    A: Tensor, ls: Tensor, us: Tensor, ub: Tensor, grad_out: Tensor, grad_bias: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor] | None:
    """The gradients of `relaxed` in ``A`` and the three maps. The maps must be per group (each group's
    map gradients are summed on one thread) and the gradient laid out like ``A``; None otherwise."""
    kernel = _function("relaxed_backward", A, "linear_kernels")
    if kernel is None or not grad_bias.is_contiguous() or grad_out.stride() != A.stride():
        return None
    per_row = ls.shape == A.shape
    layout = _rows_and_maps(A, us, ub, *(() if per_row else (ls,)))
    if layout is None or (0 in layout[3] and A.shape[0] > 1) or (per_row and ls.stride() != A.stride()):
        return None
    groups, rows, n, _ = layout
    grads = torch.empty_like(A), torch.empty_like(ls), torch.empty_like(us), torch.empty_like(ub)
    kernel(
        _pointer(A), _pointer(ls), n if per_row else 0, _pointer(us), _pointer(ub), _pointer(grad_out),
        _pointer(grad_bias), *(_pointer(g) for g in grads), groups, rows, n, torch.get_num_threads(),
    )  # fmt: skip
    return grads


def bound(A: Tensor, center: Tensor, radius: Tensor) -> Tensor | None:
    """``(G, S)``: ``sum A c - |A| r`` for rows ``A`` (``(G, S, *F)``) over the box ``c +- r``; or None."""
    kernel = _function("bound", A, "linear_kernels")
    if kernel is None or _needs_grad(A, center, radius):
        return None
    layout = _rows_and_maps(A, center, radius)
    if layout is None or layout[3][0] != layout[3][1]:
        return None
    groups, rows, n, strides = layout
    out = A.new_empty((groups, rows))
    maps = (_pointer(A), _pointer(center), _pointer(radius), strides[0], _pointer(out))
    kernel(*maps, groups, rows, n, torch.get_num_threads())
    return out


def bound_backward(A: Tensor, center: Tensor, radius: Tensor, grad: Tensor) -> Tensor | None:
    """The gradient of `bound` in ``A``: ``grad (c - sign(A) r)``; None where the kernel does not apply."""
    kernel = _function("bound_backward", A, "linear_kernels")
    layout = _rows_and_maps(A, center, radius)
    if kernel is None or layout is None or layout[3][0] != layout[3][1] or not grad.is_contiguous():
        return None
    groups, rows, n, strides = layout
    out = torch.empty_like(A)
    maps = (_pointer(A), _pointer(center), _pointer(radius), strides[0], _pointer(grad), _pointer(out))
    kernel(*maps, groups, rows, n, torch.get_num_threads())
    return out


class WindowedRows(Protocol):
    """Rows kept as windows of a map (`coeffs.Patches`): what the window kernels read of them."""

    P: Tensor
    image: Tensor
    position: Tensor
    grid: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    map_hw: tuple[int, int]


def patches_relaxed(
    rows: WindowedRows, lower_slope: Tensor, upper_slope: Tensor, upper_bias: Tensor
) -> tuple[Tensor, Tensor] | None:
    """The windowed rows through the relaxation ``ls x <= f(x) <= us x + ub`` (maps ``(B or 1, C, H, W)`` or
    broadcast over H and W): ``(P+ ls + P- us, sum P- ub)`` over each row's window, the constant
    ``(R, 1)``; None where the kernel does not apply."""
    P = rows.P
    outputs = (torch.empty_like(P), P.new_empty((P.shape[0], 1)))
    ran = _run_windows("patches_relaxed", rows, (lower_slope, upper_slope, upper_bias), outputs)
    return outputs if ran else None


def patches_bound(rows: WindowedRows, centre: Tensor, radius: Tensor) -> Tensor | None:
    """``(R, 1)``: the least value of each windowed row over the box ``centre +- radius`` (maps as
    `patches_relaxed`'s); None where the kernel does not apply."""
    out = rows.P.new_empty((rows.P.shape[0], 1))
    return out if _run_windows("patches_bound", rows, (centre, radius), (out,)) else None


def _run_windows(
    name: str, rows: WindowedRows, maps: tuple[Tensor, ...], outputs: tuple[Tensor, ...]
) -> bool:
    """Runs the window kernel `name` into `outputs`; False (nothing written) where it does not apply: a
    gradient to keep, another dtype or device, rows not contiguous, maps of other channels. The maps are
    handed over whole and contiguous: a broadcast one is copied, a map's size where the composed ops
    would copy a window's for every row."""
    P = rows.P
    kernel = _function(name, P, "linear_kernels")
    if kernel is None or P.dim() != 4 or P.numel() == 0 or not P.is_contiguous() or _needs_grad(P, *maps):
        return False
    if any(
        m.dim() != 4 or m.shape[1] != P.shape[1] or (m.dtype, m.device) != (P.dtype, P.device) for m in maps
    ):
        return False
    if any(m.shape[2] not in (1, rows.map_hw[0]) or m.shape[3] not in (1, rows.map_hw[1]) for m in maps):
        return False
    if any(i.dtype != torch.int64 or i.device != P.device for i in (rows.image, rows.position)):
        return False
    batch = max(m.shape[0] for m in maps)
    whole = [m.expand(batch, m.shape[1], *rows.map_hw).contiguous() for m in maps]
    image, position = rows.image.contiguous(), rows.position.contiguous()
    c, (h, w) = P.shape[1], rows.map_hw
    # CPU: the kernel reads the shapes through a host pointer, as it reads the CPU tensors it walks
    shape = torch.tensor(
        [P.shape[0], c, P.shape[2], P.shape[3], h, w, rows.grid[1], *rows.stride, *rows.padding]
    )
    map_image = c * h * w if batch > 1 else 0
    pointers = (
        [_pointer(t) for t in (P, *whole)] + [map_image] + [_pointer(t) for t in (image, position, shape)]
    )
    kernel(*pointers, *(_pointer(t) for t in outputs), torch.get_num_threads())
    return True
