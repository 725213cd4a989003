"""Bounding a batch of subdomains (`search/bounding.py`), through `Bounder.bound`."""

from __future__ import annotations

import itertools
import math

import torch

from daic.runtime import Conv2D, Flatten, Linear, ReLU, Sequential
from daic.runtime.certification.search import bounding
from daic.runtime.certification.search.bounding import Bounder, Work
from daic.runtime.domains.rounding import outward_rounding, rounds_outward
from tests.runtime.certification.test_complete import blob_network

torch.set_num_threads(1)


def _children_of_an_open_image() -> tuple[Bounder, Work, bounding.Warm]:
    """An image of a blob network that CROWN and alpha-CROWN leave open at eps 0.12, and its 8 children split
    on three unstable neurons of the first layer, warm-started from the root's slopes."""
    net = blob_network(5, width=6)
    x = torch.rand(20, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)[11:12]
    y = net(x).argmax(1)
    lower, upper = (x - 0.12).clamp(0, 1), (x + 0.12).clamp(0, 1)
    bounder = Bounder(net, None, "hybrid", steps=20, lr_alpha=0.1, lr_beta=0.05)
    root = bounder.bound(Work(lower, upper, y, torch.arange(2)[None]), math.inf)
    assert not bool((root.lower > 0).all())
    layout = bounder.layout
    low, up = root.split_inputs[layout.inputs[0]]
    unstable = ((low < 0) & (up > 0)).flatten().nonzero().squeeze(1)[:3]
    signs = torch.zeros(8, layout.size, dtype=torch.int8)
    for row, pattern in enumerate(itertools.product([1, -1], repeat=3)):
        signs[row, layout.offsets[0] + unstable] = torch.tensor(pattern, dtype=torch.int8)
    work = Work(lower.expand(8, -1), upper.expand(8, -1), y.expand(8), torch.arange(2).expand(8, -1), signs)
    warm = ({key: a.expand(8, *a.shape[1:]) for key, a in root.alphas.items()}, {})
    return bounder, work, warm


def test_children_their_warm_start_proves_leave_the_optimisation_and_the_rest_bound_as_before(monkeypatch):
    """3 of the 8 children are proved by their parent's slopes alone: the other 5 are optimised in a batch of
    their own, and their bounds, slopes and multipliers equal what optimising all 8 together gives (a row's
    optimisation depends on its own parameters only, up to float32's rounding in the steps); the 3 stay
    proved."""
    bounder, work, warm = _children_of_an_open_image()
    narrowed: list[list[int]] = []
    original = Bounder._steering

    def spied(self, start, work, companions, rest):
        narrowed.append(rest.tolist())
        return original(self, start, work, companions, rest)

    monkeypatch.setattr(Bounder, "_steering", spied)
    apart = bounder.bound(work, math.inf, warm=warm)
    monkeypatch.setattr(bounding, "NARROW_SHARE", 2.0)  # never: all 8 optimised together
    together = bounder.bound(work, math.inf, warm=warm)
    assert narrowed == [[0, 1, 2, 4, 5], list(range(8))]
    rest, proved = torch.tensor(narrowed[0]), torch.tensor([3, 6, 7])
    assert bool((apart.lower[proved] > 0).all()) and bool((together.lower[proved] > 0).all())
    assert int((apart.lower[rest] > 0).all(1).sum()) == 1  # one more proved by the optimisation
    torch.testing.assert_close(apart.lower[rest], together.lower[rest], rtol=0, atol=1e-6)
    assert apart.alphas.keys() == together.alphas.keys() and apart.betas.keys() == together.betas.keys()
    for ours, theirs in [(apart.alphas, together.alphas), (apart.betas, together.betas),
                         (apart.coefficients, together.coefficients)]:  # fmt: skip
        for key in ours:
            torch.testing.assert_close(ours[key][rest], theirs[key][rest], rtol=0, atol=1e-6)
    torch.testing.assert_close(apart.corners[rest], together.corners[rest], rtol=0, atol=0)


