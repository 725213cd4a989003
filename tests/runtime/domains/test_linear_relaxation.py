"""The linear-relaxation domain (CROWN, alpha-CROWN): soundness on random networks of every layer kind,
exactness where the answer is known, and the representations of coefficients agreeing with each other."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from daic.runtime import AbstractContext, Conv2D, Linear, ReLU, Residual, Sequential
from daic.runtime.certification.alpha_crown import optimized_lower
from daic.runtime.certification.verification import AlphaCROWNBound, BoxBound, CROWNBound, HBoxBound
from daic.runtime.domains import Symbolic
from daic.runtime.domains.coeffs import Dense
from daic.runtime.domains.element import margin_others
from daic.runtime.domains.rounding import outward_rounding
from daic.runtime.domains.symbolic import SAMPLE, backsubstitute, spread_sample, unstable_chunks
from tests.runtime.certification.test_complete import blob_network
from tests.runtime.helpers import HYPOTHESIS, run_points, sample_points
from tests.runtime.networks import branchy_networks, classifier_case, input_box, networks, randomize

TOL = 1e-9


def pgd_minimum(net, rows: torch.Tensor, lower, upper, steps: int = 30) -> torch.Tensor:
    """``(B, S)``: the least value of each row over the box that signed gradient descent finds."""
    b, s = rows.shape[:2]
    x = ((lower + upper) / 2).unsqueeze(1).expand(b, s, *lower.shape[1:]).clone()
    lo, hi = lower.unsqueeze(1).expand_as(x), upper.unsqueeze(1).expand_as(x)
    step = (hi - lo) / 8
    best = torch.full((b, s), float("inf"), dtype=rows.dtype)
    for _ in range(steps):
        x.requires_grad_(True)
        out = net(x.reshape(b * s, *x.shape[2:])).reshape(b, s, -1)
        value = (out * rows).sum(2)
        (grad,) = torch.autograd.grad(value.sum(), x)
        best = torch.minimum(best, value.detach())
        x = torch.maximum(torch.minimum(x.detach() - step * grad.sign(), hi), lo)
    return best


def least_values(net, rows: torch.Tensor, lower, upper, seed: int) -> torch.Tensor:
    """``(B, S)``: the least value of each row over sampled points, corners and PGD's."""
    points = sample_points(lower, upper, 64, torch.Generator().manual_seed(seed))
    outputs = run_points(net, points)  # (N, B, K)
    sampled = torch.einsum("nbk,bsk->nbs", outputs, rows).amin(0)
    return torch.minimum(sampled, pgd_minimum(net, rows, lower, upper))


def symbolic_output(net, lower, upper, intermediate: str, training: bool = False) -> Symbolic:
    companions = ("box", "hbox") if intermediate in ("hbox", "best") else ("box",)
    value = Symbolic.input(lower, upper, companions, crown=intermediate in ("crown", "best"))
    return net.abstract(value, AbstractContext(training=training))


