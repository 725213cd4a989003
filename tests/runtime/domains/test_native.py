"""The fused native kernels: bitwise equal to the composed ATen ops, used only where they apply, and a
clean fallback (with its reason) where they cannot be built."""

from __future__ import annotations

import copy

import pytest
import torch

from daic.runtime import AbstractContext, Box, ReLU, native
from daic.runtime.domains.rounding import outward_rounding
from daic.runtime.layers.activation import _BoxReLU, _CrownReLU, crown_relaxation
from daic.runtime.native import build

pytestmark = pytest.mark.skipif(
    build.load("box_kernels").library is None, reason=f"native kernels: {native.status()}"
)


def aten_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "box_relu_forward", lambda *args: None)
    monkeypatch.setattr(native, "box_relu_backward", lambda *args: None)


def relu_with_grads(
    center: torch.Tensor, radius: torch.Tensor, cotangents: tuple[torch.Tensor, torch.Tensor]
):
    center = center.detach().clone().requires_grad_()
    radius = radius.detach().clone().requires_grad_()
    out = _BoxReLU.apply(center, radius)
    torch.autograd.backward(out, cotangents)
    return out[0].detach(), out[1].detach(), center.grad, radius.grad


def boxes_with_every_case(shape, dtype, layout, seed: int = 0):
    """Centers and radii where neurons are active, crossing and dead, with exact ties (``c = r``,
    ``c = -r``, ``r = 0``, zeros) among them, and cotangents for both outputs."""
    g = torch.Generator().manual_seed(seed)
    center = torch.randn(shape, generator=g, dtype=dtype)
    radius = torch.rand(shape, generator=g, dtype=dtype)
    flat_c, flat_r = center.view(-1), radius.view(-1)
    n = flat_c.numel()
    flat_r[: n // 8] = 0
    flat_c[n // 8 : n // 4] = flat_r[n // 8 : n // 4]
    flat_c[n // 4 : 3 * n // 8] = -flat_r[n // 4 : 3 * n // 8]
    flat_c[3 * n // 8 : n // 2] = 0
    cotangents = (torch.randn(shape, generator=g, dtype=dtype), torch.randn(shape, generator=g, dtype=dtype))
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    return [t.contiguous(memory_format=fmt) for t in (center, radius, *cotangents)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "shape,layout",
    [
        ((3, 50), "contiguous"),
        ((2, 5, 7, 9), "contiguous"),
        ((2, 5, 7, 9), "channels_last"),
        ((4, 16, 32, 32), "channels_last"),
    ],  # the last one is large enough to run on several threads
)
def test_fused_box_relu_is_bitwise_the_aten_one(monkeypatch, dtype, shape, layout):
    center, radius, *cotangents = boxes_with_every_case(shape, dtype, layout)
    assert native.box_relu_forward(center, radius) is not None
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the kernels split large tensors among the threads torch uses
    try:
        fused = relu_with_grads(center, radius, tuple(cotangents))
    finally:
        torch.set_num_threads(threads)
    aten_only(monkeypatch)
    composed = relu_with_grads(center, radius, tuple(cotangents))
    for a, b in zip(fused, composed, strict=True):
        assert a.stride() == b.stride() or a.is_contiguous() == b.is_contiguous()
        assert torch.equal(a, b)


def test_fused_box_relu_values_by_case():
    # active (c - r > 0), crossing, dead, and the ties between them
    center = torch.tensor([[3.0, 1.0, -3.0, 2.0, -2.0, 0.0]])
    radius = torch.tensor([[1.0, 2.0, 1.0, 2.0, 2.0, 0.0]])
    new_center, new_radius = native.box_relu_forward(center, radius)
    # bounds: [2, 4] -> [2, 4]; [-1, 3] -> [0, 3]; [-4, -2] -> 0; [0, 4] -> [0, 4]; [-4, 0] -> 0; 0 -> 0
    assert new_center.tolist() == [[3.0, 1.5, 0.0, 2.0, 0.0, 0.0]]
    assert new_radius.tolist() == [[1.0, 1.5, 0.0, 2.0, 0.0, 0.0]]
    grad_c, grad_r = native.box_relu_backward(
        torch.full_like(center, 4.0), torch.full_like(center, 2.0), new_center, new_radius
    )
    # active: passed through; crossing (and the tie l = 0): both get (4 + 2) / 2; dead: nothing
    assert grad_c.tolist() == [[4.0, 3.0, 0.0, 3.0, 0.0, 0.0]]
    assert grad_r.tolist() == [[2.0, 3.0, 0.0, 3.0, 0.0, 0.0]]


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: (torch.randn(4, 6).t(), torch.rand(4, 6).t()), id="transposed"),
        pytest.param(lambda: (torch.randn(4, 6), torch.rand(6, 4).t()), id="mixed strides"),
        pytest.param(lambda: (torch.randn(4, 6).half(), torch.rand(4, 6).half()), id="float16"),
        pytest.param(lambda: (torch.randn(4, 6), torch.rand(4, 6).double()), id="mixed dtypes"),
        pytest.param(lambda: (torch.randn(0, 6), torch.rand(0, 6)), id="empty"),
    ],
)
def test_tensors_the_kernels_cannot_walk_are_left_to_aten(make):
    center, radius = make()
    assert native.box_relu_forward(center, radius) is None
    assert native.box_relu_backward(center, radius, center, radius) is None


def test_the_relu_of_mixed_layouts_is_still_right():
    center, radius = torch.randn(4, 6), torch.rand(6, 4).t()
    lower, upper = ReLU().abstract(Box(center, radius), AbstractContext()).bounds()
    torch.testing.assert_close(lower, torch.relu(center - radius))
    torch.testing.assert_close(upper, torch.relu(center + radius))


def test_gradcheck_through_the_fused_relu():
    g = torch.Generator().manual_seed(3)
    center = torch.randn((3, 20), generator=g, dtype=torch.float64, requires_grad=True)
    radius = torch.rand((3, 20), generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_BoxReLU.apply, (center, radius))


def composed_relaxation(monkeypatch: pytest.MonkeyPatch, lower: torch.Tensor, upper: torch.Tensor):
    """`crown_relaxation` as the composed ATen ops compute it, and the gradients of ``(us, ub)``."""
    with monkeypatch.context() as patched:
        patched.setattr(native, "walks", lambda *args: False)
        return relaxation_with_grads(lower, upper)


def relaxation_with_grads(lower: torch.Tensor, upper: torch.Tensor, seed: int = 1):
    lower, upper = (t.detach().clone().requires_grad_() for t in (lower, upper))
    ls, us, ub, exact = crown_relaxation(lower, upper)
    g = torch.Generator().manual_seed(seed)
    cotangents = [torch.randn(lower.shape, generator=g, dtype=lower.dtype) for _ in range(2)]
    torch.autograd.backward((us, ub), cotangents)
    return (ls, us.detach(), ub.detach(), exact), (lower.grad, upper.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "shape,layout",
    [((3, 50), "contiguous"), ((2, 5, 7, 9), "channels_last"), ((4, 16, 32, 32), "contiguous")],
)
def test_fused_crown_relaxation_is_the_aten_one(monkeypatch, dtype, shape, layout):
    center, radius, *_ = boxes_with_every_case(shape, dtype, layout)
    lower, upper = center - radius, center + radius
    assert native.walks("crown_relu_forward", lower, upper)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # large maps run on several threads
    try:
        lines, grads = relaxation_with_grads(lower, upper)
    finally:
        torch.set_num_threads(threads)
    composed_lines, composed_grads = composed_relaxation(monkeypatch, lower, upper)
    for fused, composed in zip(lines, composed_lines, strict=True):
        assert fused.stride() == composed.stride()
        assert torch.equal(fused, composed)
    unstable = ~lines[3]
    assert 0 < int(unstable.sum()) < unstable.numel()
    tolerance = 1e-5 if dtype == torch.float32 else 1e-12
    for fused, composed in zip(grads, composed_grads, strict=True):
        torch.testing.assert_close(fused[unstable], composed[unstable], rtol=tolerance, atol=tolerance)
        # A stable neuron's lines are constants, so their gradient is exactly 0. The composed ops' is no
        # reference there: it depends on torch's version (0 up to the rounding of u / u on 2.11; up to 1.7e4
        # on these maps on 2.5, where the ties l = 0 and u = 0 sit on clamp's bounds).
        assert not fused[~unstable].any()


def test_fused_crown_relaxation_by_case():
    # active, unstable with u > -l (lower slope 1) and u < -l (0), dead, and the ties l = 0 and u = 0
    lower = torch.tensor([[2.0, -1.0, -3.0, -4.0, 0.0, -4.0]], requires_grad=True)
    upper = torch.tensor([[4.0, 3.0, 1.0, -2.0, 4.0, 0.0]], requires_grad=True)
    ls, us, ub, exact = _CrownReLU.apply(lower, upper)
    assert ls.tolist() == [[1.0, 1.0, 0.0, 0.0, 1.0, 0.0]]
    assert us.tolist() == [[1.0, 0.75, 0.25, 0.0, 1.0, 0.0]]
    assert ub.tolist() == [[0.0, 0.75, 0.75, 0.0, 0.0, 0.0]]
    assert exact.tolist() == [[True, False, False, True, True, True]]
    us.sum().backward()
    # d us / d l = u / (u - l)^2 and d us / d u = -l / (u - l)^2 where unstable, else 0
    assert lower.grad.tolist() == [[0.0, 3 / 16, 1 / 16, 0.0, 0.0, 0.0]]
    assert upper.grad.tolist() == [[0.0, 1 / 16, 3 / 16, 0.0, 0.0, 0.0]]


@pytest.mark.parametrize("path", ["fused", "composed", "outward"])
def test_an_active_neuron_of_subnormal_bounds_keeps_relu_as_its_upper_line(monkeypatch, path):
    # A width clamped to the smallest normal made us = u / tiny < 1: an upper line below relu on [l, u].
    tiny = torch.finfo(torch.float64).tiny
    lower = torch.tensor([[1e-310, 0.0, -1e-310]], dtype=torch.float64)
    upper = torch.tensor([[3e-310, 0.0, 2e-310]], dtype=torch.float64)
    if path == "composed":
        monkeypatch.setattr(native, "walks", lambda *args: False)
    with outward_rounding(path == "outward"):
        ls, us, ub, exact = crown_relaxation(lower, upper)
    assert us[0, :2].tolist() == [1.0, 0.0] and ls[0, :2].tolist() == [1.0, 1.0]  # l >= 0: slope 1 below
    assert exact.tolist() == [[True, True, False]]
    assert float(us[0, 2]) == pytest.approx(2 / 3)  # the unstable one's chord, its width subnormal
    if path == "outward":  # its intercept raised past -l us by the rounding's room
        assert float(ub[0, 2]) >= float(-lower[0, 2] * us[0, 2]) and float(ub[0, 2]) > tiny
    else:
        assert ub[0, :2].tolist() == [0.0, 0.0]


def test_fused_crown_relaxation_passes_a_nan_bound_on_to_its_gradient():
    lower = torch.tensor([[float("nan"), -1.0]], requires_grad=True)
    upper = torch.tensor([[1.0, 3.0]], requires_grad=True)
    _, us, ub, _ = _CrownReLU.apply(lower, upper)
    (us + ub).sum().backward()
    assert torch.isnan(lower.grad[0, 0]) and torch.isnan(upper.grad[0, 0])
    assert lower.grad[0, 1].item() == pytest.approx(3 / 16 - 0.75 * 3 / 4)


def test_gradcheck_through_the_fused_crown_relaxation():
    g = torch.Generator().manual_seed(5)
    center = torch.randn((3, 20), generator=g, dtype=torch.float64)
    radius = torch.rand((3, 20), generator=g, dtype=torch.float64) + 0.1
    lower, upper = (t.detach().requires_grad_() for t in (center - radius, center + radius))
    assert torch.autograd.gradcheck(lambda low, up: _CrownReLU.apply(low, up)[1:3], (lower, upper))


def test_outward_rounding_keeps_the_composed_relaxation(monkeypatch):
    # The kernel computes the relaxation in rounding to nearest; certification raises the intercepts.
    center, radius, *_ = boxes_with_every_case((2, 40), torch.float64, "contiguous")
    lower, upper = center - radius, center + radius
    with outward_rounding():
        rounded = crown_relaxation(lower, upper)
    nearest = crown_relaxation(lower, upper)
    unstable = ~nearest[3]
    assert bool((rounded[2][unstable] > nearest[2][unstable]).all())
    assert torch.equal(rounded[1], nearest[1])


def test_without_a_compiler_the_loader_says_why(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "find_compiler", lambda: None)
    build.load.cache_clear()
    try:
        loaded = build.load("box_kernels")
        assert loaded.library is None and loaded.detail == "no C compiler found (set CC)"
        assert native.status() == "unavailable: no C compiler found (set CC)"
        assert native.box_relu_forward(torch.randn(2, 3), torch.rand(2, 3)) is None
    finally:
        build.load.cache_clear()


def test_a_broken_compiler_is_reported_and_nothing_is_left_in_the_cache(monkeypatch, tmp_path):
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\necho 'cc: error: no such flag' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    monkeypatch.setenv("DAIC_CACHE_DIR", str(tmp_path / "cache"))
    build.load.cache_clear()
    try:
        loaded = build.load("box_kernels")
        assert loaded.library is None
        assert loaded.detail.startswith(f"could not build box_kernels.c with {fake}: ")
        assert loaded.detail.count("cc: error: no such flag") == len(build.FLAG_SETS)
        assert list((tmp_path / "cache" / "kernels").iterdir()) == []  # no temporary left behind
    finally:
        build.load.cache_clear()


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv("DAIC_NATIVE", "0")
    build.load.cache_clear()
    try:
        assert native.status() == "unavailable: disabled by DAIC_NATIVE=0"
    finally:
        build.load.cache_clear()


def test_a_fresh_cache_builds_once_and_reuses_the_library(monkeypatch, tmp_path):
    monkeypatch.setenv("DAIC_CACHE_DIR", str(tmp_path))
    build.load.cache_clear()
    try:
        first = build.load("box_kernels")
        assert first.library is not None and str(tmp_path) in first.detail
        built = sorted(p.name for p in (tmp_path / "kernels").iterdir())
        assert len(built) == 1 and built[0].startswith("box_kernels-") and built[0].endswith(".so")
        build.load.cache_clear()
        monkeypatch.setattr(build, "_build", lambda *args: pytest.fail("rebuilt a cached library"))
        assert build.load("box_kernels").library is not None
    finally:
        build.load.cache_clear()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_signed_product_is_bitwise_addcmul_with_the_sign(dtype):
    g = torch.Generator().manual_seed(5)
    grad = torch.randn((40, 30), generator=g, dtype=dtype)
    weight = torch.randn((40, 50), generator=g, dtype=dtype)[:, 10:40]  # rows 50 apart, as a column block
    weight[::7] = 0  # sign 0: the product is left out
    product = torch.randn((40, 30), generator=g, dtype=dtype)
    expected = grad.clone().addcmul_(torch.sign(weight), product)
    assert native.add_signed_product_(grad, weight, product)
    assert torch.equal(grad, expected)


def test_signed_product_refuses_what_it_cannot_walk():
    grad, weight, product = torch.zeros(3, 4), torch.randn(4, 3).t(), torch.randn(3, 4)  # columns apart
    assert not native.add_signed_product_(grad, weight, product)
    assert torch.equal(grad, torch.zeros(3, 4))
    assert not native.add_signed_product_(torch.zeros(3, 4), torch.randn(3, 4).double(), torch.randn(3, 4))


# --------------------------------------------------------------------------------------------------
# back-substitution kernels


def aten_relaxation(A, ls, us, ub):
    """The composed ops of `Dense.relaxed` and `Dense.bound` (what the kernels replace)."""
    ls = ls if ls.dim() == A.dim() else ls.unsqueeze(1)
    positive, negative = A.clamp(min=0), A.clamp(max=0)
    return positive * ls + negative * us.unsqueeze(1), (negative * ub.unsqueeze(1)).flatten(2).sum(2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("per_row", [False, True])
@pytest.mark.parametrize("features", [(7,), (4, 6, 6), (16, 32, 32)])  # the last runs on several threads
def test_fused_relaxation_and_bound_agree_with_aten(dtype, groups, per_row, features):
    from daic.runtime.domains.coeffs import Dense

    g = torch.Generator().manual_seed(groups)
    A = torch.randn((groups, 5, *features), generator=g, dtype=dtype)
    A.view(-1)[::7] = 0
    ls = torch.rand((groups, 5, *features) if per_row else (groups, *features), generator=g, dtype=dtype)
    us, ub = (torch.rand((groups, *features), generator=g, dtype=dtype) for _ in range(2))
    fused = native.relaxed(A, ls, us, ub)
    assert fused is not None
    expected = aten_relaxation(A, ls, us, ub)
    assert torch.equal(fused[0], expected[0])  # elementwise: the same operations
    torch.testing.assert_close(fused[1], expected[1])  # a sum in another order
    center, radius = torch.randn((groups, *features), generator=g, dtype=dtype), us
    bounded = native.bound(A, center, radius)
    expected_bound = (A * center.unsqueeze(1)).flatten(2).sum(2) - (A.abs() * radius.unsqueeze(1)).flatten(
        2
    ).sum(2)
    torch.testing.assert_close(bounded, expected_bound)
    # Through the coefficients' own methods: the same numbers with the kernels as without.
    rows = Dense(A)
    moved, bias = rows.relaxed(ls, us, ub)
    assert torch.equal(moved.A, expected[0])
    torch.testing.assert_close(bias, expected[1])


def test_back_substitution_kernels_step_aside_for_gradients_and_odd_layouts():
    A = torch.randn(2, 3, 4, requires_grad=True)
    maps = [torch.rand(2, 4) for _ in range(3)]
    assert native.relaxed(A, *maps) is None  # a gradient to keep: the autograd ops run
    with torch.no_grad():
        assert native.relaxed(A, *maps) is not None
        assert native.relaxed(A.transpose(0, 1), *maps) is None  # rows not contiguous
        assert native.bound(A, maps[0], maps[1][:1].expand(2, 4)) is None  # centre and radius unlike
        assert native.relaxed(A.half(), *(m.half() for m in maps)) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("per_row", [False, True])
def test_fused_rows_give_the_gradients_of_the_composed_ops(dtype, per_row):
    """Forward and backward of `relaxed_rows` and `bound_rows` (the native autograd functions) against the
    composed ATen ops, for every input, under one upstream gradient."""
    from daic.runtime.domains import fused_rows

    g = torch.Generator().manual_seed(1)
    A = torch.randn((4, 3, 5, 6), generator=g, dtype=dtype)
    ls = torch.rand((4, 3, 5, 6) if per_row else (4, 5, 6), generator=g, dtype=dtype)
    us, ub, center, radius = (torch.rand((4, 5, 6), generator=g, dtype=dtype) for _ in range(4))
    up_out, up_bias, up_bound = (
        torch.randn(s, generator=g, dtype=dtype) for s in ((4, 3, 5, 6), (4, 3), (4, 3))
    )

    def grads(relaxed, bound):
        inputs = [t.clone().requires_grad_() for t in (A, ls, us, ub)]
        out, bias = relaxed(*inputs)
        value = bound(out, center, radius)
        torch.autograd.backward((out, bias, value), (up_out, up_bias, up_bound))
        return [out.detach(), bias.detach(), value.detach(), *(t.grad for t in inputs)]

    def aten_bound(rows, c, r):
        return (rows * c.unsqueeze(1)).flatten(2).sum(2) - (rows.abs() * r.unsqueeze(1)).flatten(2).sum(2)

    fused = grads(fused_rows.relaxed_rows, fused_rows.bound_rows)
    composed = grads(fused_rows._relaxed_aten, aten_bound)
    for a, b in zip(fused, composed, strict=True):
        torch.testing.assert_close(a, b)


# window kernels (rows kept as patches)


def windowed_rows(dtype, batch: int, stride: int, padding: int, seed: int = 0):
    """Patches rows of two images over a 5 x 7 map, windows 4 x 3 on a strided grid whose windows reach
    past the map on every side (their coefficients there zero, as `Patches` keeps them)."""
    from daic.runtime.domains.coeffs import Patches

    g = torch.Generator().manual_seed(seed)
    grid, rows = (3, 4), 40
    image = torch.randint(0, batch, (rows,), generator=g)
    position = torch.randint(0, grid[0] * grid[1], (rows,), generator=g)
    P = torch.randn((rows, 3, 4, 3), generator=g, dtype=dtype)
    P.view(-1)[::5] = 0
    outline = Patches(P, image, position, grid, (stride, stride), (padding, padding), (5, 7))
    (inside,) = outline.unfold(P.new_ones((1, 1, 5, 7)))
    return Patches(P * inside, image, position, grid, (stride, stride), (padding, padding), (5, 7)), g


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch,stride,padding", [(1, 1, 0), (2, 2, 1), (2, 1, 2)])
@pytest.mark.parametrize("shared", [False, True])  # maps per image, or one broadcast map for all
def test_window_kernels_agree_with_the_unfolded_windows(monkeypatch, dtype, batch, stride, padding, shared):
    rows, g = windowed_rows(dtype, batch, stride, padding)
    shape = (1, 3, 1, 7) if shared else (batch, 3, 5, 7)  # a shared map may also broadcast over rows
    ls, us, ub, centre, radius = (torch.rand(shape, generator=g, dtype=dtype) for _ in range(5))
    fused_moved, fused_bias = rows.relaxed(ls, us, ub)
    fused_bound = rows.bound(centre, radius)
    assert native.patches_relaxed(rows, ls, us, ub) is not None  # the kernel, not the composed ops
    monkeypatch.setattr(native, "has", lambda name, like: False)  # the composed ops: windows unfolded
    moved, bias = rows.relaxed(ls, us, ub)
    torch.testing.assert_close(fused_moved.P, moved.P)  # the composed ops write A+ ls + A- us otherwise
    torch.testing.assert_close(fused_bias, bias)
    torch.testing.assert_close(fused_bound, rows.bound(centre, radius))
    assert fused_bias.shape == fused_bound.shape == (40, 1)


def test_window_kernels_step_aside_for_gradients_and_odd_layouts():
    rows, g = windowed_rows(torch.float64, 2, 1, 1)
    maps = [torch.rand((2, 3, 5, 7), generator=g, dtype=torch.float64) for _ in range(3)]
    sloped = copy.copy(rows)
    sloped.P = rows.P.clone().requires_grad_()
    assert native.patches_relaxed(sloped, *maps) is None  # a gradient to keep
    with torch.no_grad():
        assert native.patches_relaxed(rows, *maps) is not None
        assert native.patches_bound(rows, maps[0], maps[1].transpose(2, 3).contiguous()) is None
        assert native.patches_bound(rows, maps[0], maps[1].long()) is None  # a map of another dtype
        assert native.patches_bound(rows, maps[0], maps[1][:, :2]) is None  # channels unlike
        half = copy.copy(rows)
        half.P = rows.P.half()
        assert native.patches_relaxed(half, *(m.half() for m in maps)) is None
