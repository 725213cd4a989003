"""Properties as margins: the layers appended for a property's clauses compute ``[0, -z_1, ..., -z_C]`` with
``z_c`` the largest of clause c's constraints, exactly; and what the cascade concludes on them is true:
a verified box holds no point satisfying a clause (sampled, and PGD towards the clauses), a falsified one
gives a witness inside the box that satisfies one."""

from __future__ import annotations

import pytest
import torch

from daic.runtime.certification.certify import Attack, cascade
from daic.runtime.certification.search import BranchAndBound, InputSplit
from daic.runtime.certification.specification import certify_region, clause_layers
from daic.runtime.certification.verification import BoxBound, CROWNBound
from daic.runtime.certification.witness import Witnesses
from daic.runtime.layers import Linear, ReLU, Sequential

torch.set_num_threads(1)


def random_clauses(generator: torch.Generator, outputs: int, count: int, most_rows: int):
    clauses = []
    for _ in range(count):
        rows = int(torch.randint(0, most_rows + 1, (1,), generator=generator))
        clauses.append((torch.randn(rows, outputs, generator=generator, dtype=torch.float64),
                        torch.randn(rows, generator=generator, dtype=torch.float64)))  # fmt: skip
    return clauses


def largest(clauses, y: torch.Tensor) -> torch.Tensor:
    """``(B, C)``: each clause's largest constraint value at the outputs ``y`` (0 for a clause of none)."""
    found = []
    for rows, constants in clauses:
        found.append((y @ rows.T + constants).amax(1) if len(rows) else torch.zeros(len(y), dtype=y.dtype))
    return torch.stack(found, 1)


@pytest.mark.parametrize("seed", range(4))
def test_the_appended_layers_compute_minus_the_largest_constraint_of_each_clause(seed):
    generator = torch.Generator().manual_seed(seed)
    clauses = random_clauses(generator, 4, 5, 7)
    spec = Sequential(*clause_layers(clauses, 4))
    y = torch.randn(50, 4, generator=generator, dtype=torch.float64)
    out = spec(y)
    assert out.shape == (50, 6)
    assert torch.equal(out[:, 0], torch.zeros(50, dtype=torch.float64))
    assert torch.allclose(out[:, 1:], -largest(clauses, y), atol=1e-12)


def small_network(seed: int) -> Sequential:
    torch.manual_seed(seed)
    return Sequential(Linear(3, 12), ReLU(), Linear(12, 12), ReLU(), Linear(12, 4)).double().eval()


def near_boundary(model, generator, lower, upper, outputs: int, count: int):
    """Clauses of 1 to 3 constraints that are close to holding at the box's centre: some hold at points of
    the box, some nowhere, and the cheap steps cannot decide them all."""
    with torch.no_grad():
        centre = model(((lower + upper) / 2).unsqueeze(0))[0]
    clauses = []
    for rows, _ in random_clauses(generator, outputs, count, 2):
        rows = torch.cat([rows, torch.randn(1, outputs, generator=generator, dtype=torch.float64)])
        shift = 0.15 * torch.randn(len(rows), generator=generator, dtype=torch.float64) + 0.05
        clauses.append((rows, shift - rows @ centre))
    return clauses


def test_what_the_cascade_concludes_on_a_property_is_true():
    found = []
    for seed in range(12):
        model = small_network(seed)
        generator = torch.Generator().manual_seed(100 + seed)
        lower = torch.rand(3, generator=generator, dtype=torch.float64) - 0.5
        upper = lower + 0.4 * torch.rand(3, generator=generator, dtype=torch.float64)
        clauses = near_boundary(model, generator, lower, upper, 4, 2)
        steps = cascade([BoxBound(), CROWNBound(), BranchAndBound(timeout=5)], attack=True)
        outcome = certify_region(model, clauses, steps, (lower, upper), (lower, upper))
        found.append((outcome.status, outcome.by))
        assert outcome.status in ("verified", "falsified")
        points = lower + (upper - lower) * torch.rand(4000, 3, generator=generator, dtype=torch.float64)
        with torch.no_grad():
            satisfied = (largest(clauses, model(points)) <= 0).any(1)
        if outcome.status == "verified":
            assert not satisfied.any() and outcome.margin > 0
            continue
        witness = outcome.witness
        assert torch.all(witness >= lower) and torch.all(witness <= upper)
        with torch.no_grad():
            assert bool((largest(clauses, model(witness.unsqueeze(0))) <= 0).any())
    assert {status for status, _ in found} == {"verified", "falsified"}
    assert {by for _, by in found} & {"CROWN", "BranchAndBound", "PGD"}, found


class Anywhere(Witnesses):
    """Every float32 point of the box is a witness: a property whose clause has no constraint."""

    def violated(self, points, images):
        return torch.ones(len(points), dtype=torch.bool)


def test_a_clause_of_no_constraints_holds_anywhere_and_the_centre_falsifies_it():
    model = small_network(0)
    lower, upper = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    empty = [(torch.zeros(0, 4, dtype=torch.float64), torch.zeros(0, dtype=torch.float64))]
    # The spec's margin there is a tie, 0 - 0, which the default check (intervals) cannot tell from a small
    # positive margin: a check of the clause as written (here: every point satisfies it) can.
    outcome = certify_region(model, empty, [BoxBound()], (lower, upper), (lower, upper))
    assert outcome.status == "unknown"
    outcome = certify_region(model, empty, [BoxBound()], (lower, upper), (lower, upper), witnesses=Anywhere())
    assert outcome.status == "falsified" and outcome.by == "clean"
    assert torch.equal(outcome.witness, torch.full((3,), 0.5, dtype=torch.float64))


def test_a_counterexample_must_lie_in_the_inner_box():
    model = small_network(1)
    lower, upper = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    always = [(torch.zeros(1, 4, dtype=torch.float64), torch.zeros(1, dtype=torch.float64))]  # 0 <= 0
    empty_inside = (torch.ones(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64))
    outcome = certify_region(model, always, [Attack()], (lower, upper), empty_inside)
    assert outcome.status == "unknown" and outcome.witness is None


def test_splitting_the_input_box_decides_what_crown_leaves_open_and_is_right():
    found = []
    for seed in range(10):
        model = small_network(seed)
        generator = torch.Generator().manual_seed(200 + seed)
        lower = torch.rand(3, generator=generator, dtype=torch.float64) - 0.5
        upper = lower + 1.5 * torch.rand(3, generator=generator, dtype=torch.float64)
        clauses = near_boundary(model, generator, lower, upper, 4, 2)
        steps = [CROWNBound(), InputSplit()]
        outcome = certify_region(model, clauses, steps, (lower, upper), (lower, upper))
        found.append((outcome.status, outcome.by))
        points = lower + (upper - lower) * torch.rand(20000, 3, generator=generator, dtype=torch.float64)
        with torch.no_grad():
            satisfied = (largest(clauses, model(points)) <= 0).any(1)
        if outcome.status == "verified":
            assert not satisfied.any() and outcome.margin > 0
        else:
            assert outcome.status == "falsified"
            with torch.no_grad():
                assert bool((largest(clauses, model(outcome.witness.unsqueeze(0))) <= 0).any())
    assert ("verified", "InputSplit") in found, found
    assert ("falsified", "InputSplit") in found or ("falsified", "clean") in found, found
