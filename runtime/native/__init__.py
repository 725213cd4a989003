"""Fused CPU kernels for the elementwise hot spots of Box training (see `build` for how they are made).

A Box step is bound by memory traffic between its convolutions: the interval ReLU composed of ATen ops
reads and writes its tensors three times forward and seven times backward, where one pass each suffices,
and the Box linear layer's weight gradient makes a sign matrix as large as the weight to add one product.
These functions run one pass on CPU tensors whose layout they can walk, and return None (or False) for
anything else (another device or dtype, mixed layouts, no compiler), where the caller keeps its ATen path.
Both paths give bitwise-equal results on finite values (tests/runtime/test_native.py).
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from .build import Loaded, load

_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
_POINTER, _COUNT, _THREADS = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
_ARGUMENTS = {
    "box_relu_forward": [_POINTER] * 4 + [_COUNT, _THREADS],
    "box_relu_backward": [_POINTER] * 6 + [_COUNT, _THREADS],
    "add_signed_product": [_POINTER, _COUNT] * 3 + [_COUNT, _COUNT, _THREADS],
}
"""Each kernel's C arguments (box_kernels.c defines every one for each suffix of `_SUFFIX`)."""


def _library() -> Loaded:
    loaded = load("box_kernels")
    if loaded.library is not None and not hasattr(loaded.library, "_daic_typed"):
        for name, arguments in _ARGUMENTS.items():
            for suffix in _SUFFIX.values():
                getattr(loaded.library, f"{name}_{suffix}").argtypes = arguments
        loaded.library._daic_typed = True
    return loaded


def status() -> str:
    """Where the kernels were loaded from, or why they were not (for run records and benchmarks)."""
    loaded = _library()
    return ("loaded " if loaded.library is not None else "unavailable: ") + loaded.detail


def _function(name: str, like: Tensor):
    """The kernel `name` for tensors of `like`'s dtype and device, or None."""
    suffix = _SUFFIX.get(like.dtype)
    if suffix is None or like.device.type != "cpu":
        return None
    library = _library().library
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


def _run_flat(kernel, tensors: tuple[Tensor, ...], like: Tensor) -> tuple[Tensor, Tensor]:
    """Runs `kernel` on `tensors` and two new outputs shaped and strided like `like` (empty_like keeps
    the strides of a dense tensor, so the outputs share the inputs' flat order)."""
    out = torch.empty_like(like), torch.empty_like(like)
    pointers = [ctypes.c_void_p(t.data_ptr()) for t in (*tensors, *out)]
    kernel(*pointers, like.numel(), torch.get_num_threads())
    return out


def box_relu_forward(center: Tensor, radius: Tensor) -> tuple[Tensor, Tensor] | None:
    """The interval ReLU's ``(center', radius')`` (see `layers.activation._BoxReLU`), or None."""
    kernel = _function("box_relu_forward", center) if _walkable((center, radius)) else None
    return None if kernel is None else _run_flat(kernel, (center, radius), center)


def box_relu_backward(
    grad_center: Tensor, grad_radius: Tensor, center: Tensor, radius: Tensor
) -> tuple[Tensor, Tensor] | None:
    """The gradients of the interval ReLU's inputs, from those of its outputs ``(center, radius)``.

    Incoming gradients in another layout (a linear layer's backward may hand over a transposed one) are
    first copied into the outputs' layout: one pass, where the composed ops would take seven mixed ones.
    """
    kernel = _function("box_relu_backward", center) if _walkable((center, radius)) else None
    if kernel is None:
        return None
    grads = (_like(grad_center, center), _like(grad_radius, center))
    if not _walkable((center, *grads)):
        return None
    return _run_flat(kernel, (*grads, center, radius), center)


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
