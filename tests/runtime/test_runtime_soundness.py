"""Soundness: every concrete output of every point in the input box lies in the abstract output's bounds.

Random small networks use every layer kind and every abstract layer, including residual and concat
branches in which one branch adds correlated terms and the other removes some: an alignment of terms by
position instead of by identity shows up there.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from daic.runtime import (
    AbstractContext,
    Box,
    DecorrelateMin,
    HybridZonotope,
    Linear,
    Residual,
    Sequential,
    trace,
)
from tests.runtime.helpers import DEVICES, HYPOTHESIS, assert_contains, run_points, sample_points
from tests.runtime.networks import branchy_networks, input_box, networks, randomize

TOL = 1e-9  # float64 throughout; the bounds are exact up to rounding


def abstract_inputs(lower: torch.Tensor, upper: torch.Tensor) -> dict[str, object]:
    return {
        "box": Box.from_bounds(lower, upper),
        "hz": HybridZonotope.from_bounds(lower, upper),
        "hz_exact": HybridZonotope.exact_from_bounds(lower, upper),
    }


def check_network(net: Sequential, shape: tuple[int, int, int], seed: int, device: str) -> None:
    randomize(net, seed)
    net = net.to(device=device, dtype=torch.float64)
    lower, upper = input_box(shape, batch=2, seed=seed, device=device)
    points = sample_points(lower, upper, 48, torch.Generator().manual_seed(seed + 2))
    outputs = run_points(net, points)
    for relu in ("hybrid", "deepz"):
        for training in (True, False):
            for name, value in abstract_inputs(lower, upper).items():
                ctx = AbstractContext(training=training, t=1.5, relu=relu)
                run = trace(net, value, ctx)
                out = run.output
                assert isinstance(out, type(value)), name
                lo, hi = out.bounds()
                assert lo.shape == outputs.shape[1:]
                assert bool((lo <= hi).all())
                assert_contains(lo, hi, outputs, TOL)
                for loss in run.step_losses(ctx):
                    assert loss.dim() == 0 and bool(torch.isfinite(loss))


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=250, **HYPOTHESIS)
@given(net_and_shape=networks(), seed=st.integers(0, 2**31 - 1))
def test_random_networks_are_sound(net_and_shape, seed, device):
    net, shape = net_and_shape
    check_network(net, shape, seed, device)


@settings(max_examples=150, **HYPOTHESIS)
@given(net_and_shape=branchy_networks(), seed=st.integers(0, 2**31 - 1))
def test_branches_adding_and_removing_terms_are_sound(net_and_shape, seed):
    net, shape = net_and_shape
    check_network(net, shape, seed, "cpu")


# --------------------------------------------------------------------------------------------------
# a hand-made case where position-wise alignment of terms is unsound


def _cancelling_residual() -> tuple[Sequential, HybridZonotope]:
    """x = (e_a, 2 e_b) exactly; branch 1 keeps only e_b (DecorrelateMin_1), branch 2 maps x to (0, -2 e_a).

    The true sum's second output is 2 e_b - 2 e_a, in [-4, 4]. Aligning slot 0 of branch 1 (e_b) with
    slot 0 of branch 2 (e_a) would cancel them and claim the output is exactly 0.
    """
    scale = Linear(2, 2, bias=False)
    mix = Linear(2, 2, bias=False)
    with torch.no_grad():
        scale.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
        mix.weight.copy_(torch.tensor([[0.0, 0.0], [-2.0, 0.0]]))
    net = Sequential(scale, Residual([DecorrelateMin(1, only_train=False)], [mix]))
    x = HybridZonotope.exact_from_bounds(-torch.ones(1, 2), torch.ones(1, 2))
    return net, x


def test_residual_terms_are_aligned_by_identity():
    net, x = _cancelling_residual()
    out = net.abstract(x, AbstractContext())
    lo, hi = out.bounds()
    torch.testing.assert_close(hi, torch.tensor([[1.0, 4.0]]))
    torch.testing.assert_close(lo, torch.tensor([[-1.0, -4.0]]))
    # e_a = -1, e_b = 1 reaches 4.
    assert net(torch.tensor([[-1.0, 1.0]]))[0, 1].item() == pytest.approx(4.0)


def test_positional_alignment_would_be_caught(monkeypatch):
    """The check used above fails for a position-wise sum: the test can see the bug it guards against."""

    def positional_add(self, other):
        m = max(self.m, other.m)

        def pad(e):
            return torch.cat([e, e.new_zeros((m - e.shape[0], *e.shape[1:]))])

        return HybridZonotope(
            self.head + other.head, self.beta + other.beta, pad(self.errors) + pad(other.errors)
        )

    monkeypatch.setattr(HybridZonotope, "__add__", positional_add)
    net, x = _cancelling_residual()
    out = net.abstract(x, AbstractContext())
    lo, hi = out.bounds()
    points = torch.tensor([[[-1.0, 1.0]]])
    with pytest.raises(AssertionError):
        assert_contains(lo, hi, run_points(net, points), TOL)
