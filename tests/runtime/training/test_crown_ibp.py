"""The CROWN-IBP training goal: its loss against a direct computation of the paper's formula, gradients
into every parameter, use inside other goals, and a short training run that lowers it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from daic.runtime import AbstractContext, Box, Conv2D, Linear, ReLU, Sequential
from daic.runtime.data.sets import Digits
from daic.runtime.data.tensors import TensorData
from daic.runtime.training.goals import CROWNIBP, GoalEnv, Mix, Point, Sample, Sub
from daic.runtime.training.scheme import Scheme
from daic.runtime.training.trainer import LossModule, Trainer
from tests.runtime.helpers import HYPOTHESIS, run_points, sample_points
from tests.runtime.networks import classifier_case, networks


def _net() -> Sequential:
    torch.manual_seed(0)
    return Sequential(Linear(3, 5), ReLU(), Linear(5, 4)).double()


def _direct_bounds(net: Sequential, lower, upper, rows) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B, S)`` lower bounds of the rows ``rows`` (``(B, S, 4)``, linear functions of the logits) computed
    from the formulas: IBP of the hidden layer; CROWN-IBP = the rows times the last layer, through the ReLU
    relaxation of those interval bounds (positive coefficients on ``ls z``, negative on ``us z + ub``),
    then the exact affine bound over the input box; IBP = the same rows on the interval of the hidden
    ReLU's output (the specification folded into the last layer)."""
    first, _, last = net
    centre, radius = (upper + lower) / 2, (upper - lower) / 2
    z_centre = centre @ first.weight.T + first.bias
    z_radius = radius @ first.weight.abs().T
    z_low, z_up = z_centre - z_radius, z_centre + z_radius
    crown, ibp = [], []
    for b in range(len(rows)):
        a = rows[b] @ last.weight  # (S, 5): coefficients on the hidden ReLU's output
        bias = rows[b] @ last.bias
        lo, up = z_low[b], z_up[b]
        active, unstable = lo >= 0, (lo < 0) & (up > 0)
        us = torch.where(active, 1.0, torch.where(unstable, up / (up - lo), 0.0))
        ub = torch.where(unstable, -lo * up / (up - lo), 0.0)
        ls = torch.where(active | (unstable & (up > -lo)), 1.0, 0.0).double()
        slope = torch.where(a > 0, a * ls, a * us)  # (S, 5)
        const = bias + (a.clamp(max=0) * ub).sum(1)
        on_input = slope @ first.weight
        const = const + slope @ first.bias
        crown.append(on_input @ centre[b] - on_input.abs() @ radius[b] + const)
        h_low, h_up = z_low[b].clamp(min=0), z_up[b].clamp(min=0)
        ibp.append(a @ ((h_up + h_low) / 2) - a.abs() @ ((h_up - h_low) / 2) + bias)
    return torch.stack(crown), torch.stack(ibp)


def _margin_rows(target: torch.Tensor) -> torch.Tensor:
    """``(B, 3, 4)``: the rows ``e_t - e_j`` of the margins ``y_t - y_j``, classes ``j != t`` in order."""
    eye = torch.eye(4, dtype=torch.float64)
    return torch.stack([torch.stack([eye[t] - eye[j] for j in range(4) if j != t]) for t in target.tolist()])


def _direct_margins(net: Sequential, lower, upper, target) -> tuple[torch.Tensor, torch.Tensor]:
    return _direct_bounds(net, lower, upper, _margin_rows(target))


def _training_losses(goal, net, lower, upper, target, t=0.0):
    """The per-example losses of the goal's one part, its output read as the part says (as the trainer)."""
    part = goal.part(lower, upper, GoalEnv(net, target, t, torch.Generator()))
    return part.reading.loss(net.abstract(part.value, AbstractContext(training=True)), target)


@pytest.mark.parametrize("beta", [1.0, 0.3, 0.0])
def test_loss_is_cross_entropy_on_the_mixed_margin_lower_bound(beta):
    net = _net()
    lower = torch.tensor([[-0.5, 0.0, 0.2], [0.1, -0.3, -0.2]], dtype=torch.float64)
    upper = lower + torch.tensor([[0.6, 0.4, 0.5], [0.2, 0.9, 0.3]], dtype=torch.float64)
    target = torch.tensor([2, 0])
    losses = _training_losses(CROWNIBP(beta), net, lower, upper, target)
    crown, ibp = _direct_margins(net, lower, upper, target)
    mixed = beta * crown + (1 - beta) * ibp
    logits = torch.zeros(2, 4, dtype=torch.float64)
    for b, t in enumerate(target.tolist()):
        logits[b, [j for j in range(4) if j != t]] = -mixed[b]
    torch.testing.assert_close(losses, F.cross_entropy(logits, target, reduction="none"))


