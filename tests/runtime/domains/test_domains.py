"""Domains: interval concretization, conversions, term ids and the id-aligned sum/concatenation."""

from __future__ import annotations

import pytest
import torch

from daic.runtime import Box, HybridZonotope, add_values, cat_values, lower_upper
from daic.runtime.domains import DEAD
from daic.runtime.domains.term_ids import union_layout
from tests.runtime.helpers import DEVICES


def random_hz(m: int, shape=(2, 3, 4), device="cpu", seed=0) -> HybridZonotope:
    g = torch.Generator().manual_seed(seed)
    head = torch.randn(shape, generator=g).to(device)
    beta = torch.rand(shape, generator=g).to(device)
    errors = torch.randn((m, *shape), generator=g).to(device)
    return HybridZonotope(head, beta, errors)


@pytest.mark.parametrize("device", DEVICES)
def test_interval_concretization_is_head_plus_minus_total_error(device):
    x = random_hz(3, device=device)
    total = x.beta + x.errors.abs().sum(0)
    lo, hi = x.bounds()
    torch.testing.assert_close(lo, x.head - total)
    torch.testing.assert_close(hi, x.head + total)
    torch.testing.assert_close(x.lower(), lo)
    torch.testing.assert_close(x.upper(), hi)
    box = x.to_box()
    torch.testing.assert_close(box.radius, total)
    assert lo.device.type == device


@pytest.mark.parametrize("device", DEVICES)
def test_box_and_zonotope_constructors(device):
    lo = torch.tensor([[-1.0, 0.0, 2.0]], device=device)
    hi = torch.tensor([[1.0, 0.0, 5.0]], device=device)
    box = Box.from_bounds(lo, hi)
    torch.testing.assert_close(box.center, torch.tensor([[0.0, 0.0, 3.5]], device=device))
    torch.testing.assert_close(box.radius, torch.tensor([[1.0, 0.0, 1.5]], device=device))
    hz = HybridZonotope.from_box(box)
    assert hz.m == 0 and hz.ids.shape == (0, 1)
    torch.testing.assert_close(hz.bounds()[0], lo)
    hz2 = HybridZonotope.from_bounds(lo, hi)
    torch.testing.assert_close(hz2.bounds()[1], hi)
    assert lower_upper(hz2)[0].device.type == device


def test_exact_input_zonotope_has_one_term_per_dimension():
    lo = torch.tensor([[[-1.0, 0.0], [2.0, 3.0]]])
    hi = torch.tensor([[[1.0, 0.0], [5.0, 3.5]]])
    x = HybridZonotope.exact_from_bounds(lo, hi)
    assert x.m == 4
    assert torch.equal(x.beta, torch.zeros_like(lo))
    expected = torch.diag(torch.tensor([1.0, 0.0, 1.5, 0.25])).reshape(4, 1, 2, 2)
    torch.testing.assert_close(x.errors, expected)
    torch.testing.assert_close(x.bounds()[0], lo)
    torch.testing.assert_close(x.bounds()[1], hi)
    assert len(set(x.ids[:, 0].tolist())) == 4


def test_concretize_folds_all_terms_into_beta():
    x = random_hz(4)
    c = x.concretize()
    assert c.m == 0
    torch.testing.assert_close(c.beta, x.total_error())
    torch.testing.assert_close(c.bounds()[0], x.bounds()[0])


def test_fresh_ids_never_repeat():
    a, b = random_hz(3), random_hz(3)
    assert not set(a.ids.flatten().tolist()) & set(b.ids.flatten().tolist())


def test_union_layout_matches_ids_per_sample():
    ids_a = torch.tensor([[10, 20], [11, 21], [12, 22]])  # (m_a=3, B=2)
    ids_b = torch.tensor([[12, 99], [50, 20]])  # sample 0: 12 shared, 50 new; sample 1: 99 new, 20 shared
    dest, ids = union_layout(ids_a, ids_b)
    assert dest.tolist() == [[2, 3], [4, 0]]
    assert ids.tolist() == [[10, 20], [11, 21], [12, 22], [DEAD, 99], [50, DEAD]]


def test_sum_of_zonotopes_aligns_terms_by_id():
    head = torch.zeros(2, 1)
    a = HybridZonotope(head, torch.zeros(2, 1), torch.tensor([[[1.0], [2.0]], [[3.0], [4.0]]]),
                       torch.tensor([[10, 20], [11, 21]]))  # fmt: skip
    b = HybridZonotope(head, torch.zeros(2, 1), torch.tensor([[[5.0], [6.0]]]), torch.tensor([[11, 7]]))
    s = a + b
    # sample 0: term 11 shared -> 3 + 5; sample 1: term 7 is new.
    assert s.m == 3
    assert s.errors[:, 0, 0].tolist() == [1.0, 8.0, 0.0]
    assert s.errors[:, 1, 0].tolist() == [2.0, 4.0, 6.0]
    assert s.ids.tolist() == [[10, 20], [11, 21], [DEAD, 7]]
    # Same ids object: position-wise, no growth.
    t = a + a.replace(a.head, a.beta, a.errors * 2)
    assert t.m == 2
    torch.testing.assert_close(t.errors, a.errors * 3)


def test_dead_slots_stay_harmless_in_later_sums():
    a = random_hz(2, shape=(1, 3), seed=1)
    b = a.decorrelate_min(1)
    left = (a + b) + b  # a dead slot appears in a + b; the second b matches its live slot again
    right = a + (b + b)
    assert left.m == 4 and right.m == 3
    for u, v in zip(left.bounds(), right.bounds(), strict=True):
        torch.testing.assert_close(u, v)
    assert bool((left.ids >= DEAD).all())


