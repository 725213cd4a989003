"""Complete verification: branch and bound against the exact answer, found by enumerating every ReLU
activation pattern of small networks (a linear program per pattern), and the cascade's bookkeeping."""

from __future__ import annotations

import itertools
import math
import time

import pytest
import torch
from scipy.optimize import linprog

from daic.runtime import Abs, HardTanh, LeakyReLU, Linear, ReLU, Sequential, Sigmoid, Tanh
from daic.runtime.certification.attacks import Attacker
from daic.runtime.certification.certify import (
    Attack,
    Batch,
    Outcome,
    cascade,
    certify,
    falsify,
    least_margins,
)
from daic.runtime.certification.search import ATTACK_SHARE, BranchAndBound, passes, refined_intermediates
from daic.runtime.certification.search.bounding import Bounder
from daic.runtime.certification.search.branch_and_bound import _Run
from daic.runtime.certification.search.root import RootPhase
from daic.runtime.certification.verification import BoxBound, CROWNBound
from daic.runtime.context import AbstractContext
from daic.runtime.domains import Symbolic
from daic.runtime.domains.rounding import outward_rounding
from daic.runtime.domains.symbolic import SAMPLE
from daic.runtime.layers.containers import Concat, Residual

EPS = 0.2


def blob_network(
    seed: int, width: int = 5, activation: type = ReLU, second: type | None = None
) -> Sequential:
    """A two-hidden-layer network (of `activation`, a factory; the second hidden layer's `second` where
    given) trained briefly on three 2-D blobs: its boundaries cross [0, 1]^2."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[0.25, 0.3], [0.7, 0.35], [0.5, 0.75]], dtype=torch.float64)
    labels = torch.randint(0, 3, (300,), generator=g)
    points = centres[labels] + 0.12 * torch.randn(300, 2, generator=g, dtype=torch.float64)
    torch.manual_seed(seed)
    net = Sequential(Linear(2, width), activation(), Linear(width, width), (second or activation)(),
                     Linear(width, 3))  # fmt: skip
    net = net.double()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.03)
    for _ in range(200):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(points), labels).backward()
        optimizer.step()
    return net


def pieces(activation: torch.nn.Module) -> list[tuple[float, float, float, float]]:
    """The affine pieces of a piecewise-linear member: ``(slope, intercept, start, end)`` of its input."""
    if isinstance(activation, HardTanh):
        return [(0.0, -1.0, -math.inf, -1.0), (1.0, 0.0, -1.0, 1.0), (0.0, 1.0, 1.0, math.inf)]
    below = {LeakyReLU: getattr(activation, "negative_slope", 0.0), Abs: -1.0}.get(type(activation), 0.0)
    return [(below, 0.0, -math.inf, 0.0), (1.0, 0.0, 0.0, math.inf)]


def _possible(
    member: list[tuple[float, float, float, float]], low: torch.Tensor, high: torch.Tensor
) -> list[list[tuple[float, float, float, float]]]:
    """Per neuron, the pieces its input may reach on ``[low, high]``."""
    return [[p for p in member if p[2] < up and p[3] > lo] or [p for p in member if p[2] <= up and p[3] >= lo]
            for lo, up in zip(low.tolist(), high.tolist(), strict=True)]  # fmt: skip


def exact_least_margin(net: Sequential, lower: torch.Tensor, upper: torch.Tensor, label: int) -> float:
    """``min over the box of min_j (y_t - y_j)``: for every pattern of the hidden neurons' pieces, a linear
    program over the inputs where the network follows it (the network is affine there). The pieces a
    neuron's input may reach on the box come from interval arithmetic (computed here by hand)."""
    first, act, second, _, last = net
    member = pieces(act)
    w1, b1 = first.weight.detach(), first.bias.detach()
    w2, b2 = second.weight.detach(), second.bias.detach()
    w3, b3 = last.weight.detach(), last.bias.detach()
    centre, radius = (upper + lower) / 2, (upper - lower) / 2
    z1_low, z1_up = w1 @ centre + b1 - w1.abs() @ radius, w1 @ centre + b1 + w1.abs() @ radius
    h_low, h_up = act.interval(z1_low, z1_up)
    z2_mid = w2 @ ((h_up + h_low) / 2) + b2
    z2_low, z2_up = z2_mid - w2.abs() @ ((h_up - h_low) / 2), z2_mid + w2.abs() @ ((h_up - h_low) / 2)
    width = w1.shape[0]
    bounds = list(zip(lower.tolist(), upper.tolist(), strict=True))
    best = float("inf")
    for head in itertools.product(*_possible(member, z1_low, z1_up)):
        # A first layer's pattern no input follows leaves every second layer's out (one program).
        if linprog(torch.zeros(2).numpy(), *_within(head, w1, b1), bounds=bounds, method="highs").status:
            continue
        for tail in itertools.product(*_possible(member, z2_low, z2_up)):
            pattern = head + tail
            d = torch.tensor([p[0] for p in pattern], dtype=torch.float64)
            e = torch.tensor([p[1] for p in pattern], dtype=torch.float64)
            # Pre-activations as affine maps of x under this pattern.
            a2, c2 = w2 @ (d[:width, None] * w1), w2 @ (d[:width] * b1 + e[:width]) + b2
            a3, c3 = w3 @ (d[width:, None] * a2), w3 @ (d[width:] * c2 + e[width:]) + b3
            a_ub, b_ub = _within(pattern, torch.cat([w1, a2]), torch.cat([b1, c2]))
            for j in range(3):
                if j == label:
                    continue
                objective = (a3[label] - a3[j]).numpy()
                program = linprog(objective, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
                if program.status == 0:
                    best = min(best, float(program.fun) + float(c3[label] - c3[j]))
    return best


def _within(pattern, a: torch.Tensor, c: torch.Tensor):
    """``A x <= b`` saying each pre-activation ``a x + c`` lies in its piece's ``[start, end]``."""
    rows, ends = [], []
    for (_, _, start, end), row, constant in zip(pattern, a, c.tolist(), strict=True):
        if end < math.inf:
            rows.append(row)
            ends.append(end - constant)
        if start > -math.inf:
            rows.append(-row)
            ends.append(constant - start)
    return torch.stack(rows).numpy(), torch.tensor(ends, dtype=torch.float64).numpy()


# The search as configured by default (the root refined, children warm-started from their parents, each
# split chosen among three candidates by bounding their children), without the root's refinement, without
# any optimisation (plain CROWN on every subdomain), splitting on the best score alone, and recomputing
# every subdomain's intermediate bounds by CROWN (the default keeps the root's on a ReLU network).
SEARCHES = [
    {},
    {"root_steps": 0},
    {"steps": 0, "root_steps": 0},
    {"candidates": 1},
    {"intermediate": "crown"},
]


def searched_exactly(net: Sequential, search: dict, seed: int, eps: float) -> int:
    """Branch and bound (`search`'s settings) on 12 random points of the blobs at radius `eps`: every verdict
    and margin as the enumeration of the activation's pieces says. How many images it split."""
    x = torch.rand(12, 2, generator=torch.Generator().manual_seed(seed + 10), dtype=torch.float64)
    with torch.no_grad():
        y = net(x).argmax(1)
    outcomes = certify(net, [BranchAndBound(timeout=30, batch=4, **search)], x, y, eps, (0.0, 1.0))
    for outcome, xi, yi in zip(outcomes, x, y, strict=True):
        lower, upper = (xi - eps).clamp(0, 1), (xi + eps).clamp(0, 1)
        truth = exact_least_margin(net, lower, upper, int(yi))
        assert outcome.status in ("verified", "falsified"), outcome.record()
        assert (outcome.status == "verified") == (truth > 0), (outcome.record(), truth)
        if outcome.status == "verified":
            assert 0 < outcome.margin <= truth + 1e-9
        else:
            assert truth - 1e-9 <= outcome.margin <= 0
    return sum(o.search is not None and o.search["subdomains"] > 0 for o in outcomes)


@pytest.mark.parametrize(
    "search", SEARCHES, ids=["default", "no-root-steps", "crown-only", "score-only", "crown-bounds"]
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_branch_and_bound_agrees_with_every_activation_pattern(seed, search):
    searched_exactly(blob_network(seed), search, seed, EPS)


@pytest.mark.parametrize(
    ("activation", "seed", "width", "eps"),
    [(lambda: LeakyReLU(0.1), 1, 8, 0.2), (Abs, 0, 5, 0.2)],
    ids=["LeakyReLU", "Abs"],
)
@pytest.mark.parametrize("search", [{}, {"steps": 0, "root_steps": 0}], ids=["default", "crown-only"])
def test_branch_and_bound_decides_every_piecewise_linear_member_exactly(search, activation, seed, width, eps):
    """LeakyReLU and Abs split at zero as ReLU does: every verdict and margin as the enumeration of their
    pieces says (networks and radii where CROWN alone leaves some image to split)."""
    split = searched_exactly(blob_network(seed, width=width, activation=activation), search, seed, eps)
    assert split or not search, "the search without optimisation should split some image"


def test_branch_and_bound_decides_hardtanh_exactly_by_cutting_boxes():
    """HardTanh is not split (two corners): its subdomains' boxes are cut until every neuron keeps to one
    piece, where the network is affine and CROWN exact. Every verdict and margin as the enumeration of its
    three pieces says. (The old search raised an error on a network with no layer to split.)"""
    split = searched_exactly(blob_network(1, width=5, activation=HardTanh), {}, 1, 0.2)
    assert split, "an image should need its box cut"


@pytest.mark.parametrize(
    ("activation", "recomputes"), [(ReLU, False), (Sigmoid, True)], ids=["ReLU", "Sigmoid"]
)
def test_subdomains_recompute_intermediate_bounds_only_where_they_cut_their_boxes(
    monkeypatch, activation, recomputes
):
    """`intermediate="auto"`: a ReLU split leaves the box whole, and its subdomains keep the root's
    intermediate bounds with the splits clamped in (beta-CROWN's way); a Sigmoid network's subdomains cut
    their boxes, and on a network whose CROWN pass is this cheap they are bounded by CROWN again."""
    crown_flags = []
    original = Bounder.bound

    def spy(self, work, *args, **kwargs):
        if work.signs is not None:  # a subdomain's, not a root's
            crown_flags.append(self.crown)
        return original(self, work, *args, **kwargs)

    monkeypatch.setattr(Bounder, "bound", spy)
    net = blob_network(1, width=8, activation=activation)
    x = torch.rand(12, 2, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    with torch.no_grad():
        y = net(x).argmax(1)
    certify(net, [BranchAndBound(timeout=10, batch=4)], x, y, 0.3, (0.0, 1.0))
    assert crown_flags, "some image should have been split"
    assert any(crown_flags) == recomputes


@pytest.mark.parametrize(("activation", "eps"), [(Sigmoid, 0.3), (Tanh, 0.2)], ids=["Sigmoid", "Tanh"])
def test_branch_and_bound_decides_a_smooth_member_by_bounding_ever_smaller_boxes(activation, eps):
    """Sigmoid and Tanh are split at zero and not affine on a leaf: their subdomains' boxes are cut (a leaf's,
    and where the halves bound better than a split), so every image is decided within the time: every
    verified one has no sampled counterexample and a margin below the sampled least, every falsified one a
    witness. Splitting at zero alone left the Sigmoid network's image 3 open after 10 s."""
    net = blob_network(1, width=8, activation=activation)
    x = torch.rand(12, 2, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    with torch.no_grad():
        y = net(x).argmax(1)
    outcomes = certify(net, [BranchAndBound(timeout=10, batch=4)], x, y, eps, (0.0, 1.0))
    g = torch.Generator().manual_seed(0)
    for outcome, xi, yi in zip(outcomes, x, y, strict=True):
        lower, upper = (xi - eps).clamp(0, 1), (xi + eps).clamp(0, 1)
        points = lower + (upper - lower) * torch.rand(20_000, 2, generator=g, dtype=torch.float64)
        sampled = float(least_margins(net, points, yi.expand(len(points))).min())
        assert outcome.status in ("verified", "falsified"), outcome.record()
        if outcome.status == "verified":
            assert 0 < outcome.margin <= sampled
        else:
            assert outcome.margin <= 0 and outcome.witness is not None
    searched = [o.search for o in outcomes if o.search is not None and o.search["subdomains"] > 0]
    assert searched and all(s["open"] == 0 for s in searched)


def test_branch_and_bound_decides_what_crown_leaves_open():
    """The images CROWN cannot decide are split until decided, each as the enumeration says."""
    net, x, y = _blob_batch()
    open_images = _left_open_by_crown(net, x, y)
    assert open_images, "the test needs images CROWN leaves undecided"
    steps = [CROWNBound(), BranchAndBound(timeout=30, batch=4, steps=0)]
    started = time.perf_counter()
    outcomes = certify(net, steps, x[open_images], y[open_images], EPS, (0.0, 1.0))
    # The images are searched together: each is charged its share of the phases it went through, so an
    # image split for rounds costs more than one decided before them, and the shares add up to the search.
    seconds = [o.seconds for o in outcomes]
    assert sum(seconds) <= time.perf_counter() - started
    split_seconds = [o.seconds for o in outcomes if o.search is not None]
    root_seconds = [o.seconds for o in outcomes if o.search is None]
    assert split_seconds and root_seconds and min(split_seconds) > max(root_seconds)
    for outcome, i in zip(outcomes, open_images, strict=True):
        lower, upper = (x[i] - EPS).clamp(0, 1), (x[i] + EPS).clamp(0, 1)
        truth = exact_least_margin(net, lower, upper, int(y[i]))
        assert outcome.by == "BranchAndBound(timeout=30, batch=4, steps=0)" or outcome.status == "falsified"
        assert (outcome.status == "verified") == (truth > 0), (outcome.record(), truth)
    # What each search did is in its record: a verified image's subdomains are all closed, split pairwise.
    split = [o.record()["search"] for o in outcomes if o.status == "verified" and o.search is not None]
    assert split, "the test needs an image verified by splitting"
    for effort in split:
        assert effort["open"] == 0 and effort["subdomains"] >= 2 and effort["subdomains"] % 2 == 0
        assert 1 <= effort["depth"] <= effort["subdomains"] / 2 and 0 <= effort["root_seconds"] < 30
        # The attack before the search (others follow as splitting takes time: `Budget.due`).
        assert effort["attacks"] >= 1


def test_a_short_queue_is_split_on_several_neurons_a_round(monkeypatch):
    """With few subdomains open and room for 8 children (batch 4), a round after the first splits each on
    several neurons at once; with batch 1, on one: the verdicts are the same, in fewer rounds."""
    net, x, y = _blob_batch()
    open_images = _left_open_by_crown(net, x, y)
    sizes: list[int] = []
    bound_children = _Run._bound_children

    def counted(self, parents, children):
        sizes.append(len(children["parent"]))
        return bound_children(self, parents, children)

    monkeypatch.setattr(_Run, "_bound_children", counted)
    efforts, verdicts, rounds = {}, {}, {}
    for batch in (1, 4):
        verdicts[batch], efforts[batch], rounds[batch] = [], [], []
        for i in open_images:  # one image a search: its rounds alone
            search = BranchAndBound(timeout=30, batch=batch, steps=0, root_steps=0, candidates=1)
            sizes.clear()
            (outcome,) = certify(net, [search], x[i : i + 1], y[i : i + 1], EPS, (0.0, 1.0))
            verdicts[batch].append(outcome.status)
            if outcome.search and outcome.search["subdomains"]:
                efforts[batch].append(outcome.search)
                rounds[batch].append(list(sizes))
    assert verdicts[1] == verdicts[4]
    # The first round of a search bounds 2 children (it measures a child's seconds); later ones, up to 8.
    assert rounds[1] and rounds[4] and all(set(one) == {2} for one in rounds[1])
    assert all(four[0] == 2 and max(four) <= 8 for four in rounds[4]) and max(map(max, rounds[4])) > 2
    assert all(effort["depth"] >= 2 for effort in efforts[4])
    # Several levels a round: the searches with batch 4 take fewer rounds in all than with batch 1.
    assert sum(map(len, rounds[4])) < sum(map(len, rounds[1]))


def test_passes_of_one_subdomain_decide_as_whole_rounds(monkeypatch):
    """With room for one subdomain a pass, every bounding pass and every trial estimate of a round takes
    one, and the searches reach the verdicts of whole rounds."""
    net, x, y = _blob_batch()
    open_images = _left_open_by_crown(net, x, y)
    sizes: list[int] = []
    estimate, bound_pass = Bounder.estimate, _Run._bound_pass

    def recorded(method):
        def run(self, work_or_parents, *args, **kwargs):
            image = work_or_parents.y if hasattr(work_or_parents, "y") else work_or_parents["image"]
            sizes.append(len(image))
            return method(self, work_or_parents, *args, **kwargs)

        return run

    def verdicts() -> list[str]:
        search = BranchAndBound(timeout=30, batch=4, steps=0, root_steps=0)
        return [o.status for o in certify(net, [search], x[open_images], y[open_images], EPS, (0.0, 1.0))]

    whole = verdicts()
    monkeypatch.setattr(passes, "PASS_BYTES", 1)
    monkeypatch.setattr(Bounder, "estimate", recorded(estimate))
    monkeypatch.setattr(_Run, "_bound_pass", recorded(bound_pass))
    assert verdicts() == whole
    assert len(sizes) > 2 and set(sizes) == {1}


def test_the_images_of_a_batch_are_split_in_the_same_rounds_and_decided_as_alone(monkeypatch):
    """Images searched together share their rounds: one bounding batch holds subdomains of several images,
    each on its own open margins, and every verdict is the one the image gets searched alone, whether
    images with different margins open are bounded in passes of their own (a pass's fixed cost nothing)
    or all in one pass on the most margins (a pass's fixed cost worth any number of rows)."""
    net = blob_network(5, width=10)
    # Points whose split images leave one or two margins open at their roots.
    x = torch.rand(60, 2, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    with torch.no_grad():
        y = net(x).argmax(1)
    search = [BranchAndBound(timeout=30, batch=4, steps=0, root_steps=0)]
    alone = {i: certify(net, search, x[i : i + 1], y[i : i + 1], EPS, (0.0, 1.0))[0]
             for i in _left_open_by_crown(net, x, y)}  # fmt: skip
    split = [i for i, o in alone.items() if o.search is not None and o.search["subdomains"]]
    assert len(split) >= 3, "the test needs images that branch and bound splits"
    calls: list[list[tuple[int, int, set[int]]]] = []  # each call's passes: images, margins, margins open
    bound_children, bound_pass = _Run._bound_children, _Run._bound_pass

    def children(self, parents, made):
        calls.append([])
        return bound_children(self, parents, made)

    def one_pass(self, parents, k):
        image = parents["image"]
        calls[-1].append((len(set(image.tolist())), k, set(parents["open"].tolist())))
        return bound_pass(self, parents, k)

    monkeypatch.setattr(_Run, "_bound_children", children)
    monkeypatch.setattr(_Run, "_bound_pass", one_pass)
    search[0].together = len(split)  # on a CPU a search takes one image at a time unless told
    for fixed_rows in (0.0, math.inf):
        calls.clear()
        monkeypatch.setattr(passes.PassCost, "fixed_rows", lambda self, rows=fixed_rows: rows)
        together = certify(net, search, x[split], y[split], EPS, (0.0, 1.0))
        assert [o.status for o in together] == [alone[i].status for i in split]
        assert all(o.search["images"] == len(split) for o in together if o.search is not None)
        made = [one for call in calls for one in call]
        assert max(images for images, _, _ in made) >= 2
        if fixed_rows == 0.0:  # each pass on its images' own margins
            assert all(opened == {k} for _, k, opened in made)
        else:  # one pass a round, on the most margins any of its images has open
            assert all(len(call) == 1 for call in calls)
            assert all(k == max(opened) for _, k, opened in made)
            assert any(len(opened) >= 2 for _, _, opened in made)


def test_the_cascade_attacks_only_what_its_cheap_steps_leave():
    """The attack goes after the leading cheap steps (Box) and before the first costly one; an image Box
    verifies is never attacked."""

    def labels(methods, attack=False):
        return [step.label for step in cascade(methods, attack)]

    assert labels([BoxBound(), BranchAndBound()]) == ["Box", "PGD", "BranchAndBound"]
    assert labels([CROWNBound(), BoxBound()], attack=True) == ["PGD", "CROWN", "Box"]
    assert labels([BoxBound()], attack=True) == ["Box", "PGD"]
    assert labels([BoxBound(), CROWNBound()]) == ["Box", "CROWN"]
    net, x, y = _blob_batch()
    steps = cascade([BoxBound(), CROWNBound()], attack=True)
    attacked: list[int] = []
    decide = steps[1].decide

    def recorded(model, batch, pending):
        attacked.extend(pending.tolist())
        decide(model, batch, pending)

    steps[1].decide = recorded
    outcomes = certify(net, steps, x, y, 0.05, (0.0, 1.0))
    by_box = {o.index for o in outcomes if o.by == "Box"}
    assert by_box and attacked and not by_box & set(attacked)
    assert set(attacked) == {o.index for o in outcomes if o.by != "Box" and o.by != "clean"}


def test_a_search_is_labelled_with_every_argument_that_differs_from_its_default():
    assert BranchAndBound().label == "BranchAndBound"
    assert BranchAndBound(timeout=20, root_steps=0, lr_beta=0.01, candidates=1).label == (
        "BranchAndBound(timeout=20, lr_beta=0.01, root_steps=0, candidates=1)"
    )
    assert BranchAndBound(intermediate="root").label == 'BranchAndBound(intermediate="root")'
    with pytest.raises(ValueError, match="intermediate is one of"):
        BranchAndBound(intermediate="late")


def _recording_search() -> tuple[BranchAndBound, list[float]]:
    """A search whose deadlines are recorded as it is handed them."""
    search = BranchAndBound(timeout=30, batch=4, steps=0)
    seen: list[float] = []
    original = search._search
    search._search = lambda model, batch, pending, budget: (
        seen.append(budget.deadline),
        original(model, batch, pending, budget),
    )[1]
    return search, seen


def _blob_batch() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """A three-class network of two inputs, 40 random points and the network's own labels."""
    net = blob_network(3, width=6)
    x = torch.rand(40, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    with torch.no_grad():
        y = net(x).argmax(1)
    return net, x, y


def _left_open_by_crown(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[int]:
    """The images CROWN leaves undecided at `EPS`."""
    crown = certify(net, [CROWNBound()], x, y, EPS, (0.0, 1.0))
    return [i for i, o in enumerate(crown) if o.status == "unknown"]


def test_a_search_stops_at_the_earlier_of_its_timeout_and_its_until():
    """A property's limit covers the whole cascade: a search handed an absolute `until` ends there even
    where its own timeout would run longer."""
    net, x, y = _blob_batch()
    search, seen = _recording_search()
    search.until = time.perf_counter() + 0.5
    outcomes = certify(net, [CROWNBound(), search], x, y, EPS, (0.0, 1.0))
    assert seen and all(deadline == search.until for deadline in seen)
    assert {o.status for o in outcomes} <= {"verified", "falsified", "unknown"}


def test_a_search_whose_until_has_passed_leaves_its_images_unknown_without_searching():
    net, x, y = _blob_batch()
    search, seen = _recording_search()
    search.until = time.perf_counter() - 1
    outcomes = certify(net, [CROWNBound(), search], x, y, EPS, (0.0, 1.0))
    assert seen == []
    left = [o for o in outcomes if o.status == "unknown"]
    assert left and all(o.by is None for o in left)
    assert len(left) + sum(o.status == "verified" for o in outcomes) == len(outcomes)


def test_a_search_past_its_time_limit_is_unknown_with_a_sound_lower_bound():
    net = blob_network(1)
    x = torch.tensor([[0.5, 0.45]], dtype=torch.float64)
    with torch.no_grad():
        y = net(x).argmax(1)
    (outcome,) = certify(net, [BranchAndBound(timeout=1e-9)], x, y, 0.3, (0.0, 1.0))
    truth = exact_least_margin(net, (x[0] - 0.3).clamp(0, 1), (x[0] + 0.3).clamp(0, 1), int(y[0]))
    if outcome.status == "unknown":
        assert outcome.margin is None or outcome.margin <= truth + 1e-9
    else:  # decided at the root, before the clock was read
        assert (outcome.status == "verified") == (truth > 0)


def test_an_attack_before_the_search_falsifies_what_the_root_bound_leaves_open():
    """Without an attack in the cascade, the images whose balls hold a counterexample are falsified by
    the attack branch and bound runs first (or by its search), at a point the network misclassifies; none
    of the others is. (The attack keeps to the time limit too: a limit of 1e-9 s leaves it one step.)"""
    net = blob_network(2)
    x = torch.rand(30, 2, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    with torch.no_grad():
        y = net(x).argmax(1)
    outcomes = certify(net, [BranchAndBound(timeout=1.0)], x, y, 0.15, (0.0, 1.0))
    truths = [
        exact_least_margin(net, (p - 0.15).clamp(0, 1), (p + 0.15).clamp(0, 1), int(t))
        for p, t in zip(x, y, strict=True)
    ]
    falsified = [o.status == "falsified" for o in outcomes]
    assert sum(falsified) >= 3, "the test needs images with counterexamples"
    assert falsified == [t < -1e-3 for t in truths]  # every clear counterexample is found, and only those
    for o, truth in zip(outcomes, truths, strict=True):
        if o.status == "falsified":
            assert o.by == "BranchAndBound(timeout=1)" and truth - 1e-9 <= o.margin <= 0


def test_an_attack_takes_at_most_its_share_of_the_searchs_time(monkeypatch):
    """On an MNIST CNN7 one attack's 3,600 steps take 31 s: the root's took half of a 60 s search. Every
    attack of a search (the root's first) is handed a deadline at most `ATTACK_SHARE` of its time away."""

    net = blob_network(2)
    x = torch.rand(30, 2, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    with torch.no_grad():
        y = net(x).argmax(1)
    handed = []
    targeted = Attacker.targeted

    def recorded(self, lower, upper, y, steps, restarts, generator, deadline=float("inf")):
        handed.append(deadline - time.perf_counter())
        return targeted(self, lower, upper, y, steps, restarts, generator, deadline)

    monkeypatch.setattr(Attacker, "targeted", recorded)
    # The subdomains' candidate points would falsify these images before any attack: the attacks alone.
    monkeypatch.setattr(_Run, "_try_corners", lambda *_: None)
    outcomes = certify(net, [BranchAndBound(timeout=10.0)], x, y, 0.15, (0.0, 1.0))
    assert sum(o.status == "falsified" for o in outcomes) >= 3 and len(handed) >= 3
    assert max(handed) <= ATTACK_SHARE * 10.0, handed


def test_the_searchs_attack_runs_in_float32_and_hands_back_points_inside_the_float64_box():
    net = blob_network(2)
    lower = torch.rand(32, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 0.8
    upper = lower + 0.1 / 3  # edges no float32 holds exactly
    attacker = Attacker(net)
    points = attacker.pgd(lower, upper, torch.zeros(32, dtype=torch.long), 20, torch.Generator())
    assert points.dtype == torch.float64 and next(attacker._fast.parameters()).dtype == torch.float32
    assert bool(((points >= lower) & (points <= upper)).all())


def test_the_time_limit_holds_inside_a_long_optimisation():
    """The Adam steps of one bounding stop at the deadline too: with far more steps than the time allows,
    an image left open still ends near its limit."""
    net, x, y = _blob_batch()
    crown = certify(net, [CROWNBound()], x, y, EPS, (0.0, 1.0))
    first_open = next(i for i, o in enumerate(crown) if o.status == "unknown")
    picked = slice(first_open, first_open + 1)
    (outcome,) = certify(
        net, [BranchAndBound(timeout=0.2, steps=100_000)], x[picked], y[picked], EPS, (0.0, 1.0)
    )
    assert outcome.seconds < 5.0, outcome.record()  # 0.2 s, the attack before the search, and slack


def test_only_a_candidate_that_leads_to_a_misclassified_float32_point_of_the_box_falsifies():
    # y_0 = 0 and y_1 = x_0 - 0.25: label 0 is misclassified where x_0 >= 0.25.
    net = Sequential(Linear(2, 2)).double()
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[0.0, 0.0], [1.0, 0.0]]))
        net[0].bias.copy_(torch.tensor([0.0, -0.25]))
    lower, upper = torch.zeros(3, 2, dtype=torch.float64), torch.ones(3, 2, dtype=torch.float64)
    outcomes = [Outcome(0, 0), Outcome(1, 0), Outcome(2, 0)]
    batch = Batch(lower, torch.zeros(3, dtype=torch.long), lower, upper, outcomes)
    # The first lies outside the box (moved in, it is misclassified); the second is not misclassified, but a
    # push against the margin's gradient finds a point that is; the third's margin is positive.
    points = torch.tensor([[1.5, 0.1], [0.2, 0.1], [0.1, 0.1]], dtype=torch.float64)
    falsify(net, batch, torch.arange(3), points, torch.tensor([-1.0, 0.0, 0.5], dtype=torch.float64), "test")
    assert [o.status for o in outcomes] == ["falsified", "falsified", "unknown"]
    for outcome in outcomes[:2]:
        witness = outcome.witness
        assert torch.equal(witness, witness.float().double())  # float32 numbers
        assert bool((witness >= 0).all() and (witness <= 1).all()) and float(witness[0]) >= 0.25
        assert outcome.margin <= 0


def test_the_cascade_records_who_decided_each_image():
    net = blob_network(0)
    x = torch.rand(30, 2, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    y = net(x).argmax(1)
    y[0] = (y[0] + 1) % 3  # misclassified: falsified by the image itself
    steps = [Attack(), BoxBound(), CROWNBound()]
    outcomes = certify(net, steps, x, y, 0.05, (0.0, 1.0), indices=range(100, 130))
    assert [o.index for o in outcomes] == list(range(100, 130))
    assert outcomes[0].status == "falsified" and outcomes[0].by == "clean" and outcomes[0].margin < 0
    assert {o.by for o in outcomes if o.status == "verified"} <= {"Box", "CROWN"}
    for o in outcomes:
        assert o.status in ("verified", "falsified", "unknown") and o.seconds >= 0
        if o.status == "unknown":  # the best lower bound found, below zero
            assert o.margin is not None and o.margin <= 0


def test_a_leaf_after_a_layer_that_is_not_affine_on_it_is_never_proved_empty_by_its_relaxation():
    """Behind a Sigmoid the split constraint's row is a bound of the neuron, not the neuron: z = sigmoid(x) -
    0.9 is at least zero near x = 3, but the Sigmoid's lower line across zero stays below 0.9 on [-3, 3],
    so the program over the relaxation has no feasible point. The leaf where z >= 0 holds points whose margin
    is -z <= 0: it must not be proved."""
    from daic.runtime import AbstractContext, Sigmoid
    from daic.runtime.certification.search import exact_leaf
    from daic.runtime.domains import Symbolic

    net = Sequential(Linear(1, 1), Sigmoid(), Linear(1, 1), ReLU(), Linear(1, 2)).double()
    with torch.no_grad():
        for layer, weight, bias in ((net[0], [[1.0]], [0.0]), (net[2], [[1.0]], [-0.9])):
            layer.weight.copy_(torch.tensor(weight)), layer.bias.copy_(torch.tensor(bias))
        net[4].weight.copy_(torch.tensor([[1.0], [0.0]])), net[4].bias.zero_()
    x, y = torch.zeros(1, 1, dtype=torch.float64), torch.tensor([1])
    lower, upper = x - 3, x + 3
    output = net.abstract(Symbolic.input(lower, upper), AbstractContext())
    (relu_input,) = [node.parents[0].id for node in output.ancestors() if isinstance(node.layer, ReLU)]
    batch = Batch(x, y, lower, upper, [Outcome(0, 1)])
    found = exact_leaf(net, batch, 0, {relu_input: torch.tensor([1], dtype=torch.int8)}, "test")
    assert found is None or found <= 0, found  # the old reading of the empty program: infinity, proved


def test_splits_only_a_linear_program_finds_contradictory_are_proved_empty_by_its_multipliers(monkeypatch):
    """a = x1 - x2 >= 0 and b = x2 - x1 - 0.1 >= 0 contradict each other (a + b = -0.1), which no interval
    shows (a in [-1, 1], b in [-1.1, 0.9] on [0, 1]^2): the program has no feasible point, and the
    multipliers of its least violation (a half each: -(a + b) / 2 = 0.05 > 0 everywhere) prove the leaf
    empty in the domain's rounding; with b's split turned inactive the leaf is not empty, and is decided by
    its margin."""
    from daic.runtime import AbstractContext
    from daic.runtime.certification.search import exact_leaf, leaves
    from daic.runtime.domains import Symbolic

    net = Sequential(Linear(2, 2), ReLU(), Linear(2, 2)).double()
    with torch.no_grad():
        (
            net[0].weight.copy_(torch.tensor([[1.0, -1.0], [-1.0, 1.0]])),
            net[0].bias.copy_(torch.tensor([0, -0.1])),
        )
        (
            net[2].weight.copy_(torch.tensor([[1.0, 1.0], [0.0, 0.0]])),
            net[2].bias.copy_(torch.tensor([1.0, 0.0])),
        )
    x, y = torch.full((1, 2), 0.5, dtype=torch.float64), torch.tensor([0])
    lower, upper = torch.zeros_like(x), torch.ones_like(x)
    output = net.abstract(Symbolic.input(lower, upper, crown=True), AbstractContext())
    assert not bool(output.analysis.infeasible.any())
    (relu_input,) = [node.parents[0].id for node in output.ancestors() if isinstance(node.layer, ReLU)]
    with outward_rounding():
        empty = exact_leaf(net, Batch(x, y, lower, upper, [Outcome(0, 0)]), 0,
                           {relu_input: torch.tensor([1, 1], dtype=torch.int8)}, "test")  # fmt: skip
        one_side = exact_leaf(net, Batch(x, y, lower, upper, [Outcome(0, 0)]), 0,
                              {relu_input: torch.tensor([1, -1], dtype=torch.int8)}, "test")  # fmt: skip
    assert empty == float("inf")
    # a >= 0, b <= 0: the margin is 1 + a, least 1 at a = 0 (x1 = x2).
    assert one_side == pytest.approx(1.0, abs=1e-7)
    # Without multipliers the solver's word alone proves nothing: the leaf stays undecided.
    monkeypatch.setattr(leaves, "_infeasibility_multipliers", lambda *args: None)
    with outward_rounding():
        unproved = exact_leaf(net, Batch(x, y, lower, upper, [Outcome(0, 0)]), 0,
                              {relu_input: torch.tensor([1, 1], dtype=torch.int8)}, "test")  # fmt: skip
    assert unproved is None


def test_a_subdomain_with_every_neuron_split_is_decided_by_its_linear_program():
    """Fixing every hidden neuron leaves the network affine on the subdomain: `exact_leaf` gives that
    pattern's least margin (or infinity where no input follows it), as the enumeration does."""
    from daic.runtime import AbstractContext
    from daic.runtime.certification.search import exact_leaf
    from daic.runtime.domains import Symbolic

    net = blob_network(2, width=3)
    x = torch.tensor([[0.45, 0.5]], dtype=torch.float64)
    y = net(x).argmax(1)
    lower, upper = (x - 0.3).clamp(0, 1), (x + 0.3).clamp(0, 1)
    output = net.abstract(Symbolic.input(lower, upper), AbstractContext())
    inputs = [node.parents[0].id for node in output.ancestors() if isinstance(node.layer, ReLU)][::-1]
    first, _, second, _, last = net
    checked = 0
    for pattern in itertools.product([1, -1], repeat=6):
        signs = {inputs[0]: torch.tensor(pattern[:3], dtype=torch.int8),
                 inputs[1]: torch.tensor(pattern[3:], dtype=torch.int8)}  # fmt: skip
        batch = Batch(x, y, lower, upper, [Outcome(0, int(y[0]))])
        found = exact_leaf(net, batch, 0, signs, "test")
        d1 = (torch.tensor(pattern[:3]) > 0).double()
        d2 = (torch.tensor(pattern[3:]) > 0).double()
        w1, b1, w2, b2 = (
            first.weight.detach(),
            first.bias.detach(),
            second.weight.detach(),
            second.bias.detach(),
        )
        a2, c2 = w2 @ (d1[:, None] * w1), w2 @ (d1 * b1) + b2
        a3, c3 = (
            last.weight.detach() @ (d2[:, None] * a2),
            last.weight.detach() @ (d2 * c2) + last.bias.detach(),
        )
        s1, s2 = 2 * d1 - 1, 2 * d2 - 1
        a_ub = torch.cat([-(s1[:, None] * w1), -(s2[:, None] * a2)]).numpy()
        b_ub = torch.cat([s1 * b1, s2 * c2]).numpy()
        bounds = list(zip(lower[0].tolist(), upper[0].tolist(), strict=True))
        t, per_margin = int(y[0]), []
        for j in (j for j in range(3) if j != t):
            program = linprog((a3[t] - a3[j]).numpy(), A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
            if program.status == 0:
                per_margin.append(float(program.fun) + float(c3[t] - c3[j]))
        # The programs share their constraints: all are infeasible or none is.
        truth, first_truth = min(per_margin, default=float("inf")), (per_margin or [float("inf")])[0]
        # Only the first margin open (the root proved the other): its program alone decides.
        only_first = Batch(x, y, lower, upper, [Outcome(0, int(y[0]))])
        found_first = exact_leaf(net, only_first, 0, signs, "test", torch.tensor([True, False]))
        for decided, least, record in ((found, truth, batch), (found_first, first_truth, only_first)):
            if least == float("inf"):
                assert decided == float("inf")
            elif least > 0:
                assert decided == pytest.approx(least, abs=1e-7)
            else:  # a counterexample: the image is falsified by the program's point
                assert record.outcomes[0].status == "falsified" and decided <= 0
        checked += truth != float("inf")
    assert checked >= 2


def test_root_refinement_tightens_intermediate_bounds_and_keeps_every_sampled_point():
    """alpha-CROWN on the intermediate layers: never looser than CROWN, tighter on the deeper layers,
    and every pre-activation of 20,000 sampled inputs of the box (and of its corners) inside."""
    torch.manual_seed(0)
    net = Sequential(Linear(6, 24), ReLU(), Linear(24, 24), ReLU(), Linear(24, 24), ReLU(), Linear(24, 3))
    net = net.double()
    centre = torch.rand(2, 6, dtype=torch.float64)
    lower, upper = centre - 0.3, centre + 0.3
    with outward_rounding(), torch.no_grad():  # as branch and bound runs it
        value = Symbolic.input(lower, upper, crown=True)
        output = net.abstract(value, AbstractContext())
        inputs = [
            n.parents[0] for n in sorted(output.ancestors(), key=lambda n: n.id) if isinstance(n.layer, ReLU)
        ]
        known = {node.id: node.bounds() for node in inputs}
        refined = refined_intermediates(net, lower, upper, known, "hybrid", steps=30, lr=0.5)
    samples = lower + (upper - lower) * torch.rand(10_000, 2, 6, dtype=torch.float64)
    corners = torch.where(torch.rand(10_000, 2, 6) < 0.5, lower, upper)
    h = torch.cat([samples, corners])
    tighter = []
    for layer, node in zip((net[0], net[2], net[4]), inputs, strict=True):
        (low, up), (was_low, was_up) = refined[node.id], known[node.id]
        assert bool((low >= was_low).all()) and bool((up <= was_up).all())
        tighter.append(float((up - low).sum() / (was_up - was_low).sum()))
        z = layer(h.reshape(-1, h.shape[-1])).reshape(*h.shape[:-1], -1)
        assert bool((z >= low).all()) and bool((z <= up).all())
        h = z.clamp(min=0)
    # The first layer's bounds are exact already; the deeper ones narrow (here by 4% and 8% in all).
    assert tighter[0] == 1.0 and tighter[1] < 0.99 and tighter[2] < 0.99, tighter


def test_root_refinement_goes_past_a_wide_layers_sample_only_where_the_sample_narrowed(monkeypatch):
    """A layer of many unstable neurons is refined by alpha-CROWN on a sample first (on an MNIST CNN7 its
    neurons took minutes for nothing CROWN had not found), all of them where the sample gained enough;
    every sampled input's pre-activations stay inside either way."""
    torch.manual_seed(1)
    net = Sequential(Linear(4, 16), ReLU(), Linear(16, 20 * SAMPLE), ReLU(), Linear(20 * SAMPLE, 3)).double()
    lower = torch.rand(1, 4, dtype=torch.float64)
    upper = lower + 0.6
    with outward_rounding(), torch.no_grad():
        output = net.abstract(Symbolic.input(lower, upper, crown=True), AbstractContext())
        node = next(n.parents[0] for n in output.ancestors() if isinstance(n.layer, ReLU))
        known = {node.id: node.bounds()}
        unstable = int(((known[node.id][0] < 0) & (known[node.id][1] > 0)).sum())
        assert unstable > 4 * SAMPLE  # the layer is sampled
        moved = {}
        for least_gain in (1e-6, 1.0):  # the sample pays, and it never can (no interval shrinks to a point)
            monkeypatch.setattr("daic.runtime.certification.search.root.LEAST_GAIN", least_gain)
            low, up = refined_intermediates(net, lower, upper, known, "hybrid", steps=10, lr=0.5)[node.id]
            moved[least_gain] = int(((low > known[node.id][0]) | (up < known[node.id][1])).sum())
            z = net[2](
                net[0](lower + (upper - lower) * torch.rand(20_000, 4, dtype=torch.float64)).clamp(min=0)
            )
            assert bool((z >= low).all()) and bool((z <= up).all())
    assert 0 < moved[1.0] <= SAMPLE < moved[1e-6], moved


def test_networks_with_parallel_branches_are_searched_with_their_roots_refined():
    """A ReLU input may depend on only some earlier ReLUs (the other branch of a Concat, the skip of a
    Residual): the root's alpha-CROWN optimises the slopes of those it depends on, and the search decides
    every image as the search without it does, trained blobs on 2-D inputs."""
    g = torch.Generator().manual_seed(0)
    centres = torch.tensor([[0.25, 0.3], [0.7, 0.35], [0.5, 0.75]], dtype=torch.float64)
    labels = torch.randint(0, 3, (300,), generator=g)
    points = centres[labels] + 0.12 * torch.randn(300, 2, generator=g, dtype=torch.float64)
    torch.manual_seed(0)
    nets = [
        Sequential(
            Concat([Linear(2, 6), ReLU()], [Linear(2, 6), ReLU()]), Linear(12, 6), ReLU(), Linear(6, 3)
        ),
        Sequential(
            Linear(2, 6), ReLU(), Residual([Linear(6, 6), ReLU()], [Linear(6, 6), ReLU()]), Linear(6, 3)
        ),
    ]
    x = torch.rand(30, 2, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    for net in nets:
        net = net.double()
        optimizer = torch.optim.Adam(net.parameters(), lr=0.03)
        for _ in range(200):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(net(points), labels).backward()
            optimizer.step()
        with torch.no_grad():
            y = net(x).argmax(1)
        found = [
            [
                o.status
                for o in certify(net, [BranchAndBound(timeout=10, batch=4, **search)], x, y, 0.15, (0.0, 1.0))
            ]
            for search in ({}, {"root_steps": 0})
        ]
        assert "error" not in found[0] and found[0] == found[1], found
        assert "verified" in found[0] and "falsified" in found[0]


def test_outcomes_of_a_cascade_with_a_search_are_handed_on_every_few_images():
    """A complete step may search each image up to its timeout: the record hears of each image within
    `COMPLETE_BATCH` images of it, not at the end of a batch of 100."""
    from daic.runtime.certification.certify import COMPLETE_BATCH

    net = blob_network(0)
    x = torch.rand(25, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    with torch.no_grad():
        y = net(x).argmax(1)
    searched: list[int] = []  # images the search had been given when each outcome was handed on
    seen: list[int] = []

    class Counting(BranchAndBound):
        def decide(self, model, batch, pending):
            seen.append(len(pending))
            super().decide(model, batch, pending)

    outcomes = certify(net, [Counting(timeout=5, batch=4)], x, y, EPS, (0.0, 1.0),
                       on_outcome=lambda o: searched.append(len(seen)))  # fmt: skip
    assert [o.index for o in outcomes] == list(range(25)) and COMPLETE_BATCH < 25
    # The first images are handed on after the first batch's search, before any later batch's.
    assert searched[:COMPLETE_BATCH] == [1] * COMPLETE_BATCH
    assert searched[-1] == len(seen) >= 25 // COMPLETE_BATCH


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@CUDA
def test_branch_and_bound_on_cuda_decides_as_on_the_cpu(monkeypatch):
    """The images of a batch searched together on the GPU, their subdomains' tensors there, decide as on
    the CPU."""
    net = blob_network(0)
    x = torch.rand(12, 2, generator=torch.Generator().manual_seed(10), dtype=torch.float64)
    with torch.no_grad():
        y = net(x).argmax(1)
    search = [BranchAndBound(timeout=30, batch=4)]
    on_cpu = certify(net, search, x, y, EPS, (0.0, 1.0))
    devices, images = set(), []
    bound_children = _Run._bound_children

    def seen(self, parents, children):
        devices.update(column.device.type for column in [*parents.columns.values(), *children.values()])
        images.append(len(set(parents["image"][children["parent"]].tolist())))
        return bound_children(self, parents, children)

    monkeypatch.setattr(_Run, "_bound_children", seen)
    on_gpu = certify(net.cuda(), search, x.cuda(), y.cuda(), EPS, (0.0, 1.0))
    assert [o.status for o in on_gpu] == [o.status for o in on_cpu]
    assert devices == {"cuda"} and max(images) >= 2  # a round bounded several images' subdomains at once


@CUDA
def test_a_subdomain_with_every_neuron_split_is_decided_on_cuda_as_on_the_cpu():
    """Its linear programs are solved on the host: the leaf's rows come back from the GPU for them (the
    leaf failed on CUDA tensors before)."""
    from daic.runtime.certification.search import exact_leaf

    net = blob_network(2, width=3)
    x = torch.tensor([[0.45, 0.5]], dtype=torch.float64)
    y = net(x).argmax(1)
    results = {}
    for device in ("cpu", "cuda"):
        net, x, y = net.to(device), x.to(device), y.to(device)
        lower, upper = (x - 0.3).clamp(0, 1), (x + 0.3).clamp(0, 1)
        output = net.abstract(Symbolic.input(lower, upper), AbstractContext())
        inputs = [node.parents[0].id for node in output.ancestors() if isinstance(node.layer, ReLU)][::-1]
        found = []
        for pattern in itertools.product([1, -1], repeat=6):
            signs = {inputs[0]: torch.tensor(pattern[:3], dtype=torch.int8, device=device),
                     inputs[1]: torch.tensor(pattern[3:], dtype=torch.int8, device=device)}  # fmt: skip
            batch = Batch(x, y, lower, upper, [Outcome(0, int(y[0]))])
            found.append(exact_leaf(net, batch, 0, signs, "test"))
        results[device] = found
    assert results["cuda"] == pytest.approx(results["cpu"], abs=1e-9)


def test_a_network_without_a_relu_is_decided_exactly_by_alpha_crown_and_branch_and_bound():
    """Affine networks have nothing to relax: CROWN's bound is their exact least margin, which alpha-CROWN
    and the search keep (they had no slope to optimise, and answered `error` for every image)."""
    from daic.runtime.certification.verification import AlphaCROWNBound

    torch.manual_seed(0)
    net = Sequential(Linear(4, 3)).double()
    x = torch.rand(16, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        y = net(x).argmax(1)
    weight, bias = net[0].weight.detach(), net[0].bias.detach()
    for steps in ([AlphaCROWNBound()], [BranchAndBound(timeout=10)]):
        for outcome, xi, yi in zip(certify(net, steps, x, y, 0.3, (0.0, 1.0)), x, y, strict=True):
            lower, upper = (xi - 0.3).clamp(0, 1), (xi + 0.3).clamp(0, 1)
            centre, radius = (lower + upper) / 2, (upper - lower) / 2
            rows = weight[yi] - weight  # (3, 4): y_t - y_j as a function of x
            least = min(
                float(r @ centre - r.abs() @ radius + bias[yi] - bias[j])
                for j, r in enumerate(rows)
                if j != yi
            )
            assert outcome.status != "error", outcome.record()
            complete = steps[0].label != "AlphaCROWN"  # the search falsifies; a bound leaves it open
            expected = "verified" if least > 0 else "falsified" if complete else "unknown"
            assert outcome.status == expected, (outcome.record(), least)
            if outcome.status == "verified":
                assert outcome.margin == pytest.approx(least, abs=1e-9)


def test_a_search_whose_bounds_are_not_numbers_ends_in_an_error_at_once():
    """A box where the network overflows (inf - inf) gives NaN bounds: no proof and no counterexample come
    of them, and the search stops instead of splitting until its time limit."""
    net = Sequential(Linear(1, 2), ReLU(), Linear(2, 2)).double()
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1e308], [1e308]]))
        net[0].bias.zero_()
        net[2].weight.copy_(torch.tensor([[1.0, -1.0], [-1.0, 1.0]]))
        net[2].bias.copy_(torch.tensor([1.0, 0.0]))
    x, y = torch.zeros(1, 1, dtype=torch.float64), torch.tensor([0])  # finite at the image itself
    (outcome,) = certify(net, [BranchAndBound(timeout=60, root_steps=0)], x, y, 5.0, (0.0, 10.0))
    # An error, not `unknown` at the time limit (where it ended before, after splitting for 60 s).
    assert outcome.status == "error" and "not a number (NaN)" in outcome.message, outcome.record()


def test_a_subdomain_bounds_only_the_margins_its_parent_left_open(monkeypatch):
    """A margin proved on a subdomain holds on its every part: its children bound the others alone (fewer
    than their image's root left open), and every verdict and margin is still the exact one. The margin a
    verified image reports is the least bound that proved any of its margins: with the bounds of margins
    proved while others stayed open lowered to 1e-6 (still bounds), it is 1e-6 wherever there were any."""
    narrowed: list[bool] = []
    weakened: set[int] = set()  # images of the batch whose subdomains had a bound lowered
    bound_pass, weak = _Run._bound_pass, {"on": False}

    def one_pass(self, parents, k):
        opened, image = parents["open"], parents["image"]
        assert int(opened.max()) == k and bool((parents["margins"][:, :k] < self.classes - 1).all())
        narrowed.append(bool((opened < self.row_counts[image]).any()))
        bound = self.bounder.bound

        def weakened_bound(work, *args, **kwargs):
            found = bound(work, *args, **kwargs)
            lowered = (found.lower > 0) & (found.lower <= 0).any(1, keepdim=True) & ~found.infeasible[:, None]
            found.lower = found.lower.masked_fill(lowered, 1e-6)
            weakened.update(self.images.batch_index[image[lowered.any(1)]].tolist())
            return found

        self.bounder.bound = weakened_bound if weak["on"] else bound
        try:
            return bound_pass(self, parents, k)
        finally:
            del self.bounder.bound

    monkeypatch.setattr(_Run, "_bound_pass", one_pass)
    monkeypatch.setattr(passes.PassCost, "fixed_rows", lambda self: 0.0)  # each pass on its own margins
    net, seed, search = blob_network(2), 2, {"steps": 0, "root_steps": 0}
    assert searched_exactly(net, search, seed, EPS) > 0
    assert any(narrowed) and not all(narrowed)
    weak["on"] = True
    x = torch.rand(12, 2, generator=torch.Generator().manual_seed(seed + 10), dtype=torch.float64)
    with torch.no_grad():
        y = net(x).argmax(1)
    outcomes = certify(net, [BranchAndBound(timeout=30, batch=4, **search)], x, y, EPS, (0.0, 1.0))
    checked = [o for o in outcomes if o.index in weakened]
    assert checked and all(o.status == "verified" and o.margin == 1e-6 for o in checked)


def _grid_least(net: Sequential, lower: torch.Tensor, upper: torch.Tensor, label: int) -> torch.Tensor:
    """Each margin's least over a 401 x 401 grid of the 2-D box (infinity for the label's own)."""
    a = torch.linspace(0, 1, 401, dtype=torch.float64)
    points = lower + torch.stack(torch.meshgrid(a, a, indexing="ij"), -1).reshape(-1, 2) * (upper - lower)
    with torch.no_grad():
        out = net(points)
    margins = out[:, label : label + 1] - out
    margins[:, label] = math.inf
    return margins.amin(0)


def test_an_image_verified_by_its_refined_root_reports_at_most_what_its_first_pass_proved(monkeypatch):
    """The refined root bounds only the margins the first pass left open: a verified image's margin is the
    least of those bounds and of the ones the first pass proved. Ten classes, each margin barely positive
    somewhere in the box (the last layer's bias moved to it), four images searched together."""
    torch.manual_seed(3)
    layers = [Linear(2, 24), ReLU(), Linear(24, 24), ReLU(), Linear(24, 24), ReLU()]
    net, eps, g = Sequential(*layers, Linear(24, 10)).double(), 0.3, torch.Generator().manual_seed(3)
    x0 = 0.2 + 0.6 * torch.rand(1, 2, generator=g, dtype=torch.float64)
    label = int(torch.randint(0, 10, (1,), generator=g))
    least = _grid_least(net, (x0[0] - eps).clamp(0, 1), (x0[0] + eps).clamp(0, 1), label)
    scale = float(least[torch.isfinite(least)].abs().mean())
    with torch.no_grad():
        shift = least - scale * (0.002 + 0.3 * torch.rand(10, generator=g, dtype=torch.float64))
        shift[label] = 0
        net[-1].bias += shift
    x = torch.cat([x0, x0 + 0.004 * torch.randn(3, 2, generator=g, dtype=torch.float64)]).clamp(0, 1)
    seen: list[tuple[float, float]] = []
    refined = RootPhase._refined

    def recorded(self, left, root):
        found = refined(self, left, root)
        seen.extend((self.images.outcome(j).margin, self.images.closed[j]) for j in left.tolist()
                    if self.images.outcome(j).status == "verified")  # fmt: skip
        return found

    monkeypatch.setattr(RootPhase, "_refined", recorded)
    search = BranchAndBound(timeout=4, batch=16)
    search.together = len(x)
    certify(net, [search], x, torch.full((len(x),), label), eps, (0.0, 1.0))
    assert seen and all(margin <= closed for margin, closed in seen), seen