def test_the_steps_steer_in_float32_and_the_bounds_returned_are_float64_rounded_outward(monkeypatch):
    """Under certification's outward rounding, every Adam step back-substitutes in float32 rounding to
    nearest (its bound only steers Adam); the slopes and multipliers kept are bounded once more on the
    float64 graph, outward, without a gradient, and that is the bound returned where it beats the start."""
    bounder, work, warm = _children_of_an_open_image()
    calls: list[tuple[torch.dtype, bool, bool, torch.Tensor]] = []
    original = bounding.backsubstitute

    def spied(output, rows, how=None, **kwargs):
        found = original(output, rows, how, **kwargs)
        calls.append((found.dtype, rounds_outward(), torch.is_grad_enabled(), found.detach().clone()))
        return found

    monkeypatch.setattr(bounding, "backsubstitute", spied)
    monkeypatch.setattr(bounding, "NARROW_SHARE", 2.0)  # all 8 children optimised in one batch
    with outward_rounding():
        bounded = bounder.bound(work, math.inf, warm=warm)
    # CROWN's bound and the warm start's; the steps; the kept parameters.
    f64, f32 = torch.float64, torch.float32
    assert [(dtype, outward) for dtype, outward, _, _ in calls] == (
        [(f64, True)] * 2 + [(f32, False)] * (len(calls) - 3) + [(f64, True)]
    )
    assert len(calls) >= 5 and all(grad for _, _, grad, _ in calls[2:-1]) and not calls[-1][2]
    start = torch.maximum(calls[0][3], calls[1][3])
    steps, last = torch.stack([found for *_, found in calls[2:-1]]).amax(0).double(), calls[-1][3]
    moved = steps > start + 1e-5
    assert int(moved.sum()) >= 2, "the test needs rows the steps improve"
    assert float((steps - last)[moved].abs().max()) < 1e-4  # float32 steered close to the sound bound
    assert bool((bounded.lower >= torch.maximum(start, last)).all())
    assert not bool((bounded.lower == steps)[moved].any())  # no step's own bound is returned


def test_estimates_are_crowns_bounds_in_float32_rounded_to_nearest(monkeypatch):
    """`Bounder.estimate` (what chooses a split) back-substitutes once, in float32 rounding to nearest even
    under certification's outward rounding, which it leaves as it was; its bounds are CROWN's within
    float32's rounding and its infeasible subdomains the same."""
    bounder, work, _ = _children_of_an_open_image()
    calls: list[tuple[torch.dtype, bool]] = []
    original = bounding.backsubstitute

    def spied(output, rows, how=None, **kwargs):
        found = original(output, rows, how, **kwargs)
        calls.append((found.dtype, rounds_outward()))
        return found

    with outward_rounding():
        crown = bounder.bound(work, math.inf, steps=0)
        monkeypatch.setattr(bounding, "backsubstitute", spied)
        lower, infeasible = bounder.estimate(work, math.inf)
        assert rounds_outward()
    assert calls == [(torch.float32, False)] and lower.dtype == torch.float64
    torch.testing.assert_close(lower, crown.lower.detach(), rtol=0, atol=1e-5)
    assert torch.equal(infeasible, crown.infeasible) and float((lower - crown.lower.detach()).abs().max()) > 0


def test_float32_steering_optimises_a_convolutional_network_as_float64_does(monkeypatch):
    """On a convolutional network the float32 steps' gradients come out channels-last: the bounds they
    steer to equal those of float64 steps (within float32's rounding), so Adam reads every gradient in its
    own slope's place (torch's fused Adam on the CPU would move each slope by another's)."""
    torch.manual_seed(0)
    net = Sequential(Conv2D(1, 6, 3, stride=2), ReLU(), Conv2D(6, 6, 3), ReLU(), Flatten(), Linear(54, 3))
    net = net.double()
    x = torch.rand(2, 1, 11, 11, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y = net(x).argmax(1)
    lower, upper = (x - 0.25).clamp(0, 1), (x + 0.25).clamp(0, 1)
    work = Work(lower, upper, y, torch.arange(2).expand(2, -1))
    found = {}
    for steering in (torch.float32, torch.float64):
        monkeypatch.setattr(bounding, "STEERING", steering)
        bounder = Bounder(net, None, "hybrid", steps=20, lr_alpha=0.1, lr_beta=0.05)
        crown = bounder.bound(work, math.inf, steps=0).lower
        found[steering] = bounder.bound(work, math.inf).lower
    gain = (found[torch.float64] - crown).detach()
    assert float(gain.min()) > 0.01, "the test needs margins the steps improve"
    torch.testing.assert_close(found[torch.float32], found[torch.float64], rtol=0, atol=1e-4)
