"""The frontier's tensor operations."""

import torch

from daic.runtime.certification.search.frontier import groups


def test_groups_hold_each_values_rows_in_order_of_value():
    found = groups(torch.tensor([3, 1, 3, 0, 1, 3]))
    assert [value for value, _ in found] == [0, 1, 3]  # 2 has no row: no group
    assert [rows.tolist() for _, rows in found] == [[3], [1, 4], [0, 2, 5]]
