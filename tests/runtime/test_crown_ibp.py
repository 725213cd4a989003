"""The CROWN-IBP training goal: its loss against a direct computation of the paper's formula, gradients
into every parameter, use inside other goals, and a short training run that lowers it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from daic.runtime import AbstractContext, Box, Conv2D, Linear, ReLU, Sequential
from daic.runtime.data import Digits, TensorData
from daic.runtime.goals import CROWNIBP, GoalEnv, Mix, Point, Sample, Sub
from daic.runtime.losses import worst_case_loss
from daic.runtime.scheme import Scheme
from daic.runtime.trainer import LossModule, Trainer


def _net() -> Sequential:
    torch.manual_seed(0)
    return Sequential(Linear(3, 5), ReLU(), Linear(5, 4)).double()


def _direct_margins(net: Sequential, lower, upper, target) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B, 3)`` lower bounds of ``y_t - y_j`` (classes ``j != t`` in order) computed from the formulas:
    IBP of the hidden layer; CROWN-IBP = the margin rows times the last layer, through the ReLU relaxation
    of those interval bounds (positive coefficients on ``ls z``, negative on ``us z + ub``), then the exact
    affine bound over the input box; IBP = the same rows on the interval of the hidden ReLU's output."""
    first, _, last = net
    centre, radius = (upper + lower) / 2, (upper - lower) / 2
    z_centre = centre @ first.weight.T + first.bias
    z_radius = radius @ first.weight.abs().T
    z_low, z_up = z_centre - z_radius, z_centre + z_radius
    crown, ibp = [], []
    for b, t in enumerate(target.tolist()):
        rows = torch.stack([torch.eye(4)[t] - torch.eye(4)[j] for j in range(4) if j != t]).double()
        a = rows @ last.weight  # (3, 5): coefficients on the hidden ReLU's output
        bias = rows @ last.bias
        lo, up = z_low[b], z_up[b]
        active, unstable = lo >= 0, (lo < 0) & (up > 0)
        us = torch.where(active, 1.0, torch.where(unstable, up / (up - lo), 0.0))
        ub = torch.where(unstable, -lo * up / (up - lo), 0.0)
        ls = torch.where(active | (unstable & (up > -lo)), 1.0, 0.0).double()
        slope = torch.where(a > 0, a * ls, a * us)  # (3, 5)
        const = bias + (a.clamp(max=0) * ub).sum(1)
        on_input = slope @ first.weight  # (3, 3)
        const = const + slope @ first.bias
        crown.append(on_input @ centre[b] - on_input.abs() @ radius[b] + const)
        h_low, h_up = z_low[b].clamp(min=0), z_up[b].clamp(min=0)
        ibp.append(a @ ((h_up + h_low) / 2) - a.abs() @ ((h_up - h_low) / 2) + bias)
    return torch.stack(crown), torch.stack(ibp)


@pytest.mark.parametrize("beta", [1.0, 0.3, 0.0])
def test_loss_is_cross_entropy_on_the_mixed_margin_lower_bound(beta):
    net = _net()
    lower = torch.tensor([[-0.5, 0.0, 0.2], [0.1, -0.3, -0.2]], dtype=torch.float64)
    upper = lower + torch.tensor([[0.6, 0.4, 0.5], [0.2, 0.9, 0.3]], dtype=torch.float64)
    target = torch.tensor([2, 0])
    env = GoalEnv(net, target, 0.0, torch.Generator())
    value = net.abstract(CROWNIBP(beta).alpha(lower, upper, env), AbstractContext(training=True))
    crown, ibp = _direct_margins(net, lower, upper, target)
    mixed = beta * crown + (1 - beta) * ibp
    logits = torch.zeros(2, 4, dtype=torch.float64)
    for b, t in enumerate(target.tolist()):
        logits[b, [j for j in range(4) if j != t]] = -mixed[b]
    torch.testing.assert_close(
        worst_case_loss(value, target), F.cross_entropy(logits, target, reduction="none")
    )


