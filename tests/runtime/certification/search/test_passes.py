"""How a round's subdomains are cut into bounding passes: children a pass within its memory, the fixed cost
of a pass learnt from the passes bounded, and groups of images bounded as one where that pays."""

import math

import torch

from daic.runtime.certification.search.passes import (
    BYTES_PER_ROW_NEURON,
    MAX_CHILDREN,
    PASS_BYTES,
    REMEMBERED,
    PassCost,
    children_per_pass,
    merged,
    passes,
)


def test_a_pass_takes_as_many_children_as_fit_its_memory():
    cpu = torch.device("cpu")
    # A ConvBig's 48,064 neurons on one margin: 17.3 MB a child, 62 in 1 GiB; on nine, 6.
    assert children_per_pass(48_064, 1, cpu) == PASS_BYTES // (48_064 * BYTES_PER_ROW_NEURON) == 62
    assert children_per_pass(48_064, 9, cpu) == 6
    # A small network takes `MAX_CHILDREN`; a network too wide for one child still takes one.
    assert children_per_pass(100, 1, cpu) == MAX_CHILDREN
    assert children_per_pass(10**9, 1, cpu) == 1


def test_passes_cut_a_round_in_order_into_equal_parts_within_the_memory():
    # ConvBig on nine margins: 6 children a pass at most, so 20 in four passes of five.
    assert passes(20, 6) == [slice(0, 5), slice(5, 10), slice(10, 15), slice(15, 20)]
    assert passes(13, 6) == [slice(0, 4), slice(4, 8), slice(8, 13)]
    assert passes(20, MAX_CHILDREN) == [slice(0, 20)]
    assert passes(0, 6) == []


def test_a_pass_cost_learns_the_fixed_part_in_rows_worth():
    cost = PassCost()
    # 0.15 s a pass and 3 ms a row: the fixed part is worth 50 rows.
    for rows in (4, 128, 640):
        assert cost.fixed_rows() == 0.0  # fewer than three passes: nothing learnt, nothing merged
        cost.add(rows, 0.15 + 0.003 * rows)
    assert math.isclose(cost.fixed_rows(), 50.0, rel_tol=1e-9)
    # Only the last passes count: REMEMBERED passes at 10 ms a row and no fixed part replace them.
    for k in range(REMEMBERED):
        cost.add(10 + k, 0.01 * (10 + k))
    assert math.isclose(cost.fixed_rows(), 0.0, abs_tol=1e-9)


def test_a_pass_cost_learns_nothing_from_passes_of_one_size_and_all_where_rows_cost_nothing():
    same = PassCost()
    for seconds in (0.1, 0.2, 0.3):
        same.add(64, seconds)
    assert same.fixed_rows() == 0.0
    free = PassCost()
    for rows in (8, 64, 512):
        free.add(rows, 0.2)  # a GPU's pass: its launches, whatever its rows
    assert free.fixed_rows() == math.inf


def test_groups_are_merged_where_the_passes_saved_cost_more_than_the_rows_padded():
    groups, room = [(1, 300), (6, 4), (9, 2)], {1: 1024, 6: 1024, 9: 1024}
    # At 50 rows a pass: 6 and 9 apart cost 50 + 24 + 50 + 18 = 142, together 50 + 6 * 9 = 104; the 300
    # children of one margin would pad 2,400 rows to save a pass.
    assert merged(groups, 50.0, room) == [1, 9, 9]
    assert merged(groups, 0.0, room) == [1, 6, 9]
    assert merged(groups, math.inf, room) == [9, 9, 9]
    # Where nine margins hold 4 children a pass, the six together take two passes: 100 + 54 > 142.
    assert merged(groups, 50.0, {1: 1024, 6: 1024, 9: 4}) == [1, 6, 9]
    assert merged([(3, 10)], 50.0, {3: 1024}) == [3]


def test_rows_that_cost_nothing_merge_into_the_fewest_passes_the_memory_allows():
    # ConvBig holds 6 children a pass on nine margins, 62 on one: merging 1,000 children of one margin
    # into the nine's passes would take 169 passes against 17 + 2 apart.
    groups = [(1, 1000), (9, 10)]
    assert merged(groups, math.inf, {1: 62, 9: 6}) == [1, 9]
    # Where they fit, one pass; of runs that cost the same, the longest (fewest passes, fewest rows first).
    assert merged([(1, 4), (9, 2)], math.inf, {1: 1024, 9: 1024}) == [9, 9]
    assert merged([(2, 3), (3, 2)], 3.0, {2: 1024, 3: 1024}) == [3, 3]  # 3 + 6 + 3 + 6 = 3 + 15