@pytest.mark.parametrize("beta", [1.0, 0.3, 0.0])
def test_fused_loss_is_the_log_of_the_bounded_sum_of_exponentials(beta):
    """Loss fusion by its formula: z_j = y_j - y_t in [l_j, u_j] from the folded intervals; exp below its
    chord, so sum_j exp(z_j) <= 1 + sum_j a_j z_j + b_j, whose upper bound is minus the CROWN-IBP lower
    bound of the row sum_j a_j (e_t - e_j); U mixes that with the intervals' 1 + sum_j exp(u_j)."""
    net = _net()
    lower = torch.tensor([[-0.5, 0.0, 0.2], [0.1, -0.3, -0.2]], dtype=torch.float64)
    upper = lower + torch.tensor([[0.6, 0.4, 0.5], [0.2, 0.9, 0.3]], dtype=torch.float64)
    target = torch.tensor([2, 0])
    losses = _training_losses(CROWNIBP(beta, fused=True), net, lower, upper, target)
    rows = _margin_rows(target)
    _, ibp_margin = _direct_bounds(net, lower, upper, rows)
    _, ibp_negated = _direct_bounds(net, lower, upper, -rows)
    low, up = ibp_negated, -ibp_margin  # bounds of z_j = y_j - y_t
    a = (up.exp() - low.exp()) / (up - low)
    b = low.exp() - a * low
    crown_row, _ = _direct_bounds(net, lower, upper, (a.unsqueeze(2) * rows).sum(1, keepdim=True))
    crown = 1 + b.sum(1) - crown_row.squeeze(1)
    ibp = 1 + up.exp().sum(1)
    expected = torch.log(beta * crown + (1 - beta) * ibp)
    torch.testing.assert_close(losses, expected)


@settings(max_examples=60, **HYPOTHESIS)
@given(net_and_shape=networks(), seed=st.integers(0, 2**31 - 1), beta=st.sampled_from([0.0, 0.5, 1.0]))
def test_both_losses_bound_the_cross_entropy_of_every_point(net_and_shape, seed, beta):
    """Soundness of the training losses: neither is below the cross-entropy at sampled points of the box."""
    case = classifier_case(*net_and_shape, seed)
    if case is None:
        return
    net, lower, upper, target = case
    points = sample_points(lower, upper, 64, torch.Generator().manual_seed(seed))
    outputs = run_points(net, points)  # (N, B, C)
    worst = F.cross_entropy(outputs.flatten(0, 1), target.repeat(outputs.shape[0]), reduction="none")
    worst = worst.view(outputs.shape[0], 2).amax(0)
    for fused in (False, True):
        with torch.no_grad():
            loss = _training_losses(CROWNIBP(beta, fused), net, lower, upper, target)
        assert bool((loss >= worst - 1e-9 * (1 + worst.abs())).all()), (fused, loss, worst)


def test_beta_follows_its_schedule():
    from daic.runtime.training.schedules import Lin

    net = _net()
    lower, upper = torch.zeros(1, 3, dtype=torch.float64), torch.full((1, 3), 0.8, dtype=torch.float64)
    goal = CROWNIBP(Lin(1, 0, 10, 0))
    part = goal.part(lower, upper, GoalEnv(net, torch.tensor([1]), 5.0, torch.Generator()))
    assert part.reading.beta == pytest.approx(0.5)


@pytest.mark.parametrize("fused", [False, True])
def test_gradients_reach_every_parameter(fused):
    torch.manual_seed(1)
    net = Sequential(
        Conv2D(1, 3, 3, padding=1), ReLU(), Conv2D(3, 2, 2, stride=2), ReLU(), Linear(2 * 3 * 3, 5)
    )
    x = torch.rand(4, 1, 6, 6)
    target = torch.tensor([0, 1, 2, 3])
    loss = LossModule(
        net,
        Scheme(data=Digits(image=(1, 8, 8), classes=10), epsilon=0.1, goal=CROWNIBP(0.5, fused), epochs=1),
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
        Mix(Point(), CROWNIBP(1.0, fused=True), 0.5),
        Sub(0.5, CROWNIBP(1.0)),
        Sample(0.5, 1.0, Point(), CROWNIBP(1.0)),
    ):
        parts = goal.parts(lower, upper, env)
        abstract = [p for p in parts if not isinstance(p.value, torch.Tensor)]
        assert len(abstract) == 1 and abstract[0].reading.fused == isinstance(goal, Mix)  # its reading kept
        output = net.abstract(abstract[0].value, AbstractContext(training=True))
        loss = abstract[0].reading.loss(output, env.target)
        assert loss.shape == (2,) and bool(torch.isfinite(loss).all())


@pytest.mark.parametrize("fused", [False, True])
def test_a_short_training_run_lowers_the_loss(fused):
    generator = torch.Generator().manual_seed(0)
    y = torch.arange(64) % 4
    quadrants = torch.eye(4)[y].reshape(64, 1, 2, 1, 2, 1).expand(64, 1, 2, 2, 2, 2).reshape(64, 1, 4, 4)
    # Class k: quadrant k bright.
    x = 0.2 + 0.6 * quadrants + 0.1 * torch.rand(64, 1, 4, 4, generator=generator)
    data = TensorData(x, y, x[:8], y[:8], 4)
    torch.manual_seed(0)
    net = Sequential(Conv2D(1, 4, 3, padding=1), ReLU(), Linear(64, 16), ReLU(), Linear(16, 4))
    from daic.runtime.training.optim import Adam

    scheme = Scheme(
        data=Digits(image=(1, 8, 8), classes=10),  # its augmentation (none) is all the trainer reads of it
        epsilon=0.05,
        goal=CROWNIBP(1.0, fused),
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
