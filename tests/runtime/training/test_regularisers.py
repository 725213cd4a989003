"""The warm-up regularisers of Shi et al. against their formulas computed by hand, the L1 penalty, how a
scheme weighs them over its epsilon ramp, and gradient clipping."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from daic.runtime import Lin, Linear, ReLU, Sequential
from daic.runtime.context import AbstractContext
from daic.runtime.data.sets import Digits
from daic.runtime.data.tensors import TensorData
from daic.runtime.domains import Box, HybridZonotope
from daic.runtime.training.goals import EpsBox
from daic.runtime.training.losses import worst_case_loss
from daic.runtime.training.optim import SGD
from daic.runtime.training.regularisers import l1_penalty, warmup_regulariser
from daic.runtime.training.scheme import Scheme
from daic.runtime.training.trainer import LossModule, Trainer

TAU = 0.5


def network() -> Sequential:
    torch.manual_seed(5)
    net = Sequential(Linear(4, 8), ReLU(), Linear(8, 6), ReLU(), Linear(6, 3)).double()
    with torch.no_grad():  # intervals that grow faster than tau allows, so that tightness is at work
        for layer in (net[0], net[2]):
            layer.weight.mul_(4)
    return net


def interval(layer, lower, upper):
    centre, radius = (lower + upper) / 2, (upper - lower) / 2
    mid = centre @ layer.weight.T + layer.bias
    half = radius @ layer.weight.abs().T
    return mid - half, mid + half


def by_hand(net, lower, upper) -> torch.Tensor:
    r0 = ((upper - lower) / 2).mean()
    l1, u1 = interval(net[0], lower, upper)
    l2, u2 = interval(net[2], l1.clamp(min=0), u1.clamp(min=0))
    total = torch.zeros((), dtype=torch.float64)
    for lo, up in ((l1, u1), (l2, u2)):
        total = total + F.relu(TAU - r0 / ((up - lo) / 2).mean()) / TAU
        c = (lo + up) / 2
        act, inact = (lo > 0).double(), (up < 0).double()
        dev = (c - c.mean()) ** 2
        for r in ((c * act).mean() / -(c * inact).mean(), (dev * act).sum() / (dev * inact).sum()):
            if torch.isfinite(r):
                total = total + F.relu(TAU - torch.minimum(r, 1 / r)) / TAU
    return total / 2


def test_the_regularisers_are_shi_et_als_formulas():
    net = network()
    lower = torch.rand(16, 4, dtype=torch.float64) * 2 - 1
    upper = lower + 0.3
    found = warmup_regulariser(net, lower, upper)
    assert found > 0 and torch.allclose(found, by_hand(net, lower, upper))
    found.backward()
    assert all(p.grad is not None for p in net[0].parameters())


def test_l1_counts_the_weights_only():
    net = network()
    assert torch.allclose(l1_penalty(net), sum(net[i].weight.abs().sum() for i in (0, 2, 4)))


def scheme(**fields) -> Scheme:
    return Scheme(
        data=Digits(image=(4,), classes=3), epsilon=Lin(0, 0.2, 2, 0), goal=EpsBox(), epochs=4, **fields
    )


def test_a_scheme_weighs_the_regulariser_down_over_the_ramp_and_drops_it_after():
    net = network()
    x = torch.rand(16, 4, dtype=torch.float64) * 0.6 + 0.2
    y = torch.randint(0, 3, (16,))
    g = torch.Generator()
    plain = LossModule(net, scheme(), (0.0, 1.0))
    with_reg = LossModule(net, scheme(warmup_reg=0.5, l1=1e-3), (0.0, 1.0))
    # at epoch 1 of the 2-epoch ramp eps = 0.1, half the final 0.2: weight 0.5 * (1 - 0.5)
    extra = with_reg(x, y, 1.0, g) - plain(x, y, 1.0, g)
    expected = 0.25 * warmup_regulariser(net, (x - 0.1).clamp(min=0), (x + 0.1).clamp(max=1))
    assert extra > 0 and torch.allclose(extra, expected)
    after = with_reg(x, y, 3.0, g) - plain(x, y, 3.0, g)  # eps reached its final value
    assert after == 0


def test_a_step_adds_the_l1_penaltys_gradient_and_reports_its_value():
    """The step moves the weights as plain SGD on the loss plus ``l1 * sum |w|`` through autograd, and
    reports that sum."""
    x = torch.rand(16, 4, dtype=torch.float64) * 0.6 + 0.2
    y = torch.randint(0, 3, (16,))
    data = TensorData(x, y, x[:2], y[:2], 3)
    stepped, reference = network(), network()
    fields = dict(l1=1e-2, optimizer=SGD(lr=0.5, momentum=0.0), batch=16)
    trainer = Trainer(stepped, scheme(**fields), data)
    row = trainer.train_epoch(0)  # one step, of the whole set at time 0
    objective = LossModule(reference, scheme(**fields), (0.0, 1.0))(x, y, 0.0, torch.Generator())
    objective = objective + 1e-2 * l1_penalty(reference)
    objective.backward()
    assert row["loss"] == pytest.approx(objective.item(), rel=1e-6)  # summed in float32
    for moved, start in zip(stepped.parameters(), reference.parameters(), strict=True):
        assert torch.allclose(moved, start - 0.5 * start.grad, rtol=1e-12, atol=1e-15)


class CountingReLU(ReLU):
    """A ReLU that counts the abstract elements it is given."""

    passes = 0

    def abstract(self, x, ctx):
        if not isinstance(x, torch.Tensor):
            CountingReLU.passes += 1
        return super().abstract(x, ctx)


def counting_network() -> Sequential:
    net = network()
    net[1], net[3] = CountingReLU(), CountingReLU()
    return net


def regularised_step(net, relu: str = "hybrid") -> tuple[torch.Tensor, int]:
    """The loss of a Box goal at epoch 1 of the ramp (eps 0.1), checked against the goal's loss plus the
    regularisers computed on their own, and how many abstract passes the step made."""
    x = torch.rand(16, 4, dtype=torch.float64) * 0.6 + 0.2
    y = torch.randint(0, 3, (16,))
    CountingReLU.passes = 0
    loss = LossModule(net, scheme(warmup_reg=0.5, relu=relu), (0.0, 1.0))(x, y, 1.0, torch.Generator())
    passes = CountingReLU.passes // 2
    lower, upper = (x - 0.1).clamp(min=0), (x + 0.1).clamp(max=1)
    ctx = AbstractContext(training=True, relu=relu)
    goal = worst_case_loss(net.abstract(HybridZonotope.from_bounds(lower, upper), ctx), y).mean()
    assert torch.allclose(loss, goal + 0.25 * warmup_regulariser(net, lower, upper))
    return loss, passes


def test_the_regularisers_read_the_bounds_of_the_goals_own_interval_pass():
    torch.manual_seed(0)
    shared = regularised_step(counting_network())
    assert shared[1] == 1  # the goal's box pass alone: the regularisers' bounds were recorded in it
    # with DeepZ's ReLU the goal's pass is not the interval one: the regularisers make their own
    deepz = regularised_step(counting_network(), relu="deepz")
    assert deepz[1] == 2 and not torch.allclose(deepz[0], shared[0])


def test_gradient_clipping_bounds_each_steps_move():
    net = network().float()
    data = TensorData(
        torch.rand(20, 4), torch.randint(0, 3, (20,)), torch.rand(4, 4), torch.zeros(4).long(), 3
    )
    before = torch.cat([p.detach().flatten().clone() for p in net.parameters()])
    trainer = Trainer(net, scheme(grad_clip=1e-3, batch=20, optimizer=SGD(lr=1.0, momentum=0)), data)
    trainer.train_epoch(0)
    after = torch.cat([p.detach().flatten() for p in net.parameters()])
    assert 0 < float((after - before).norm()) <= 1e-3 + 1e-7


def test_a_kind_without_neurons_adds_nothing_and_passes_no_nan_back():
    """Every neuron active (l > 0): neither balance ratio is defined, so only tightness counts."""
    net = network()
    lower = torch.rand(16, 4, dtype=torch.float64) * 2 - 1
    upper = lower + 0.3
    centre = (torch.rand(16, 8, dtype=torch.float64) + 1).requires_grad_()
    radius = torch.full((16, 8), 0.5, dtype=torch.float64)
    found = warmup_regulariser(net, lower, upper, relu_inputs=[Box(centre, radius)])
    assert found.item() == pytest.approx((F.relu(TAU - 0.15 / radius.mean()) / TAU).item())  # r0 = 0.3 / 2
    found.backward()
    assert centre.grad is not None and not centre.grad.isnan().any()


def test_a_channels_last_map_gives_what_its_contiguous_copy_gives():
    net = network()
    lower = torch.rand(16, 4, dtype=torch.float64) * 2 - 1
    upper = lower + 0.3
    centre, radius = torch.randn(3, 4, 5, 5, dtype=torch.float64), torch.rand(3, 4, 5, 5, dtype=torch.float64)
    values = []
    for layout in (torch.contiguous_format, torch.channels_last):
        box = Box(centre.contiguous(memory_format=layout), radius.contiguous(memory_format=layout))
        values.append(warmup_regulariser(net, lower, upper, relu_inputs=[box]))
    assert values[0] > 0 and torch.allclose(values[0], values[1], rtol=1e-12, atol=0)
