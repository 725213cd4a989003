"""The fast paths agree with the plain ones and stay sound.

- windowed (local) correlated terms against the same terms as full maps;
- certification (no gradient), which drops the terms that die and shrinks the layouts of branch sums,
  against the plain dense propagation with a gradient;
- the fused Box transformers (ReLU, Linear) and the chunked sum of |terms| against composed autograd.
"""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from daic.runtime import (
    AbstractContext,
    Box,
    Conv2D,
    CorrelateMax,
    DecorrelateMin,
    HybridZonotope,
    Linear,
    Normalize,
    ReLU,
    Residual,
    Sequential,
)
from daic.runtime.certification.verification import slot_count_matters
from daic.runtime.domains import DEAD, dropping_dead_terms
from daic.runtime.domains.fused import abs_sum_terms
from daic.runtime.domains.local_terms import LocalTerms
from daic.runtime.domains.term_ids import union_layout
from daic.runtime.layers import activation
from daic.runtime.training.losses import certified, margin_upper
from tests.runtime.helpers import HYPOTHESIS, assert_contains, run_points, sample_points
from tests.runtime.networks import branchy_networks, input_box, networks, randomize
from tests.runtime.test_runtime_soundness import TOL, abstract_inputs

CLOSE = {"rtol": 1e-9, "atol": 1e-9}  # float64; only the order of summation differs


def dense_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes every layer see its input's terms as full maps (no one-hot or windowed shortcuts)."""
    monkeypatch.setattr(HybridZonotope, "term_parts", lambda self: (self.errors, None, None))


def watch_relu_ties(patch: pytest.MonkeyPatch) -> list[bool]:
    """Records (by appending) each time a hybrid or DeepZ ReLU sees a bound within rounding of zero."""
    seen: list[bool] = []
    masks = activation._relu_masks

    def watched(lower, upper):
        scale = 1 + torch.maximum(lower.abs(), upper.abs()).max()
        if bool(((lower.abs() < 1e-12 * scale) | (upper.abs() < 1e-12 * scale)).any()):
            seen.append(True)
        return masks(lower, upper)

    patch.setattr(activation, "_relu_masks", watched)
    return seen


def propagate(net, value, ctx_args, grad: bool):
    """The plain propagation (``grad``), or certification's, which leaves out dead terms where it may."""
    dropping = grad or slot_count_matters(net, ctx_args.get("training", False))
    with torch.set_grad_enabled(grad), nullcontext() if dropping else dropping_dead_terms():
        return net.abstract(value, AbstractContext(**ctx_args))


def check_fast_paths(net, shape, seed: int) -> None:
    randomize(net, seed)
    net = net.double()
    lower, upper = input_box(shape, batch=2, seed=seed, device="cpu")
    points = sample_points(lower, upper, 32, torch.Generator().manual_seed(seed + 2))
    outputs = run_points(net, points)
    target = torch.randint(0, outputs.shape[-1], (2,), generator=torch.Generator().manual_seed(seed))
    for relu in ("hybrid", "deepz"):
        for training in (False, True):
            ctx = {"training": training, "t": 1.5, "relu": relu}
            for name in ("hz", "hz_exact"):
                fast = propagate(net, abstract_inputs(lower, upper)[name], ctx, grad=False)
                with pytest.MonkeyPatch.context() as patch:
                    dense_reference(patch)
                    ties = watch_relu_ties(patch)
                    plain = propagate(net, abstract_inputs(lower, upper)[name], ctx, grad=True)
                lo, hi = fast.bounds()
                assert_contains(lo, hi, outputs, TOL)
                if ties:
                    # A ReLU bound within rounding of 0: the paths sum terms in different orders, so they
                    # may take the two (both sound) sides of that decision; only soundness is compared.
                    continue
                plain_lo, plain_hi = plain.bounds()
                torch.testing.assert_close(lo, plain_lo.detach(), **CLOSE)
                torch.testing.assert_close(hi, plain_hi.detach(), **CLOSE)
                assert fast.m <= plain.m
                # The same certificates, wherever the decisive margin is not within rounding of 0.
                fast_margin = margin_upper(fast, target).scatter(1, target[:, None], -torch.inf).amax(1)
                plain_margin = margin_upper(plain, target).detach().scatter(1, target[:, None], -torch.inf)
                clear = (plain_margin.amax(1).abs() > 1e-7).nonzero().flatten()
                assert torch.equal((fast_margin < 0)[clear], (plain_margin.amax(1) < 0)[clear])
                assert torch.equal(certified(fast, target)[clear], certified(plain, target)[clear])