def test_concatenation_aligns_terms_and_keeps_shapes():
    a = random_hz(2, shape=(2, 3, 4), seed=1)
    b = a.decorrelate_min(1)
    c = HybridZonotope.cat([a, b], dim=1)
    assert c.shape == (2, 6, 4) and c.errors.shape == (3, 2, 6, 4)
    torch.testing.assert_close(c.bounds()[0][:, :3], a.bounds()[0])
    torch.testing.assert_close(c.bounds()[0][:, 3:], b.bounds()[0])
    # b's kept term lands in a's slot with the same id.
    for s in range(2):
        kept_id = b.ids[0, s]
        slot = int((c.ids[:, s] == kept_id).nonzero()[0])
        torch.testing.assert_close(c.errors[slot, s, 3:], b.errors[0, s])
        torch.testing.assert_close(c.errors[slot, s, :3], a.errors[slot, s])


def test_add_and_cat_values_dispatch_on_domain():
    t = torch.ones(2, 3)
    assert torch.equal(add_values(t, t), 2 * t)
    box = Box(t, t)
    assert isinstance(add_values(box, box), Box)
    assert isinstance(add_values(box, HybridZonotope(t)), HybridZonotope)
    assert cat_values([box, box], 1).shape == (2, 6)
    assert cat_values([t, t], 1).shape == (2, 6)


def test_constructor_checks_shapes():
    with pytest.raises(ValueError):
        HybridZonotope(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError):
        HybridZonotope(torch.zeros(2, 3), None, torch.zeros(1, 2, 4))
    with pytest.raises(ValueError):
        Box(torch.zeros(2), torch.zeros(3))


def test_pending_one_hot_terms_behave_like_dense_ones():
    from daic.runtime import AbstractContext, CorrelateMax, Flatten, Linear

    torch.manual_seed(0)
    x = random_hz(2, shape=(3, 2, 4), seed=5)
    head = x.head.clone().requires_grad_()
    lazy = CorrelateMax(5).abstract(HybridZonotope(head, x.beta, x.errors, x.ids), AbstractContext(True))
    assert lazy.onehot is not None and lazy.m == 7 and lazy.dense_errors.shape[0] == 2
    dense = HybridZonotope(lazy.head, lazy.beta, lazy.errors.clone(), lazy.ids)  # materialised copy
    assert lazy.onehot is None  # reading .errors materialised the lazy value itself
    lazy = CorrelateMax(5).abstract(HybridZonotope(head, x.beta, x.errors, x.ids), AbstractContext(True))
    torch.testing.assert_close(lazy.total_error(), dense.total_error())
    flat = Flatten().abstract(lazy, AbstractContext())
    assert flat.onehot is not None
    layer = Linear(8, 3)
    out_lazy, out_dense = layer.abstract(flat, AbstractContext()), layer.abstract(dense, AbstractContext())
    torch.testing.assert_close(out_lazy.errors, out_dense.errors)
    torch.testing.assert_close(out_lazy.head, out_dense.head)
    grads = [torch.autograd.grad(o.upper().sum(), (head, layer.weight)) for o in (out_lazy, out_dense)]
    for g_lazy, g_dense in zip(*grads, strict=True):
        torch.testing.assert_close(g_lazy, g_dense)


def test_fused_term_ops_match_composed_autograd():
    from daic.runtime.domains.fused import abs_sum_terms, split_terms

    g = torch.Generator().manual_seed(4)
    errors = torch.randn((5, 3, 2, 4), generator=g, dtype=torch.float64)
    errors[1, 0] = 0.0  # exact zeros: sign 0, as autograd's abs
    kept = torch.tensor([[0, 1, 2], [3, 4, 4]]).sort(dim=0).values  # (2, 3)
    removed = torch.ones(5, 3, dtype=torch.float64)
    removed[kept, torch.arange(3)[None, :].expand(2, 3)] = 0
    w_sum = torch.randn((3, 2, 4), generator=g, dtype=torch.float64)
    w_kept = torch.randn((2, 3, 2, 4), generator=g, dtype=torch.float64)

    def composed(e):
        bidx = torch.arange(3)[None, :].expand(2, 3)
        return e[kept, bidx], (e.abs() * removed[:, :, None, None]).sum(0)

    for use in ((True, True), (True, False), (False, True)):
        grads = []
        for fn in (lambda e: split_terms(e, kept, removed), composed):
            e = errors.clone().requires_grad_()
            k, s = fn(e)
            parts = [(k * w_kept).sum()] * use[0] + [(s * w_sum).sum()] * use[1]  # unused -> None grad
            loss = sum(parts)
            grads.append(torch.autograd.grad(loss, e)[0])
            torch.testing.assert_close(k, composed(errors)[0])
            torch.testing.assert_close(s, composed(errors)[1])
        torch.testing.assert_close(grads[0], grads[1])
    e1, e2 = errors.clone().requires_grad_(), errors.clone().requires_grad_()
    torch.testing.assert_close(abs_sum_terms(e1), e2.abs().sum(0))
    (g1,) = torch.autograd.grad((abs_sum_terms(e1) * w_sum).sum(), e1)
    (g2,) = torch.autograd.grad((e2.abs().sum(0) * w_sum).sum(), e2)
    torch.testing.assert_close(g1, g2)
