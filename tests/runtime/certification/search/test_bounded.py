"""The batch operations on what bounding found: keeping some rows, and finding those still open."""

import torch

from daic.runtime.certification.search.bounded import Bounded, open_first, reordered, rows_of


def test_each_subdomains_open_rows_come_first_and_the_least_of_those_it_proved_is_kept():
    nan = float("nan")
    lower = torch.tensor(
        [[-1.0, 2.0, -0.5, 3.0], [1.0, 2.0, 3.0, 4.0], [nan, 1.0, -1.0, 5.0]], dtype=torch.float64
    )
    order, many, proved = open_first(lower, torch.tensor([3, 4, 2]))
    # Row 0: slots 0 and 2 open of its first three (slot 3 is not its own); row 1: none open, its first kept;
    # row 2: a bound that is not a number stays open, and slot 2 is past its two.
    assert order.tolist() == [[0, 2, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert many.tolist() == [2, 1, 1]
    assert proved.tolist() == [2.0, 1.0, 1.0]
    order, _, _ = open_first(lower, torch.tensor([3, 4, 2]), width=2)
    assert order.tolist() == [[0, 2], [0, 0], [0, 0]]
    order, _, _ = open_first(lower[:, :3], torch.tensor([3, 3, 2]), width=5)  # wider than the rows bounded
    assert order.tolist() == [[0, 2, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0]]
    nothing = open_first(torch.tensor([[-1.0, -2.0]]), torch.tensor([2]))[2]
    assert nothing.tolist() == [float("inf")]


def test_every_value_a_row_has_moves_with_its_row():
    lower = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    per_row = lower[..., None, None].expand(2, 3, 2, 2).clone()
    bounded = Bounded(lower, torch.zeros(2, dtype=torch.bool), torch.zeros(2, 2), {}, {7: per_row},
                      {7: per_row + 10}, {8: per_row + 20})  # fmt: skip
    got = rows_of(bounded, torch.tensor([[2, 0], [1, 1]]))
    assert got.lower.tolist() == [[3.0, 1.0], [5.0, 5.0]]
    for values, shift in ((got.coefficients[7], 0), (got.alphas[7], 10), (got.betas[8], 20)):
        assert values.shape == (2, 2, 2, 2)
        assert values[..., 1, 0].tolist() == [[3 + shift, 1 + shift], [5 + shift, 5 + shift]]


def test_a_subdomains_values_are_reordered_as_its_rows_and_widened_by_repeating():
    value = torch.arange(12.0).view(2, 3, 2)  # two subdomains, three rows, two numbers a row
    got = reordered(value, torch.tensor([[2, 0, 0, 0], [1, 1, 1, 1]]))
    assert got.tolist() == [[[4, 5], [0, 1], [0, 1], [0, 1]], [[8, 9], [8, 9], [8, 9], [8, 9]]]