@settings(max_examples=120, **HYPOTHESIS)
@given(net_and_shape=networks(), seed=st.integers(0, 2**31 - 1))
def test_certification_path_agrees_with_the_plain_one(net_and_shape, seed):
    net, shape = net_and_shape
    check_fast_paths(net, shape, seed)


@settings(max_examples=60, **HYPOTHESIS)
@given(net_and_shape=branchy_networks(), seed=st.integers(0, 2**31 - 1))
def test_certification_path_agrees_on_branches_adding_and_removing_terms(net_and_shape, seed):
    net, shape = net_and_shape
    check_fast_paths(net, shape, seed)


def draw_residual_conv_network(data) -> tuple[Sequential, tuple[int, int, int]]:
    """A ResNet-like stack whose residual sums add windowed terms on both branches, strides included."""
    c, h, w = data.draw(st.integers(1, 2)), data.draw(st.integers(6, 10)), data.draw(st.integers(6, 10))
    layers: list[torch.nn.Module] = []
    if data.draw(st.booleans()):
        layers.append(CorrelateMax(data.draw(st.integers(1, 6)), only_train=False))
    out = data.draw(st.integers(1, 3))
    layers += [Conv2D(c, out, 3, padding=1), ReLU()]
    channels, height, width = out, h, w
    for _ in range(data.draw(st.integers(1, 3))):
        stride = data.draw(st.sampled_from([1, 1, 2]))
        out = data.draw(st.integers(1, 3))
        branch2 = [Conv2D(channels, out, 3, stride=stride, padding=1), ReLU(), Conv2D(out, out, 3, padding=1)]
        if data.draw(st.booleans()):
            branch2.insert(2, DecorrelateMin(data.draw(st.integers(0, 4)), only_train=False))
        layers += [Residual([Conv2D(channels, out, 1, stride=stride)], branch2), ReLU()]
        channels, height, width = out, (height - 1) // stride + 1, (width - 1) // stride + 1
    layers.append(Linear(channels * height * width, data.draw(st.integers(1, 3))))
    return Sequential(*layers), (c, h, w)


@settings(max_examples=80, **HYPOTHESIS)
@given(data=st.data(), seed=st.integers(0, 2**31 - 1))
def test_certification_path_agrees_on_residual_windows(data, seed):
    check_fast_paths(*draw_residual_conv_network(data), seed)


@settings(max_examples=40, **HYPOTHESIS)
@given(data=st.data(), seed=st.integers(0, 2**31 - 1))
def test_windowed_terms_train_like_full_maps(data, seed):
    """Training (with a gradient): windowed terms give the same bounds and parameter gradients."""
    net, shape = draw_residual_conv_network(data)
    randomize(net, seed)
    net = net.double()
    lower, upper = input_box(shape, batch=2, seed=seed, device="cpu")
    grads = []
    for reference in (False, True):
        with pytest.MonkeyPatch.context() as patch:
            if reference:
                dense_reference(patch)
            value = abstract_inputs(lower, upper)["hz_exact"]
            out = net.abstract(value, AbstractContext(training=True))
            loss = out.upper().sum() - out.lower().square().sum()
            grads.append(torch.autograd.grad(loss, list(net.parameters()), allow_unused=True))
    for fast, plain in zip(*grads, strict=True):
        if plain is None:
            assert fast is None or not fast.any()
        else:
            torch.testing.assert_close(fast, plain, **CLOSE)


def test_certification_drops_dead_terms_and_keeps_the_bounds(monkeypatch):
    """A ReLU whose neurons all cross zero kills every term: certification carries none after it."""
    conv = Conv2D(1, 2, 3, padding=1).double()
    with torch.no_grad():
        conv.weight.fill_(0.1)
        conv.bias.fill_(0.0)
    net = Sequential(conv, ReLU(), Conv2D(2, 2, 3, padding=1).double())
    lower, upper = -torch.ones(2, 1, 4, 4, dtype=torch.float64), torch.ones(2, 1, 4, 4, dtype=torch.float64)
    fast = propagate(net, HybridZonotope.exact_from_bounds(lower, upper), {}, grad=False)
    with monkeypatch.context() as patch:
        dense_reference(patch)
        plain = propagate(net, HybridZonotope.exact_from_bounds(lower, upper), {}, grad=True)
    assert plain.m == 16 and fast.m == 0
    for a, b in zip(fast.bounds(), plain.bounds(), strict=True):
        torch.testing.assert_close(a, b.detach(), **CLOSE)


# --------------------------------------------------------------------------------------------------
# windowed terms


