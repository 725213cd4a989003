"""The search's one time budget: what each phase is told, from a budget whose clock is read as it goes."""

import time

from daic.runtime.certification.search.budget import ATTACK_SHARE, Budget


def _budget(started_ago: float, seconds: float, spent: dict[str, float] | None = None) -> Budget:
    """A budget of `seconds` that began `started_ago` seconds ago, with the phases' seconds `spent`."""
    start = time.perf_counter() - started_ago
    return Budget(start, start + seconds, dict(spent or {}))


def test_an_attack_is_due_while_attacks_had_less_than_their_share():
    # 10 s into the search, attacks may have had ATTACK_SHARE of them (2 s).
    assert _budget(10, 100, {"attacks": 1.0}).due()
    assert not _budget(10, 100, {"attacks": 2.5}).due()
    assert _budget(10, 100).due()  # none yet: the first is due


def test_an_attack_may_take_its_share_of_the_whole_search_within_the_deadline():
    budget = _budget(10, 100)
    assert abs(budget.attack_until() - (time.perf_counter() + ATTACK_SHARE * 100)) < 0.5
    late = _budget(99, 100)  # 1 s left: the deadline comes first
    assert late.attack_until() == late.deadline


def test_a_round_starts_only_where_the_last_ones_time_still_fits():
    budget = _budget(90, 100)
    budget.round_seconds = 5.0
    assert budget.fits()
    budget.round_seconds = 20.0
    assert not budget.fits() and budget.fits(1.0)
    assert abs(budget.left() - 10) < 0.5 and not budget.over()


def test_a_phase_share_is_of_the_time_left_and_phases_add_up():
    budget = _budget(50, 100)
    assert abs(budget.share(0.5) - (time.perf_counter() + 25)) < 0.5
    with budget.phase("root"):
        pass
    with budget.phase("root"):
        time.sleep(0.01)
    assert set(budget.record()) == {"root"} and budget.record()["root"] >= 0.01
    assert budget.share(0.5) <= budget.deadline
