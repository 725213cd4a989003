"""DeepLoss against a direct O(n^2) evaluation of the paper's definition (Section 3.3)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from daic.runtime import (
    AbstractContext,
    Box,
    DeepLoss,
    HybridZonotope,
    Lin,
    Sequential,
    Until,
    deep_loss,
    trace,
)
from tests.runtime.helpers import DEVICES, HYPOTHESIS


def deep_loss_direct(lower: torch.Tensor, upper: torch.Tensor, act=F.relu) -> torch.Tensor:
    """The definition, literally: pairwise over all (i, j), with the conditions as masks."""
    n = lower.shape[1]
    li, lj = lower[:, :, None], lower[:, None, :]
    ui, uj = upper[:, :, None], upper[:, None, :]
    neg = torch.tensor(float("-inf"), dtype=lower.dtype)
    lb = torch.where(lj <= li, act(uj - li), neg).amax(dim=2)  # max over j with l_j <= l_i
    ub = torch.where(ui <= uj, act(ui - lj), neg).amax(dim=2)  # max over j with u_i <= u_j
    return ((lb + ub).sum(dim=1) / (2 * n)).mean()


@st.composite
def intervals(draw) -> tuple[torch.Tensor, torch.Tensor]:
    b, n = draw(st.integers(1, 3)), draw(st.integers(1, 12))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    if draw(st.booleans()):
        # Small integers: many exact ties among lower and among upper bounds.
        lower = torch.randint(-3, 3, (b, n), generator=g).double()
        upper = lower + torch.randint(0, 3, (b, n), generator=g).double()
    else:
        lower = torch.randn((b, n), generator=g, dtype=torch.float64)
        upper = lower + torch.rand((b, n), generator=g, dtype=torch.float64)
    return lower, upper


@settings(max_examples=150, **HYPOTHESIS)
@given(bounds=intervals(), act=st.sampled_from([F.relu, F.softplus]))
def test_deep_loss_matches_the_quadratic_definition(bounds, act):
    lower, upper = bounds
    torch.testing.assert_close(deep_loss(lower, upper, act), deep_loss_direct(lower, upper, act))


@settings(max_examples=40, **HYPOTHESIS)
@given(b=st.integers(1, 3), n=st.integers(1, 12), seed=st.integers(0, 2**31 - 1))
def test_deep_loss_gradients_match_the_quadratic_definition(b, n, seed):
    # Continuous random bounds: no ties, so the (sub)gradient of every max is unique.
    g = torch.Generator().manual_seed(seed)
    lower = torch.randn((b, n), generator=g, dtype=torch.float64)
    upper = lower + torch.rand((b, n), generator=g, dtype=torch.float64)
    grads = []
    for fn in (deep_loss, deep_loss_direct):
        lo, hi = lower.clone().requires_grad_(), upper.clone().requires_grad_()
        fn(lo, hi).backward()
        grads.append((lo.grad, hi.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0])
    torch.testing.assert_close(grads[0][1], grads[1][1])


def test_deep_loss_hand_example_with_ties():
    # l = [0, 0, 1], u = [1, 3, 2]; n = 3.
    # L_lb: i=0,1 (l=0): max u over l_j <= 0 is 3 -> 3, 3; i=2: max u over all = 3 -> 3 - 1 = 2.
    # L_ub: i=0 (u=1): min l over u_j >= 1 = 0 -> 1; i=1 (u=3): only itself -> 3; i=2 (u=2): j in {1,2} -> 2.
    lower, upper = torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[1.0, 3.0, 2.0]])
    expected = (3 + 3 + 2 + 1 + 3 + 2) / 6
    assert deep_loss(lower, upper).item() == pytest.approx(expected)


@pytest.mark.parametrize("device", DEVICES)
def test_deep_loss_layer_adds_the_weighted_loss_to_the_step(device):
    head = torch.randn(2, 3, 4, device=device)
    beta = torch.rand(2, 3, 4, device=device)
    x = HybridZonotope(head, beta, torch.randn(2, 2, 3, 4, device=device))
    weight = Until(1, 0.0, Lin(0.5, 0, 50, 3))
    layer = DeepLoss(weight)
    ctx = AbstractContext(training=True, t=0.5)
    assert layer.abstract(x, ctx) is x and layer.step_loss(x, ctx) is None  # weight 0 before epoch 1
    ctx = AbstractContext(training=True, t=2.0)
    net = Sequential(layer)
    run = trace(net, x, ctx)
    assert run.output is x and run.visits == ((layer, x),)
    lo, hi = x.bounds()
    expected = 0.5 * deep_loss_direct(lo.flatten(1).cpu(), hi.flatten(1).cpu())
    (loss,) = run.step_losses(ctx)
    torch.testing.assert_close(loss.cpu(), expected)
    box = Box(head, beta)
    assert layer.abstract(box, ctx) is box and layer.step_loss(box, ctx) is not None
    assert layer.step_loss(head, ctx) is None  # points add nothing


def test_deep_loss_memory_is_linear():
    """A wide layer (n = 200k) must not build an n x n tensor (that would be 160 GB)."""
    lower = torch.randn(1, 200_000)
    loss = deep_loss(lower, lower + 1)
    assert torch.isfinite(loss)


def test_deep_loss_activation_by_name():
    assert DeepLoss(0.1, act="relu").act is F.relu
    with pytest.raises(ValueError):
        DeepLoss(0.1, act="tanh-ish")