def random_windows(seed: int, k=3, b=2, c=2, window=(3, 2), hw=(5, 6)) -> LocalTerms:
    """Windows at random places, some hanging over the map's edges (their outside entries zeroed)."""
    g = torch.Generator().manual_seed(seed)
    values = torch.randn((k, b, c, *window), generator=g, dtype=torch.float64)
    top = torch.randint(-window[0] + 1, hw[0], (k, b), generator=g)
    left = torch.randint(-window[1] + 1, hw[1], (k, b), generator=g)
    terms = LocalTerms(values, top, left, *hw)
    _, _, inside = terms._rows_cols()
    return LocalTerms(values * inside[:, :, None], top, left, *hw)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    ("kernel", "stride", "padding"), [(1, 1, 0), (3, 1, 1), (4, 2, 1), (3, 2, 0), (2, 3, 2)]
)
def test_windowed_convolution_matches_full_maps(seed, kernel, stride, padding):
    """Values and gradients. Window entries outside the map are zeros that no neuron holds: the gradient
    there is not compared (layers zero those entries, so nothing upstream receives it)."""
    terms = random_windows(seed)
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn((3, 2, kernel, kernel), generator=g, dtype=torch.float64).requires_grad_()
    values = terms.values.clone().requires_grad_()
    local = LocalTerms(values, terms.top, terms.left, terms.height, terms.width)
    dense = local.dense()
    full = F.conv2d(dense.reshape(-1, *dense.shape[2:]), weight, None, stride, padding)
    out_hw = (full.shape[2], full.shape[3])
    windowed = local.conv2d(weight, (stride, stride), (padding, padding), out_hw).dense()
    torch.testing.assert_close(windowed.reshape(full.shape), full)
    cotangent = torch.randn(full.shape, generator=g, dtype=torch.float64)
    grads = [
        torch.autograd.grad((o.reshape(full.shape) * cotangent).sum(), (values, weight))
        for o in (windowed, full)
    ]
    _, _, inside = terms._rows_cols()
    inside = inside[:, :, None].to(torch.float64)
    torch.testing.assert_close(grads[0][0] * inside, grads[1][0] * inside)
    torch.testing.assert_close(grads[0][1], grads[1][1])


