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


def _library() -> Loaded:
    loaded = load("box_kernels")
    if loaded.library is not None and not hasattr(loaded.library, "_daic_typed"):
        pointer, count, threads = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
        for suffix in _SUFFIX.values():
            getattr(loaded.library, f"box_relu_forward_{suffix}").argtypes = [pointer] * 4 + [count, threads]
            getattr(loaded.library, f"box_relu_backward_{suffix}").argtypes = [pointer] * 6 + [count, threads]
            getattr(loaded.library, f"add_signed_product_{suffix}").argtypes = [pointer, count] * 3 + [
                count,
                count,
                threads,
            ]
        loaded.library._daic_typed = True
    return loaded


def status() -> str:
    """Where the kernels were loaded from, or why they were not (for run records and benchmarks)."""
    loaded = _library()
    return ("loaded " if loaded.library is not None else "unavailable: ") + loaded.detail


def _dense(t: Tensor) -> bool:
    return t.is_contiguous() or (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last))


def _kernel(name: str, tensors: tuple[Tensor, ...]):
    """The kernel for these tensors, or None where they cannot be walked as one flat array each."""
    first = tensors[0]
    suffix = _SUFFIX.get(first.dtype)
    if suffix is None or first.device.type != "cpu" or first.numel() == 0 or not _dense(first):
        return None
    if any(t.dtype != first.dtype or t.device != first.device or t.shape != first.shape for t in tensors):
        return None
    if any(t.stride() != first.stride() for t in tensors):
        return None
    library = _library().library
    return None if library is None else getattr(library, f"{name}_{suffix}")


def _like(t: Tensor, layout: Tensor) -> Tensor:
    """`t` with the strides of `layout` (same shape), copied only if they differ."""
    if t.stride() == layout.stride() or t.shape != layout.shape or t.device != layout.device:
        return t
    return torch.empty_like(layout, dtype=t.dtype).copy_(t)


def _outputs(like: Tensor) -> tuple[Tensor, Tensor]:
    # empty_like keeps the strides of a dense tensor, so the outputs share the inputs' flat order.
    return torch.empty_like(like), torch.empty_like(like)


def _call(kernel, tensors: tuple[Tensor, ...]) -> None:
    pointers = [ctypes.c_void_p(t.data_ptr()) for t in tensors]
    kernel(*pointers, tensors[0].numel(), torch.get_num_threads())


def box_relu_forward(center: Tensor, radius: Tensor) -> tuple[Tensor, Tensor] | None:
    """The interval ReLU's ``(center', radius')`` (see `layers.activation._BoxReLU`), or None."""
    kernel = _kernel("box_relu_forward", (center, radius))
    if kernel is None:
        return None
    out = _outputs(center)
    _call(kernel, (center, radius, *out))
    return out


def box_relu_backward(
    grad_center: Tensor, grad_radius: Tensor, center: Tensor, radius: Tensor
) -> tuple[Tensor, Tensor] | None:
    """The gradients of the interval ReLU's inputs, from those of its outputs ``(center, radius)``.

    Incoming gradients in another layout (a linear layer's backward may hand over a transposed one) are
    first copied into the outputs' layout: one pass, where the composed ops would take seven mixed ones.
    """
    grad_center, grad_radius = (_like(g, center) for g in (grad_center, grad_radius))
    kernel = _kernel("box_relu_backward", (center, radius, grad_center, grad_radius))
    if kernel is None:
        return None
    out = _outputs(center)
    _call(kernel, (grad_center, grad_radius, center, radius, *out))
    return out


def add_signed_product_(grad: Tensor, weight: Tensor, product: Tensor) -> bool:
    """``grad += sign(weight) * product`` in place, for matrices whose rows are contiguous; False (and
    nothing done) where the kernel does not apply."""
    tensors = (grad, weight, product)
    if grad.dim() != 2 or any(t.shape != grad.shape or t.stride(1) != 1 for t in tensors):
        return False
    suffix = _SUFFIX.get(grad.dtype)
    if suffix is None or grad.device.type != "cpu" or grad.numel() == 0:
        return False
    if any(t.dtype != grad.dtype or t.device != grad.device for t in tensors):
        return False
    library = _library().library
    if library is None:
        return False
    arguments = []
    for t in tensors:
        arguments += [ctypes.c_void_p(t.data_ptr()), t.stride(0)]
    kernel = getattr(library, f"add_signed_product_{suffix}")
    kernel(*arguments, grad.shape[0], grad.shape[1], torch.get_num_threads())
    return True