def check_linear_bounds(net, shape, seed: int) -> None:
    randomize(net, seed)
    net = net.double()
    lower, upper = input_box(shape, batch=2, seed=seed, device="cpu")
    outputs = net(lower).shape[1]
    rows = torch.randn((2, 3, outputs), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    truth = least_values(net, rows, lower, upper, seed)
    for intermediate in ("crown", "box", "hbox", "best"):
        for training in (False, True):
            out = symbolic_output(net, lower, upper, intermediate, training)
            found = out.linear_lower(rows)
            scale = 1 + truth.abs()
            worst = ((found - truth) / scale).max().item()
            assert worst <= TOL, (
                f"{intermediate}, training={training}: bound above a reached value by {worst}"
            )


@settings(max_examples=120, **HYPOTHESIS)
@given(net_and_shape=networks(), seed=st.integers(0, 2**31 - 1))
def test_crown_bounds_random_networks_soundly(net_and_shape, seed):
    net, shape = net_and_shape
    check_linear_bounds(net, shape, seed)


@settings(max_examples=40, **HYPOTHESIS)
@given(net_and_shape=branchy_networks(), seed=st.integers(0, 2**31 - 1))
def test_crown_bounds_branches_soundly(net_and_shape, seed):
    net, shape = net_and_shape
    check_linear_bounds(net, shape, seed)


@settings(max_examples=40, **HYPOTHESIS)
@given(net_and_shape=networks(), seed=st.integers(0, 2**31 - 1))
def test_every_domain_bounds_the_margins_soundly_and_alpha_never_loses(net_and_shape, seed):
    case = classifier_case(*net_and_shape, seed)
    if case is None:
        return
    net, lower, upper, target = case
    classes = int(target[-1]) + 1
    eye = torch.eye(classes, dtype=torch.float64)
    others = [[j for j in range(classes) if j != t] for t in target.tolist()]
    rows = torch.stack([eye[t] - eye[o] for t, o in zip(target.tolist(), others, strict=True)])
    truth = least_values(net, rows, lower, upper, seed)
    found = {}
    alphas = [AlphaCROWNBound(steps=4, layers=layers) for layers in ("output", "all")]
    for domain in (BoxBound(), HBoxBound(), CROWNBound(), CROWNBound("best"), *alphas):
        with torch.no_grad():
            found[domain.label] = domain.margins(net, lower, upper, target, "hybrid")
        assert ((found[domain.label] - truth) / (1 + truth.abs())).max().item() <= TOL, domain.label
    for alpha in alphas:
        assert bool((found[alpha.label] >= found["CROWN"]).all()), alpha.label


# --------------------------------------------------------------------------------------------------
# exact answers


def test_without_unstable_relus_crown_is_the_exact_affine_bound():
    """All ReLUs active or dead on the box: the network is one affine map there, and CROWN's bound of any
    row is that map's least value, found here from its Jacobian."""
    torch.manual_seed(0)
    net = Sequential(Conv2D(1, 3, 3, padding=1), ReLU(), Linear(3 * 5 * 5, 6), ReLU(), Linear(6, 4)).double()
    with torch.no_grad():
        net[0].bias.copy_(torch.tensor([20.0, -20.0, 20.0]))
        net[2].bias.copy_(torch.tensor([30.0, -30.0, 30.0, 30.0, -30.0, 30.0]))
    centre = torch.rand(1, 1, 5, 5, dtype=torch.float64)
    lower, upper = centre - 0.3, centre + 0.3
    out = symbolic_output(net, lower, upper, "crown")
    for node_bounds in (out.parents[0].parents[0].bounds(), out.parents[0].parents[0].parents[0].bounds()):
        lo, hi = node_bounds
        assert not bool(((lo < 0) & (hi > 0)).any())
    rows = torch.randn(1, 5, 4, dtype=torch.float64)
    jacobian = torch.autograd.functional.jacobian(lambda x: net(x)[0], centre)[:, 0].reshape(4, -1)
    linear = rows[0] @ jacobian  # (5, 25)
    exact = (rows[0] @ net(centre)[0]) - linear.abs() @ torch.full((25,), 0.3, dtype=torch.float64)
    torch.testing.assert_close(out.linear_lower(rows)[0], exact, rtol=1e-12, atol=1e-12)


def _one_hidden_layer() -> Sequential:
    """``y = relu(x1 + x2 + 0.5) - relu(2 x1 - x2)`` on ``[-1, 1]^2``: both ReLUs unstable."""
    first, second = Linear(2, 2), Linear(2, 1, bias=False)
    with torch.no_grad():
        first.weight.copy_(torch.tensor([[1.0, 1.0], [2.0, -1.0]]))
        first.bias.copy_(torch.tensor([0.5, 0.0]))
        second.weight.copy_(torch.tensor([[1.0, -1.0]]))
    return Sequential(first, ReLU(), second).double()


def test_one_hidden_layer_matches_the_hand_computed_crown_bounds():
    """z1 in [-1.5, 2.5]: upper chord 0.625 z1 + 0.9375, lower slope 1 (u > -l); z2 in [-3, 3]: chord
    0.5 z2 + 1.5, lower slope 0 (u = -l). Lower bound of y: z1 - (0.5 z2 + 1.5) = 1.5 x2 - 1 >= -2.5.
    Lower bound of -y: -(0.625 z1 + 0.9375) + 0 = -0.625 (x1 + x2) - 1.25 >= -2.5, so y <= 2.5 (the true
    maximum is 2, at x = (0.5, 1)); intervals give [-3, 2.5]."""
    net = _one_hidden_layer()
    lower, upper = -torch.ones(1, 2, dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64)
    out = symbolic_output(net, lower, upper, "crown")
    rows = torch.tensor([[[1.0], [-1.0]]], dtype=torch.float64)
    torch.testing.assert_close(out.linear_lower(rows), torch.tensor([[-2.5, -2.5]], dtype=torch.float64))
    box_lower, box_upper = out.bounds()
    torch.testing.assert_close(box_lower, torch.tensor([[-3.0]], dtype=torch.float64))
    torch.testing.assert_close(box_upper, torch.tensor([[2.5]], dtype=torch.float64))


def test_alpha_crown_finds_the_better_slope_of_the_hand_computed_case():
    """For -y the slope b of relu(z2) gives -1.25 - |2b - 0.625| - |0.625 + b|, best at b = 0.3125:
    y <= 2.1875, tighter than CROWN's 2.5 (and above the true 2)."""
    net = _one_hidden_layer()
    lower, upper = -torch.ones(1, 2, dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64)
    with torch.no_grad():
        out = symbolic_output(net, lower, upper, "crown")
        rows = Dense(torch.tensor([[[-1.0]]], dtype=torch.float64))
        crown = backsubstitute(out, rows)
        best = optimized_lower(out, rows, crown, steps=100, lr=0.05)
    assert -crown.item() == pytest.approx(2.5)
    assert -best.item() == pytest.approx(2.1875, abs=2e-3)
    assert -best.item() >= 2.1875 - 1e-12


def test_alpha_crown_steps_round_to_nearest_and_its_bound_rounds_outward():
    """alpha-CROWN's bound under outward rounding lies below what it gives rounding to nearest on the same
    analysis, by no more than the ledger's slack (positive, tiny), and rows its steps did not move keep
    CROWN's bound: whatever its steps round to, the bound it reports is outward."""
    net = blob_network(5, width=6)
    x = torch.rand(20, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)[8:16]
    y = net(x).argmax(1)
    lower, upper = (x - 0.12).clamp(0, 1), (x + 0.12).clamp(0, 1)
    with outward_rounding(), torch.no_grad():
        out = symbolic_output(net, lower, upper, "crown")
        rows = Dense(margin_others(y, 3, torch.float64)[0])
        crown = backsubstitute(out, rows)
        outward = optimized_lower(out, rows, crown, steps=10, lr=0.5)
        with outward_rounding(False):
            nearest = optimized_lower(out, rows, crown, steps=10, lr=0.5)
    moved = nearest > crown
    assert int(moved.sum()) >= 4, "the test needs rows the steps improve"
    gap = (nearest - outward)[moved]
    assert bool((gap > 0).all()) and float(gap.max()) < 1e-9
    assert bool((outward >= crown).all()) and bool((outward[~moved] == crown[~moved]).all())


def test_what_an_analysis_made_rounding_to_nearest_does_not_serve_an_outward_bound():
    """An analysis made under outward rounding, bounded first rounding to nearest (alpha-CROWN's steps),
    then outward: the outward bound and the output's interval equal a fresh analysis's, not the nearest
    ones (the relaxations and the companions' bounds are made again for the outward rounding)."""
    net = blob_network(5, width=6)
    x = torch.rand(20, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)[8:16]
    lower, upper = (x - 0.12).clamp(0, 1), (x + 0.12).clamp(0, 1)
    rows = Dense(torch.eye(3, dtype=torch.float64).expand(8, 3, 3))
    with outward_rounding(), torch.no_grad():
        fresh = symbolic_output(net, lower, upper, "crown")
        expected, expected_box = backsubstitute(fresh, rows), fresh.bounds()
        out = symbolic_output(net, lower, upper, "crown")
        with outward_rounding(False):
            nearest, nearest_box = backsubstitute(out, rows), out.bounds()
        again, again_box = backsubstitute(out, rows), out.bounds()
    assert bool((nearest > expected).all()) and bool((nearest_box[0] > expected_box[0]).all())
    assert torch.equal(again, expected) and all(map(torch.equal, again_box, expected_box))


# --------------------------------------------------------------------------------------------------
# the representations agree


def test_windows_and_dense_rows_give_the_same_intermediate_bounds(monkeypatch):
    """A convolutional node's bounds through `Patches` equal those through dense rows (the same
    arithmetic, another layout), on a network with strides, padding and a residual block."""
    torch.manual_seed(3)
    net = Sequential(
        Conv2D(2, 3, 3, stride=2, padding=1),
        ReLU(),
        Residual([Conv2D(3, 3, 3, padding=1), ReLU(), Conv2D(3, 3, 1)], []),
        ReLU(),
        Conv2D(3, 2, 2, stride=1),
        ReLU(),
        Linear(2 * 3 * 3, 3),
    ).double()
    randomize(net, 3)
    lower, upper = input_box((2, 7, 7), batch=2, seed=3, device="cpu")

    def bounds_of_relu_inputs() -> list[torch.Tensor]:
        out = symbolic_output(net, lower, upper, "crown")
        relus = [node for node in out.ancestors() if isinstance(node.layer, ReLU)]
        return [torch.stack(node.parents[0].bounds()) for node in relus]

    with_windows = bounds_of_relu_inputs()

    monkeypatch.setattr(Symbolic, "_window_bounds", Symbolic._dense_bounds)
    with_dense = bounds_of_relu_inputs()
    assert len(with_windows) == 4
    for a, b in zip(with_windows, with_dense, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@given(st.integers(0, 2**16), st.integers(1, 12))
@settings(**HYPOTHESIS)
def test_the_chunks_of_unstable_neurons_hold_each_once_within_the_budget(seed, per_chunk):
    generator = torch.Generator().manual_seed(seed)
    unstable = torch.rand((6, 10), generator=generator) < torch.rand((6, 1), generator=generator)
    seen = []
    for images, neuron, keep in unstable_chunks(unstable, per_chunk):
        assert neuron.shape == keep.shape and neuron.shape[0] == len(images) and neuron.numel() <= per_chunk
        assert keep[:, 0].all() and 4 * keep.sum() >= 3 * keep.numel()  # at most a quarter is padding
        seen += list(
            zip(images[:, None].expand_as(neuron)[keep].tolist(), neuron[keep].tolist(), strict=True)
        )
    assert sorted(seen) == sorted(map(tuple, unstable.nonzero().tolist()))


@given(st.integers(0, 2**16), st.integers(1, 8))
@settings(**HYPOTHESIS)
def test_a_sample_spreads_over_each_images_unstable_neurons_and_takes_a_few_whole(seed, per_image):
    generator = torch.Generator().manual_seed(seed)
    unstable = torch.rand((5, 60), generator=generator) < torch.rand((5, 1), generator=generator)
    sample = spread_sample(unstable, per_image)
    counts = unstable.sum(1)
    if int(counts.max()) <= 4 * per_image:
        assert sample is None  # a layer this small is refined whole
        return
    assert not bool((sample & ~unstable).any())
    for image in range(5):
        count, ranks = int(counts[image]), unstable[image].cumsum(0)[sample[image]] - 1
        if count <= 4 * per_image:  # an image with few is refined whole
            assert ranks.tolist() == list(range(count))
        else:  # evenly spaced from the first, one every count // per_image
            assert ranks.tolist() == [r * (count // per_image) for r in range(per_image)]


def test_crown_goes_on_past_a_layers_sample_only_where_the_sample_narrowed_enough():
    """``least_gain``: a layer whose sample CROWN narrows by less keeps the intervals' bounds on the rest of
    its neurons (sound, as the intervals are); one whose sample gains enough gets full CROWN."""
    net = Sequential(Linear(4, 12), ReLU(), Linear(12, 20 * SAMPLE), ReLU(), Linear(20 * SAMPLE, 3)).double()
    randomize(net, 3)
    lower, upper = input_box((4,), batch=2, seed=3, device="cpu")

    def relu_input(**settings) -> torch.Tensor:
        out = net.abstract(Symbolic.input(lower, upper, ("box",), **settings), AbstractContext())
        last = next(n.parents[0] for n in out.ancestors() if isinstance(n.layer, ReLU))
        return torch.stack(last.bounds()).detach()

    crown, intervals = relu_input(crown=True), relu_input()
    unstable = (intervals[0] < 0) & (intervals[1] > 0)
    assert int(unstable.sum(1).min()) > 4 * SAMPLE  # the layer is sampled
    torch.testing.assert_close(relu_input(crown=True, least_gain=1e-9), crown, rtol=1e-12, atol=1e-12)
    sampled = relu_input(crown=True, least_gain=1.0)  # no sample narrows its intervals to points
    # The first layer's CROWN bounds move the second's intervals by rounding only; the sample's by more.
    moved = ((sampled - intervals).abs() > 1e-9).any(0)
    assert int(moved.sum(1).min()) > 0 and int(moved.sum(1).max()) <= SAMPLE
    torch.testing.assert_close(sampled[:, moved], crown[:, moved], rtol=1e-12, atol=1e-12)
    width = lambda bounds: float((bounds[1] - bounds[0])[unstable].sum())  # noqa: E731
    assert width(crown) < 0.9 * width(sampled) and width(sampled) <= width(intervals) + 1e-9


def test_an_images_sampled_crown_bounds_do_not_depend_on_its_batch_mates():
    """With ``least_gain``, each image's sample decides for that image alone: an image whose batch mate
    gains more (or less), or has more unstable neurons, gets the bounds it gets alone."""
    net = Sequential(Linear(4, 12), ReLU(), Linear(12, 20 * SAMPLE), ReLU(), Linear(20 * SAMPLE, 3)).double()
    randomize(net, 3)
    lower, upper = input_box((4,), batch=4, seed=3, device="cpu")
    upper = lower + (upper - lower) * torch.tensor([0.05, 1.0, 0.3, 2.0], dtype=torch.float64).view(4, 1)

    def relu_input(lo, up, least_gain) -> torch.Tensor:
        value = Symbolic.input(lo, up, ("box",), crown=True, least_gain=least_gain)
        last = next(n.parents[0] for n in net.abstract(value, AbstractContext()).ancestors()
                    if isinstance(n.layer, ReLU))  # fmt: skip
        return torch.stack(last.bounds()).detach()

    refined = {}
    for least_gain in (0.02, 0.33, 1.0):
        together = relu_input(lower, upper, least_gain)
        alone = torch.cat([relu_input(lower[i : i + 1], upper[i : i + 1], least_gain) for i in range(4)], 1)
        torch.testing.assert_close(together, alone, rtol=1e-12, atol=1e-12)
        refined[least_gain] = ((together - relu_input(lower, upper, 2.0)).abs() > 1e-9).any(0).sum(1).tolist()
    # Images 1 and 3 (310 and 573 unstable neurons) are sampled; at 0.33 the sample pays on 3 alone.
    assert refined[0.02][1] > SAMPLE and refined[0.02][3] > SAMPLE, refined
    assert refined[0.33][1] == 0 and refined[0.33][3] > SAMPLE, refined


def test_an_images_crown_bounds_do_not_depend_on_its_batch_mates_nor_on_the_budget():
    """Images of unlike instability share chunks (or, on a small budget, split theirs): every image's
    intermediate bounds are those it gets alone, with dense rows and windows alike."""
    net = Sequential(
        Conv2D(1, 4, 3, padding=1), ReLU(), Linear(4 * 5 * 5, 12), ReLU(), Linear(12, 3)
    ).double()
    randomize(net, 7)
    lower, upper = input_box((1, 5, 5), batch=5, seed=7, device="cpu")
    upper = lower + (upper - lower) * torch.linspace(0.2, 1.0, 5, dtype=torch.float64).view(5, 1, 1, 1)

    def relu_inputs(lo, up, budget=None) -> list[torch.Tensor]:
        value = Symbolic.input(
            lo, up, ("box",), crown=True, **({} if budget is None else {"budget_bytes": budget})
        )
        out = net.abstract(value, AbstractContext())
        return [torch.stack(n.parents[0].bounds()) for n in out.ancestors() if isinstance(n.layer, ReLU)]

    alone = [relu_inputs(lower[i : i + 1], upper[i : i + 1]) for i in range(5)]
    for budget in (None, 2 * 4 * 5 * 5 * 8 * 3):  # the second: three neurons a chunk
        together = relu_inputs(lower, upper, budget)
        for layer, bounds in enumerate(together):
            expected = torch.cat([image[layer] for image in alone], dim=1)
            torch.testing.assert_close(bounds, expected, rtol=1e-12, atol=1e-12)


def test_past_its_deadline_crown_refines_no_more_neurons_and_keeps_the_interval_bounds():
    """Branch and bound's time limit reaches into its root analysis: past the deadline the intermediate
    bounds are the intervals' (sound, looser), where full CROWN would take minutes on a big network."""
    net = Sequential(Linear(4, 12), ReLU(), Linear(12, 12), ReLU(), Linear(12, 3)).double()
    randomize(net, 5)
    lower, upper = input_box((4,), batch=3, seed=5, device="cpu")

    def relu_inputs(**settings) -> list[torch.Tensor]:
        out = net.abstract(Symbolic.input(lower, upper, ("box",), **settings), AbstractContext())
        return [torch.stack(n.parents[0].bounds()) for n in out.ancestors() if isinstance(n.layer, ReLU)]

    crown, late, intervals = relu_inputs(crown=True), relu_inputs(crown=True, deadline=0.0), relu_inputs()
    for a, b in zip(late, intervals, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    width = lambda bounds: sum(float((b[1] - b[0]).detach().sum()) for b in bounds)  # noqa: E731
    assert width(crown) < width(late) - 0.1  # CROWN was tighter


def test_a_crown_step_past_its_until_bounds_as_crown_over_intervals_does():
    """A VNN-LIB property's limit reaches the cascade's CROWN step: past it, the step's margins are those
    of CROWN over the intervals (sound, looser), and alpha-CROWN takes no step."""
    net = Sequential(Linear(4, 12), ReLU(), Linear(12, 12), ReLU(), Linear(12, 3)).double()
    randomize(net, 5)
    lower, upper = input_box((4,), batch=3, seed=5, device="cpu")
    target = torch.tensor([0, 1, 2])
    late, alpha = CROWNBound(), AlphaCROWNBound(steps=20)
    late.until = alpha.until = 0.0
    with torch.no_grad():
        found = late.margins(net, lower, upper, target, "hybrid")
        intervals = CROWNBound("box").margins(net, lower, upper, target, "hybrid")
        full = CROWNBound().margins(net, lower, upper, target, "hybrid")
        torch.testing.assert_close(found, intervals, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(alpha.margins(net, lower, upper, target, "hybrid"), found)
    assert float((full - found).sum()) > 0.1  # the full CROWN bound was tighter


def test_alpha_crown_of_every_layer_tightens_the_intermediate_bounds_and_beats_the_outputs_alone():
    """Two hidden layers of unstable neurons: the second layer's bounds move with the first's slopes, so
    optimising them for the margins (as auto_LiRPA's CROWN-Optimized does) gains on optimising the margins'
    slopes alone; both stay below the least margins that sampling reaches."""
    generator = torch.Generator().manual_seed(7)
    net = Sequential(Linear(6, 12), ReLU(), Linear(12, 12), ReLU(), Linear(12, 12), ReLU(), Linear(12, 4))
    net = net.double().eval()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64))
    lower = torch.rand(3, 6, generator=generator, dtype=torch.float64)
    upper = lower + 0.8
    target = torch.tensor([0, 1, 2])
    with torch.no_grad():
        bounds = {
            layers: AlphaCROWNBound(steps=30, layers=layers).margins(net, lower, upper, target, "hybrid")
            for layers in ("output", "all")
        }
    assert float((bounds["all"] - bounds["output"]).sum()) > 0.1
    x = lower + (upper - lower) * torch.rand(20000, 1, 6, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        y = net(x.view(-1, 6)).view(20000, 3, 4)
    reached = torch.stack([y[:, i, t] - y[:, i, [j for j in range(4) if j != t]].T for i, t in
                           enumerate(target.tolist())], 0).amin(-1)  # fmt: skip
    assert bool((bounds["all"] <= reached + 1e-9).all())


@pytest.mark.parametrize(("second", "seed", "shift"), [("Tanh", 0, 1.0), ("Sigmoid", 2, 2.0)])
def test_alpha_crown_of_every_layer_optimises_the_neurons_a_smooth_activation_relaxes(second, seed, shift):
    """A Tanh or Sigmoid relaxes every neuron of its input, not only those whose interval crosses zero:
    alpha-CROWN of every layer gives them rows and slopes. Here no input of the second layer's activation
    crosses zero on any box (shifted so), so choosing by the zero crossing left that layer's bounds at
    CROWN's and the bounds equal to the outputs' alone; now they are tighter, and below every sampled
    margin."""
    from daic.runtime import Sigmoid, Tanh
    from tests.runtime.certification.test_complete import blob_network

    net = blob_network(seed, width=8, second={"Tanh": Tanh, "Sigmoid": Sigmoid}[second])
    x = torch.rand(12, 2, generator=torch.Generator().manual_seed(seed + 10), dtype=torch.float64)
    with torch.no_grad():
        net[2].bias.sub_(net[:3](x).amin(0)).add_(shift)
        y = net(x).argmax(1)
    lower, upper = (x - 0.1).clamp(0, 1), (x + 0.1).clamp(0, 1)
    points = lower + (upper - lower) * torch.rand(3000, 1, 2, generator=torch.Generator().manual_seed(1),
                                                  dtype=torch.float64)  # fmt: skip
    with torch.no_grad():
        assert float(net[:3](points.view(-1, 2)).min()) > 0  # no input of the activation crosses zero
        bounds = {
            layers: AlphaCROWNBound(steps=20, layers=layers).margins(net, lower, upper, y, "hybrid")
            for layers in ("output", "all")
        }
        outputs = net(points.view(-1, 2)).view(3000, 12, 3)
    assert float((bounds["all"] - bounds["output"]).sum()) > 0.03
    reached = torch.stack([outputs[:, i, t] - outputs[:, i, [j for j in range(3) if j != t]].T
                           for i, t in enumerate(y.tolist())], 0).amin(-1)  # fmt: skip
    assert bool((bounds["all"] <= reached + 1e-9).all())


@pytest.mark.parametrize("activation", ["Sigmoid", "Tanh"])
def test_alpha_crown_moves_where_the_tangents_of_sigmoid_and_tanh_touch(activation):
    """Sigmoid and Tanh have no lower lines through the origin to optimise; alpha-CROWN moves where their
    tangents touch instead (CROWN's touch at the middle), per margin and neuron: the bounds rise above
    CROWN's (they were CROWN's before), the outputs' slopes and every layer's alike, and stay below every
    sampled margin."""
    from daic.runtime import Sigmoid, Tanh
    from tests.runtime.certification.test_complete import blob_network

    net = blob_network(0, width=8, activation={"Sigmoid": Sigmoid, "Tanh": Tanh}[activation])
    x = torch.rand(12, 2, generator=torch.Generator().manual_seed(10), dtype=torch.float64)
    with torch.no_grad():
        y = net(x).argmax(1)
    lower, upper = (x - 0.1).clamp(0, 1), (x + 0.1).clamp(0, 1)
    with torch.no_grad():
        crown = CROWNBound().margins(net, lower, upper, y, "hybrid")
        bounds = [AlphaCROWNBound(steps=20, layers=layers).margins(net, lower, upper, y, "hybrid")
                  for layers in ("output", "all")]  # fmt: skip
        points = lower + (upper - lower) * torch.rand(4000, 1, 2, generator=torch.Generator().manual_seed(1),
                                                      dtype=torch.float64)  # fmt: skip
        outputs = net(points.view(-1, 2)).view(4000, 12, 3)
    reached = torch.stack([outputs[:, i, t] - outputs[:, i, [j for j in range(3) if j != t]].T
                           for i, t in enumerate(y.tolist())], 0).amin(-1)  # fmt: skip
    for bound in bounds:
        assert bool((bound >= crown - 1e-12).all()) and float((bound - crown).sum()) > 0.5
        assert bool((bound <= reached + 1e-9).all())


def test_alpha_crown_of_every_layer_needs_crowns_intermediate_bounds():
    with pytest.raises(ValueError, match='intermediate="box" takes none from CROWN'):
        AlphaCROWNBound(layers="all", intermediate="box")


@pytest.mark.parametrize("c_out", [1, 2, 5])
@pytest.mark.parametrize(("stride", "padding", "extra"), [((1, 1), (0, 0), (0, 0)), ((2, 2), (1, 1), (1, 1))])
def test_the_fast_transposed_convolutions_give_torchs_numbers(c_out, stride, padding, extra):
    from daic.runtime.domains.coeffs import transposed_conv

    generator = torch.Generator().manual_seed(c_out)
    x = torch.randn(6, 4, 5, 5, generator=generator)
    weight = torch.randn(4, c_out, 3, 3, generator=generator)
    expected = torch.nn.functional.conv_transpose2d(x, weight, None, stride, padding, extra)
    torch.testing.assert_close(transposed_conv(x, weight, stride, padding, extra), expected)