@pytest.mark.parametrize("seed", range(4))
def test_windowed_sums_and_fields_match_full_maps(seed):
    terms = random_windows(seed)
    dense = terms.dense()
    total = torch.rand((2, 2, 5, 6), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    torch.testing.assert_close(terms.abs_sum(total), total + dense.abs().sum(0))
    torch.testing.assert_close(terms.scaled(total).dense(), dense * total)
    torch.testing.assert_close(terms.abs_totals(), dense.abs().sum((2, 3, 4)))
    weights = torch.rand((3, 2), dtype=torch.float64)
    torch.testing.assert_close(terms.weighted(weights).dense(), dense * weights[:, :, None, None, None])


@pytest.mark.parametrize("seed", range(4))
def test_union_of_windows_is_the_id_aligned_sum(seed):
    a, b = random_windows(seed, k=3), random_windows(seed + 100, k=2, window=(2, 4))
    g = torch.Generator().manual_seed(seed)
    ids_a = torch.tensor([[10, 20], [11, 21], [12, 22]])
    ids_b = torch.stack([ids_a[torch.randint(0, 3, (1,), generator=g).item()], torch.tensor([99, DEAD])])
    # An empty slot (id DEAD) holds zeros, wherever its window lies: it must not stretch the windows.
    b.values[1, 1] = 0.0
    b.top[1, 1], b.left[1, 1] = -50, 80
    dest, ids = union_layout(ids_a, ids_b)
    union = LocalTerms.union(a, b, dest, ids.shape[0], ids_b != DEAD)
    assert union.window[0] <= a.window[0] + b.window[0] + 5 and union.window[1] <= 12
    expected = torch.cat([a.dense(), torch.zeros((2, *a.dense().shape[1:]), dtype=torch.float64)])
    batch = torch.arange(2)[None, :].expand_as(dest)
    expected = expected.index_put((dest, batch), b.dense(), accumulate=True)
    torch.testing.assert_close(union.dense(), expected)


def test_windowed_residual_sums_cancel_only_matching_terms():
    """Both branches keep windows of the same input terms: the sum adds them term by term, so a term and
    its negation cancel while the other terms stay (a position-wise or unaligned sum would not)."""
    conv = Conv2D(1, 1, 1, bias=False).double()
    with torch.no_grad():
        conv.weight.fill_(-1.0)
    net = Sequential(Conv2D(1, 1, 1, bias=False).double(), Residual([], [conv]))
    with torch.no_grad():
        net[0].weight.fill_(1.0)
    lower, upper = -torch.ones(1, 1, 3, 3, dtype=torch.float64), torch.ones(1, 1, 3, 3, dtype=torch.float64)
    out = net.abstract(HybridZonotope.exact_from_bounds(lower, upper), AbstractContext())
    assert out.local is not None
    lo, hi = out.bounds()
    assert torch.equal(lo, torch.zeros_like(lo)) and torch.equal(hi, torch.zeros_like(hi))


# --------------------------------------------------------------------------------------------------
# fused transformers


@pytest.mark.parametrize("blocked", [False, True], ids=["whole", "blocks of 2, 2, 2, 1 columns"])
def test_box_linear_gradients_match_autograd(monkeypatch, blocked):
    import daic.runtime.layers.affine as affine
    from daic.runtime.layers.affine import _BoxLinear

    if blocked:  # a wide CPU weight is worked through in column blocks; here 4 x 7 in blocks of 8 elements
        monkeypatch.setattr(affine, "BLOCKED_ABOVE", 8)
        monkeypatch.setattr(affine, "BLOCK_ELEMENTS", 8)
    g = torch.Generator().manual_seed(0)
    layer = Linear(7, 4).double()
    assert len(affine.weight_blocks(layer.weight)) == (4 if blocked else 1)
    center = torch.randn((3, 7), generator=g, dtype=torch.float64, requires_grad=True)
    radius = torch.rand((3, 7), generator=g, dtype=torch.float64, requires_grad=True)
    out = layer.abstract(Box(center, radius), AbstractContext())
    composed = (F.linear(center, layer.weight, layer.bias), F.linear(radius, layer.weight.abs()))
    cotangent = torch.randn((2, 3, 4), generator=g, dtype=torch.float64)
    params = (center, radius, layer.weight, layer.bias)
    for outputs in ((out.center, out.radius), composed):
        torch.testing.assert_close(outputs[0], composed[0])
        torch.testing.assert_close(outputs[1], composed[1])
    fast = torch.autograd.grad((out.center * cotangent[0] + out.radius * cotangent[1]).sum(), params)
    plain = torch.autograd.grad((composed[0] * cotangent[0] + composed[1] * cotangent[1]).sum(), params)
    for a, b in zip(fast, plain, strict=True):
        torch.testing.assert_close(a, b)
    weight, bias = layer.weight.detach().clone(), layer.bias.detach().clone()
    assert torch.autograd.gradcheck(
        _BoxLinear.apply, (center, radius, weight.requires_grad_(), bias.requires_grad_())
    )


def test_hybrid_relu_without_terms_is_the_box_relu():
    g = torch.Generator().manual_seed(1)
    head = torch.randn((4, 30), generator=g, dtype=torch.float64, requires_grad=True)
    beta = torch.rand((4, 30), generator=g, dtype=torch.float64, requires_grad=True)
    out = ReLU().abstract(HybridZonotope(head, beta), AbstractContext())
    lo, hi = F.relu(head - beta), F.relu(head + beta)
    torch.testing.assert_close(out.head, (hi + lo) / 2)
    torch.testing.assert_close(out.beta, (hi - lo) / 2)
    w = torch.randn((2, 4, 30), generator=g, dtype=torch.float64)
    fast = torch.autograd.grad((out.head * w[0] + out.beta * w[1]).sum(), (head, beta))
    plain = torch.autograd.grad(((hi + lo) / 2 * w[0] + (hi - lo) / 2 * w[1]).sum(), (head, beta))
    for a, b in zip(fast, plain, strict=True):
        torch.testing.assert_close(a, b)


def test_chunked_sum_of_absolute_terms_matches(monkeypatch):
    import daic.runtime.domains.fused as fused

    monkeypatch.setattr(fused, "CHUNK_BYTES", 3 * 8 * 20)  # chunks of 3 terms of 20 float64 values
    errors = torch.randn((10, 4, 5), dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(abs_sum_terms(errors), errors.abs().sum(0))


def test_normalize_keeps_one_hot_terms_one_hot():
    norm = Normalize([0.5, -0.2], [0.25, -2.0]).double()
    lower = torch.zeros(2, 2, 3, 3, dtype=torch.float64)
    upper = torch.rand(2, 2, 3, 3, dtype=torch.float64)
    lazy = norm.abstract(HybridZonotope.exact_from_bounds(lower, upper), AbstractContext())
    assert lazy.onehot is not None
    eager = HybridZonotope.exact_from_bounds(lower, upper)
    _ = eager.errors
    dense = norm.abstract(eager, AbstractContext())
    torch.testing.assert_close(lazy.errors, dense.errors)


@pytest.mark.parametrize("grad", [False, True])
def test_one_channel_box_convolution_runs_channels_last(monkeypatch, grad):
    # One input channel leaves the layout ambiguous; the box pass still hands oneDNN (and the next layers)
    # canonical channels-last maps, with the plain convolution's values and gradients.
    g = torch.Generator().manual_seed(2)
    conv = Conv2D(1, 4, 3, stride=2)
    center = torch.rand((5, 1, 9, 9), generator=g).requires_grad_(grad)
    radius = torch.rand((5, 1, 9, 9), generator=g).requires_grad_(grad)
    seen, conv2d = [], F.conv2d
    monkeypatch.setattr(F, "conv2d", lambda x, *args: seen.append(x.stride()) or conv2d(x, *args))
    out = conv.abstract(Box(center, radius), AbstractContext())
    monkeypatch.undo()
    assert seen == [(81, 1, 9, 1)] * 2  # what oneDNN reads as channels-last
    assert out.center.stride() == out.radius.stride() == (4 * 4 * 4, 1, 4 * 4, 4)
    torch.testing.assert_close(out.center, F.conv2d(center, conv.weight, conv.bias, 2))
    torch.testing.assert_close(out.radius, F.conv2d(radius, conv.weight.abs(), None, 2))
    if grad:
        (out.center.sum() + 2 * out.radius.sum()).backward()
        plain_c, plain_r = center.detach().requires_grad_(), radius.detach().requires_grad_()
        (
            F.conv2d(plain_c, conv.weight, conv.bias, 2).sum()
            + 2 * F.conv2d(plain_r, conv.weight.abs(), None, 2).sum()
        ).backward()
        torch.testing.assert_close(center.grad, plain_c.grad)
        torch.testing.assert_close(radius.grad, plain_r.grad)


def test_terms_go_through_a_convolution_a_chunk_at_a_time(monkeypatch):
    """The exact input zonotope's terms reach the second convolution as windows too wide to pay, and are
    made full maps and convolved a chunk at a time: every call stays within the chunk's bytes (so the
    convolution's own buffers do not grow with the term count), with the numbers of one whole call."""
    from daic.runtime.domains import zonotope

    torch.manual_seed(0)
    net = Sequential(Conv2D(1, 4, 4, stride=2), ReLU(), Conv2D(4, 6, 4, stride=2)).double()
    x = torch.rand(3, 1, 16, 16, dtype=torch.float64)
    value = HybridZonotope.exact_from_bounds(x - 0.01, x + 0.01)
    with torch.no_grad():
        whole = net.abstract(value, AbstractContext())
    calls: list[int] = []
    convolve = net[2]._affine

    def spied(e, with_bias):
        calls.append(e.numel() * e.element_size())
        return convolve(e, with_bias)

    monkeypatch.setattr(zonotope, "MAP_CHUNK_BYTES", 64 * 1024)
    monkeypatch.setattr("daic.runtime.layers.affine.MAP_CHUNK_BYTES", 64 * 1024)
    monkeypatch.setattr(net[2], "_affine", spied)
    with torch.no_grad():
        chunked = net.abstract(value, AbstractContext())
    assert len(calls) > 3 and max(calls[1:]) <= 64 * 1024  # the first call is the head's
    torch.testing.assert_close(chunked.errors, whole.errors, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(chunked.bounds()[0], whole.bounds()[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("zeros", [0, 1, 5, 40, 200])
def test_decorrelate_min_keeps_the_earlier_of_tied_terms_whatever_the_other_slots(zeros):
    """Two terms of equal size, the first at slot 0 and the other after ``zeros`` empty slots (a batch
    mate's dead terms under dropping_dead_terms): the earlier is kept, for every layout."""
    m = zeros + 2
    errors = torch.zeros(m, 1, 3, dtype=torch.float64)
    errors[0, 0] = torch.tensor([0.1, 0.1, 0.0])
    errors[m - 1, 0] = torch.tensor([0.0, 0.1, 0.1])
    ids = torch.arange(m)[:, None]
    value = HybridZonotope(torch.zeros(1, 3, dtype=torch.float64), None, errors, ids)
    kept = value.decorrelate_min(1)
    assert kept.ids.tolist() == [[0]]
    torch.testing.assert_close(kept.beta, torch.tensor([[0.0, 0.1, 0.1]], dtype=torch.float64))
