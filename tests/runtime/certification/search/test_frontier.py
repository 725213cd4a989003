"""The frontier's tensor operations."""

import pytest
import torch

from daic.runtime.certification.search.frontier import Frontier, groups


def test_groups_hold_each_values_rows_in_order_of_value():
    found = groups(torch.tensor([3, 1, 3, 0, 1, 3]))
    assert [value for value, _ in found] == [0, 1, 3]  # 2 has no row: no group
    assert [rows.tolist() for _, rows in found] == [[3], [1, 4], [0, 2, 5]]


def _frontier(bounds: list[float], images: list[int]) -> Frontier:
    bound = torch.tensor(bounds, dtype=torch.float64)
    image = torch.tensor(images, dtype=torch.long)
    return Frontier({"bound": bound, "image": image, "depth": torch.arange(len(bounds))})


def _rows(frontier: Frontier) -> list[tuple[int, float, int]]:
    """Each subdomain's image, bound and depth, sorted."""
    columns = (frontier[name].tolist() for name in ("image", "bound", "depth"))
    return sorted(zip(*columns, strict=True))


def test_pop_takes_each_images_worst_within_its_quota_and_leaves_the_rest():
    frontier = _frontier([0.5, -3.0, -1.0, -2.0, 0.1, -0.5], [0, 0, 1, 1, 0, 1])
    picked = frontier.pop(2, 2)
    assert [row[:2] for row in _rows(picked)] == [(0, -3.0), (0, 0.1), (1, -2.0), (1, -1.0)]
    assert sorted(frontier["bound"].tolist()) == [-0.5, 0.5] and len(frontier) == 2
    # A quota an image: image 0 gives one, image 1 none.
    frontier = _frontier([0.5, -3.0, -1.0, -2.0], [0, 0, 1, 1])
    picked = frontier.pop(torch.tensor([1, 0]), 2)
    assert picked["bound"].tolist() == [-3.0] and sorted(frontier["bound"].tolist()) == [-2.0, -1.0, 0.5]


def test_push_and_drop_keep_every_column_row_aligned_and_never_write_what_the_frontier_was_made_from():
    bound = torch.tensor([-1.0, -2.0, -3.0], dtype=torch.float64)
    image, depth = torch.tensor([0, 0, 0]), torch.tensor([10, 11, 12])
    frontier = Frontier({"bound": bound, "image": image, "depth": depth})
    assert frontier.pop(1, 1)["depth"].tolist() == [12]  # its worst: the last row fills its hole
    frontier.push(_frontier([-4.0], [0]))
    frontier.drop_images(torch.tensor([True]))
    assert len(frontier) == 0 and bound.tolist() == [-1.0, -2.0, -3.0] and depth.tolist() == [10, 11, 12]
    for k in range(5):
        frontier.push(_frontier([float(k), float(-k)], [k % 3, (k + 1) % 3]))
    assert len(frontier) == 10
    frontier.drop_images(torch.tensor([False, True, False]))
    made = [row for k in range(5) for row in ((k % 3, float(k), 0), ((k + 1) % 3, float(-k), 1))]
    assert _rows(frontier) == sorted(row for row in made if row[0] != 1)


def test_a_frontier_holds_what_a_list_of_its_subdomains_would_through_any_pushes_pops_and_drops():
    generator = torch.Generator().manual_seed(0)
    frontier, reference, made = _frontier([], []), [], 0
    for step in range(60):
        n = int(torch.randint(0, 9, (1,), generator=generator))
        bounds = torch.randn(n, generator=generator, dtype=torch.float64).tolist()
        images = torch.randint(0, 3, (n,), generator=generator).tolist()
        pushed = _frontier(bounds, images)
        pushed.columns["depth"].add_(made)  # an id for every subdomain ever pushed
        frontier.push(pushed)
        reference += [(i, b, made + k) for k, (b, i) in enumerate(zip(bounds, images, strict=True))]
        made += n
        if step % 3 == 2:
            quotas = torch.randint(0, 4, (3,), generator=generator)
            picked = frontier.pop(quotas if step % 2 else int(quotas[0]), 3)
            expected = []
            for image in range(3):
                mine = sorted((r for r in reference if r[0] == image), key=lambda r: (r[1], r[2]))
                expected += mine[: int(quotas[image if step % 2 else 0])]
            assert _rows(picked) == sorted(expected)
            reference = [r for r in reference if r not in expected]
        if step % 7 == 6:
            gone = torch.rand(3, generator=generator) < 0.3
            frontier.drop_images(gone)
            reference = [r for r in reference if not bool(gone[r[0]])]
        assert _rows(frontier) == sorted(reference)
        assert frontier.counts(3).tolist() == [sum(r[0] == i for r in reference) for i in range(3)]


def test_a_push_of_other_columns_is_refused():
    frontier = _frontier([0.0], [0])
    other = Frontier(_frontier([1.0], [0]).columns | {"depth": torch.tensor([0.5])})
    with pytest.raises(ValueError, match=r"Frontier\.push: columns"):
        frontier.push(other)


def test_an_images_mean_is_over_its_open_subdomains_and_one_without_any():
    frontier = Frontier({"bound": torch.zeros(4), "image": torch.tensor([0, 2, 0, 0]),
                         "open": torch.tensor([1, 5, 2, 6])})  # fmt: skip
    assert frontier.mean("open", 3).tolist() == [3.0, 1.0, 5.0]