def test_beta_follows_its_schedule():
    from daic.runtime.schedules import Lin

    net = _net()
    lower, upper = torch.zeros(1, 3, dtype=torch.float64), torch.full((1, 3), 0.8, dtype=torch.float64)
    goal = CROWNIBP(Lin(1, 0, 10, 0))
    value = goal.alpha(lower, upper, GoalEnv(net, torch.tensor([1]), 5.0, torch.Generator()))
    assert value.analysis.crown_weight == pytest.approx(0.5)


def test_gradients_reach_every_parameter():
    torch.manual_seed(1)
    net = Sequential(
        Conv2D(1, 3, 3, padding=1), ReLU(), Conv2D(3, 2, 2, stride=2), ReLU(), Linear(2 * 3 * 3, 5)
    )
    x = torch.rand(4, 1, 6, 6)
    target = torch.tensor([0, 1, 2, 3])
    loss = LossModule(
        net,
        Scheme(data=Digits(), epsilon=0.1, goal=CROWNIBP(0.5), epochs=1),
        (0.0, 1.0),
    )(x, target, 0.0, torch.Generator())
    loss.backward()
    for name, parameter in net.named_parameters():
        assert parameter.grad is not None and bool(parameter.grad.abs().sum() > 0), name


def test_inside_mix_sub_and_sample():
    net = _net().float()
    lower, upper = torch.zeros(2, 3), torch.full((2, 3), 0.5)
    env = GoalEnv(net, torch.tensor([0, 1]), 0.0, torch.Generator().manual_seed(0))
    for goal in (
        Mix(Point(), CROWNIBP(1.0), 0.5),
        Sub(0.5, CROWNIBP(1.0)),
        Sample(0.5, 1.0, Point(), CROWNIBP(1.0)),
    ):
        parts = goal.parts(lower, upper, env)
        abstract = [p for p in parts if not isinstance(p.value, torch.Tensor)]
        assert len(abstract) == 1
        loss = worst_case_loss(net.abstract(abstract[0].value, AbstractContext(training=True)), env.target)
        assert loss.shape == (2,) and bool(torch.isfinite(loss).all())


def test_a_short_training_run_lowers_the_loss():
    generator = torch.Generator().manual_seed(0)
    y = torch.arange(64) % 4
    quadrants = torch.eye(4)[y].reshape(64, 1, 2, 1, 2, 1).expand(64, 1, 2, 2, 2, 2).reshape(64, 1, 4, 4)
    # Class k: quadrant k bright.
    x = 0.2 + 0.6 * quadrants + 0.1 * torch.rand(64, 1, 4, 4, generator=generator)
    data = TensorData(x, y, x[:8], y[:8], 4)
    torch.manual_seed(0)
    net = Sequential(Conv2D(1, 4, 3, padding=1), ReLU(), Linear(64, 16), ReLU(), Linear(16, 4))
    from daic.runtime.optim import Adam

    scheme = Scheme(
        data=Digits(),  # its augmentation (none) is all the trainer reads of it
        epsilon=0.05,
        goal=CROWNIBP(1.0),
        epochs=1,
        batch=16,
        optimizer=Adam(lr=0.01),
        test=[],
    )
    trainer = Trainer(net, scheme, data)
    losses = [trainer.train_epoch(epoch)["loss"] for epoch in range(10)]
    assert losses[-1] < 0.5 * losses[0]


def test_the_goal_runs_on_boxes_of_every_shape():
    """The goal's element is a `Symbolic` whose Box companion is the IBP of the box."""
    net = _net()
    lower, upper = torch.zeros(1, 3, dtype=torch.float64), torch.ones(1, 3, dtype=torch.float64)
    value = CROWNIBP(1.0).alpha(lower, upper, GoalEnv(net, torch.tensor([0]), 0.0, torch.Generator()))
    out = net.abstract(value, AbstractContext(training=True))
    box = net.abstract(Box.from_bounds(lower, upper), AbstractContext(training=True))
    torch.testing.assert_close(out.bounds()[0], box.lower())
    torch.testing.assert_close(out.bounds()[1], box.upper())
