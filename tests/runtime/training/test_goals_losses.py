"""Goals (Table 2), margins and certificates, attacks: the formulas with hand-computed values."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from daic.runtime import Box, HybridZonotope, Pass, trace
from daic.runtime.certification.attacks import ifgsm, mifgsm, pgd
from daic.runtime.context import AbstractContext
from daic.runtime.training.goals import (
    BiSample,
    CCMix,
    EpsBox,
    ExpMix,
    Goal,
    GoalEnv,
    IFGSMPoint,
    Mix,
    Normal,
    PGDPoint,
    Point,
    Sample,
    SmallBox,
    Sub,
    Uniform,
)
from daic.runtime.training.losses import certified, margin_upper, worst_case_loss
from daic.runtime.training.parts import JointPart
from daic.runtime.training.schedules import Lin


class Recorder(Goal):
    """A goal that records the box it is given."""

    def __init__(self):
        self.boxes = []

    def alpha(self, lower, upper, env):
        self.boxes.append((lower.clone(), upper.clone()))
        return (lower + upper) / 2


def env(t=0.0, seed=0, model=None, target=None):
    return GoalEnv(
        model or nn.Identity(),
        target if target is not None else torch.zeros(1, dtype=torch.long),
        t,
        torch.Generator().manual_seed(seed),
    )


L, U = torch.tensor([[0.0, 0.2]]), torch.tensor([[1.0, 0.6]])


def test_point_box_and_mix_weights():
    parts = Mix(Point(), EpsBox(), 0.25).parts(L, U, env())
    assert [p.weight for p in parts] == [0.75, 0.25]
    assert torch.equal(parts[0].value, torch.tensor([[0.5, 0.4]]))
    box = parts[1].value
    assert isinstance(box, HybridZonotope) and box.m == 0
    assert torch.allclose(box.head, torch.tensor([[0.5, 0.4]])) and torch.allclose(
        box.beta, torch.tensor([[0.5, 0.2]])
    )
    # A schedule as the weight: Lin(0, 0.5, 10, 2) is 0 until epoch 2, then 0.25 at epoch 7.
    weights = [p.weight for p in Mix(Point(), EpsBox(), Lin(0, 0.5, 10, 2)).parts(L, U, env(t=7.0))]
    assert weights == pytest.approx([0.75, 0.25])
    assert len(Mix(Point(), EpsBox(), Lin(0, 0.5, 10, 2)).parts(L, U, env(t=1.0))) == 1  # weight 0 drops


def test_sub_scales_the_box_about_its_centre():
    rec = Recorder()
    Sub(0.5, rec).parts(L, U, env())
    lower, upper = rec.boxes[0]
    assert torch.allclose(lower, torch.tensor([[0.25, 0.3]])) and torch.allclose(
        upper, torch.tensor([[0.75, 0.5]])
    )


def test_sample_places_a_box_of_width_delta_around_a_sampled_centre():
    rec_s, rec_t = Recorder(), Recorder()
    Sample(0.2, 1, rec_s, rec_t).parts(L, U, env())
    # g_s sees the box scaled by 1 - r * delta = 0.8; g_t a box of width 0.2 (u - l) around g_s's centre.
    s_lower, s_upper = rec_s.boxes[0]
    assert torch.allclose(s_upper - s_lower, 0.8 * (U - L))
    t_lower, t_upper = rec_t.boxes[0]
    assert torch.allclose(t_upper - t_lower, 0.2 * (U - L))
    assert torch.allclose((t_lower + t_upper) / 2, (s_lower + s_upper) / 2)
    # With a sampling g_s the sampled box stays inside the input box.
    rec = Recorder()
    for seed in range(20):
        Sample(0.3, 1, Uniform(), rec).parts(L, U, env(seed=seed))
    assert all((lo >= L - 1e-6).all() and (hi <= U + 1e-6).all() for lo, hi in rec.boxes)


def test_bisample_box_reaches_as_far_as_g1():
    rec = Recorder()
    g1 = Sub(0.5, EpsBox())  # UB of the half-size box: centre + half the radius
    BiSample(g1, rec).parts(L, U, env())
    lower, upper = rec.boxes[0]
    assert torch.allclose(upper - lower, 0.5 * (U - L))


@pytest.mark.parametrize("goal", [Normal(), Uniform()])
def test_sampled_points_lie_in_the_box_and_follow_the_generator(goal):
    lower, upper = torch.zeros(64, 5), torch.ones(64, 5) * 0.1
    a = goal.alpha(lower, upper, env(seed=3))
    b = goal.alpha(lower, upper, env(seed=3))
    assert torch.equal(a, b) and (a >= lower).all() and (a <= upper).all()
    assert a.std() > 0


def test_margins_are_exact_on_points_and_boxes():
    out = torch.tensor([[1.0, 3.0, 2.0]])
    target = torch.tensor([1])
    assert torch.equal(margin_upper(out, target), torch.tensor([[-2.0, 0.0, -1.0]]))
    box = Box(torch.tensor([[1.0, 3.0, 2.0]]), torch.tensor([[0.5, 1.0, 0.25]]))
    # ub(y_0 - y_1) = 1 + 0.5 - (3 - 1) = -0.5; ub(y_2 - y_1) = 2.25 - 2 = 0.25
    assert torch.allclose(margin_upper(box, target), torch.tensor([[-0.5, 0.0, 0.25]]))
    assert certified(box, target).tolist() == [False]
    assert certified(Box(out, torch.full_like(out, 0.4)), target).tolist() == [True]


def test_zonotope_margins_use_correlation():
    # y0 = e, y1 = e + 1: intervals overlap, but y1 - y0 = 1 exactly.
    errors = torch.tensor([[[1.0, 1.0]]])
    z = HybridZonotope(torch.tensor([[0.0, 1.0]]), torch.zeros(1, 2), errors)
    assert torch.allclose(margin_upper(z, torch.tensor([1])), torch.tensor([[-1.0, 0.0]]))
    assert certified(z, torch.tensor([1])).tolist() == [True]
    assert certified(Box.from_bounds(*z.bounds()), torch.tensor([1])).tolist() == [False]


def test_worst_case_loss_bounds_every_point():
    torch.manual_seed(0)
    lin = nn.Linear(4, 3)
    lower, upper = torch.rand(5, 4), torch.rand(5, 4)
    lower, upper = torch.minimum(lower, upper), torch.maximum(lower, upper)
    target = torch.randint(0, 3, (5,))
    center, radius = (lower + upper) / 2, (upper - lower) / 2
    out = Box(lin(center), radius @ lin.weight.abs().T)
    worst = worst_case_loss(out, target)
    for _ in range(50):
        x = lower + (upper - lower) * torch.rand(5, 4)
        loss = nn.functional.cross_entropy(lin(x), target, reduction="none")
        assert (loss <= worst + 1e-6).all()


def tiny_model():
    torch.manual_seed(1)
    return nn.Sequential(nn.Flatten(), nn.Linear(6, 3))


@pytest.mark.parametrize("attack", ["ifgsm", "pgd", "mifgsm"])
def test_attacks_stay_in_the_box_and_raise_the_loss(attack):
    model = tiny_model()
    x = torch.rand(8, 6)
    target = torch.randint(0, 3, (8,))
    lower, upper = x - 0.1, x + 0.1
    if attack == "ifgsm":
        adv = ifgsm(model, lower, upper, target, 3)
    elif attack == "pgd":
        adv = pgd(model, lower, upper, target, 10, generator=torch.Generator().manual_seed(0))
    else:
        adv = mifgsm(model, x, lower, upper, target, k=10, step=0.02)
    assert (adv >= lower - 1e-7).all() and (adv <= upper + 1e-7).all()
    loss = nn.functional.cross_entropy
    assert loss(model(adv), target) > loss(model(x), target)
    assert all(p.grad is None for p in model.parameters())


def test_ifgsm_goal_returns_the_attack_point():
    model = tiny_model()
    target = torch.randint(0, 3, (4,))
    lower, upper = torch.zeros(4, 6), torch.full((4, 6), 0.2)
    point = IFGSMPoint(2).alpha(lower, upper, env(model=model, target=target))
    assert torch.equal(point, ifgsm(model, lower, upper, target, 2))


def test_mifgsm_steps_scale_with_each_images_epsilon():
    """A linear model's loss gradient keeps its sign, so every step moves the same way: with the default
    step (eps / 10, per image) 20 steps reach the corner of each ball, large or small; the paper's fixed
    0.0031373 (eps / 10 at 8/255) stops short of an MNIST-sized ball (20 x 0.0031373 = 0.063 < 0.3)."""
    model = nn.Sequential(nn.Linear(2, 2))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, -1.0], [-1.0, 1.0]]))
        model[0].bias.zero_()
    x = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    eps = torch.tensor([[0.3], [0.02]])
    lower, upper = x - eps, x + eps
    target = torch.tensor([0, 0])
    corner = torch.stack([x[:, 0] - eps[:, 0], x[:, 1] + eps[:, 0]], dim=1)
    torch.testing.assert_close(mifgsm(model, x, lower, upper, target), corner)
    fixed = mifgsm(model, x, lower, upper, target, step=0.0031373)
    assert fixed[0, 0].item() == pytest.approx(0.5 - 20 * 0.0031373, abs=1e-6)
    torch.testing.assert_close(fixed[1], corner[1])


def two_layer_network() -> tuple[nn.Module, list[torch.Tensor]]:
    from daic.runtime import Linear, ReLU, Sequential

    torch.manual_seed(3)
    net = Sequential(Linear(2, 4), ReLU(), Linear(4, 3)).double()
    return net, [p.detach() for p in net.parameters()]


def ibp_margins(params, lower, upper, target):
    """Interval bounds by hand, as IBP computes them: upper bounds of y_j - y_t for every j (0 at t)."""
    w1, b1, w2, b2 = params
    centre, radius = (upper + lower) / 2, (upper - lower) / 2
    z_low, z_up = centre @ w1.T + b1 - radius @ w1.abs().T, centre @ w1.T + b1 + radius @ w1.abs().T
    h_low, h_up = z_low.clamp(min=0), z_up.clamp(min=0)
    mid, half = (h_up + h_low) / 2, (h_up - h_low) / 2
    y_low, y_up = mid @ w2.T + b2 - half @ w2.abs().T, mid @ w2.T + b2 + half @ w2.abs().T
    t = target[:, None]
    return (y_up - y_low.gather(1, t)).scatter(1, t, 0.0)


@pytest.mark.parametrize("weight", [0.0, 0.3, 1.0])
def test_expressive_losses_are_the_papers_formulas(weight):
    """CC-IBP: CE((1 - a) z_point + a z_IBP); Exp-IBP: CE_point ** (1 - a) * CE_IBP ** a (batch means);
    z the upper bounds of y_j - y_t, computed here by hand."""
    net, params = two_layer_network()
    lower = torch.tensor([[0.1, 0.2], [0.5, 0.0], [0.3, 0.6]], dtype=torch.float64)
    upper = lower + 0.3
    target = torch.tensor([0, 2, 1])
    point = (lower + upper) / 2
    z_point = margin_upper(net(point), target)
    z_ibp = ibp_margins(params, lower, upper, target)
    ctx = AbstractContext(training=True)
    for goal, expected in (
        (CCMix(Point(), EpsBox(), weight), F.cross_entropy((1 - weight) * z_point + weight * z_ibp, target)),
        (ExpMix(Point(), EpsBox(), weight),
         F.cross_entropy(z_point, target) ** (1 - weight) * F.cross_entropy(z_ibp, target) ** weight),
    ):  # fmt: skip
        (part,) = goal.parts(lower, upper, env(target=target))
        assert isinstance(part, JointPart) and part.weight == 1.0
        assert torch.allclose(margin_upper(net.abstract(part.second.value, ctx), target), z_ibp)
        trained = part.train(lambda v: _forward(net, v, ctx), target)
        assert torch.allclose(trained.loss, expected) and len(trained.passes) == 2


def test_expressive_losses_follow_their_schedule_and_reach_every_parameter():
    net, _ = two_layer_network()
    lower, target = torch.rand(8, 2, dtype=torch.float64) * 0.7, torch.randint(0, 3, (8,))
    (part,) = CCMix(Point(), EpsBox(), Lin(0, 1, 10, 0)).parts(lower, lower + 0.3, env(t=5.0, target=target))
    ctx = AbstractContext(training=True)
    first, second = net(part.first.value), net.abstract(part.second.value, ctx)
    z = 0.5 * margin_upper(first, target) + 0.5 * margin_upper(second, target)  # Lin at epoch 5 of 10: 0.5
    loss = part.train(lambda v: _forward(net, v, ctx), target).loss
    assert torch.allclose(loss, F.cross_entropy(z, target))
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters())


def _forward(net, value, ctx) -> Pass:
    """The trainer's pass: logits for a point, the output element for an element."""
    return Pass(net(value)) if isinstance(value, torch.Tensor) else trace(net, value, ctx)


def linear_model() -> nn.Module:
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(3, 4)).double()
    return model


def test_pgd_finds_the_corner_of_highest_cross_entropy_of_a_linear_network():
    """Cross-entropy of an affine network is convex in the input: its maximum over a box is at a corner,
    which eight decaying steps of half the radius reach from any start."""
    model = linear_model()
    lower = torch.rand(6, 3, dtype=torch.float64)
    upper = lower + torch.rand(6, 3, dtype=torch.float64) * 0.5
    target = torch.randint(0, 4, (6,))
    found = PGDPoint().alpha(lower, upper, env(model=model, target=target))
    assert bool(((found >= lower) & (found <= upper)).all())
    bits = torch.tensor([[(i >> d) & 1 for d in range(3)] for i in range(8)], dtype=torch.bool)
    corners = torch.where(bits[:, None], upper[None], lower[None])  # (8, B, 3)
    best = torch.stack([F.cross_entropy(model(c), target, reduction="none") for c in corners]).amax(0)
    reached = F.cross_entropy(model(found), target, reduction="none")
    assert torch.allclose(reached, best)


def test_small_box_is_sabrs_box_around_the_attack_point():
    """size x the radius, around the attack's point moved inside the input box; Point as the attack
    centres it, size 1 is the input box."""
    model = linear_model()
    lower = torch.rand(6, 3, dtype=torch.float64)
    upper = lower + 0.4
    target = torch.randint(0, 4, (6,))
    e = env(model=model, target=target)
    box = SmallBox(0.25, PGDPoint(), EpsBox()).alpha(lower, upper, env(model=model, target=target))
    lo, hi = box.bounds()
    assert torch.allclose(hi - lo, torch.full_like(lo, 0.1))
    assert bool(((lo >= lower - 1e-12) & (hi <= upper + 1e-12)).all())
    point = PGDPoint().alpha(lower, upper, env(model=model, target=target))
    assert torch.allclose((lo + hi) / 2, point.clamp(lower + 0.05, upper - 0.05))
    centred = SmallBox(0.25, Point(), EpsBox()).alpha(lower, upper, e).bounds()
    assert torch.allclose(centred[0], lower + 0.15) and torch.allclose(centred[1], upper - 0.15)
    whole = SmallBox(1.0, PGDPoint(), EpsBox()).alpha(lower, upper, e).bounds()
    assert torch.allclose(whole[0], lower) and torch.allclose(whole[1], upper)
