"""Where branch and bound splits: how many subdomains of each image a round splits, and how deep."""

import torch

from daic.runtime.certification.search.branching import MAX_LEVELS, quotas, split_levels


def _images(*queues: int) -> torch.Tensor:
    """The image of each subdomain split this round, `queues[i]` of image ``i``."""
    return torch.cat([torch.full((n,), i, dtype=torch.long) for i, n in enumerate(queues)])


def test_the_first_round_splits_one_level():
    assert split_levels(_images(1, 3), 2, 32, None, 100.0).tolist() == [1, 1, 1, 1]


def test_each_image_fills_twice_the_batch_from_its_own_queue():
    # Image 0 has a full queue (32: one level, 64 children); image 1 has two subdomains open: five levels
    # give each 32 children, 64 in all. Counted as one queue of 34, both would split one level.
    levels = split_levels(_images(32, 2, 1), 3, 32, 1e-6, 100.0)
    assert levels[:32].unique().tolist() == [1]
    assert levels[32:34].tolist() == [5, 5]
    assert levels[34].item() == 6  # 64 children of a lone subdomain
    assert split_levels(_images(1), 1, 256, 1e-6, 100.0).tolist() == [MAX_LEVELS]


def test_an_images_children_keep_within_a_quarter_of_its_share_of_the_time_left():
    # 2 s of the time left are this image's: its children may take 0.5 s, at 10 ms each 50, so two
    # subdomains split five levels (64 children) would be too many, four (32) fit.
    assert split_levels(_images(2), 1, 32, 0.01, 2.0).tolist() == [4, 4]
    # The time is shared by the images split this round: two others with nothing to split take none.
    assert split_levels(_images(2), 3, 32, 0.01, 2.0).tolist() == [4, 4]
    # With no time for even two children, a subdomain is still split once.
    assert split_levels(_images(2), 1, 32, 1.0, 0.1).tolist() == [1, 1]


def test_each_image_splits_within_its_own_quota_and_at_its_own_childrens_cost():
    # Image 0 splits 32 a round, image 1 (three times the margins) 10: two subdomains open each, image 0's
    # room is 32 children a subdomain (five levels), image 1's 10 (three).
    levels = split_levels(_images(2, 2), 2, torch.tensor([32, 10]), 1e-6, 100.0)
    assert levels.tolist() == [5, 5, 3, 3]
    # Its children cost three times as much: within a quarter of its share (50 s), 1 s a child, image 1's
    # two subdomains may have 12 children in all (six each: two levels), image 0's 37 (18 each: four).
    levels = split_levels(_images(2, 2), 2, 32, torch.tensor([1 / 3, 1.0]), 100.0)
    assert levels.tolist() == [4, 4, 2, 2]


def test_an_image_with_k_times_the_margins_splits_k_times_fewer_subdomains_a_round():
    rows = torch.tensor([1, 2, 3, 9, 1])
    # Image 4 has nothing open: image 0 has the fewest margins of the working images.
    assert quotas(rows, torch.tensor([True, True, True, True, False]), 32).tolist() == [32, 16, 10, 3, 32]
    # Without image 0, image 1's two margins are the fewest: it splits the batch, image 3 (9) 64 // 9.
    assert quotas(rows, torch.tensor([False, True, True, True, False]), 32).tolist() == [64, 32, 21, 7, 64]
    assert quotas(rows, torch.tensor([True, False, False, True, False]), 4).tolist() == [4, 2, 1, 1, 4]
    # A search of one image splits the batch.
    assert quotas(torch.tensor([6]), torch.tensor([True]), 32).tolist() == [32]
    # Margins a subdomain on average, as its children's shrink: 2.5 times the fewest, 2.5 times fewer.
    assert quotas(torch.tensor([1.0, 2.5, 1.6]), torch.tensor([True, True, True]), 32).tolist() == [
        32,
        12,
        20,
    ]


def test_an_images_quota_keeps_its_two_children_a_subdomain_within_a_quarter_of_its_share_of_the_time():
    rows, working = torch.tensor([1, 2]), torch.tensor([True, True])
    # 40 s left, 20 s an image: its children may take 5 s, at 10 and 20 ms a child 250 and 125 subdomains
    # (two children each) of the 512 and 256 its margins allow.
    seconds = torch.tensor([0.01, 0.02], dtype=torch.float64)
    assert quotas(rows, working, 512, seconds, 40.0).tolist() == [250, 125]
    # An image with nothing open takes no share: the other's is the whole 40 s (500 of its 512).
    assert quotas(rows, torch.tensor([True, False]), 512, seconds, 40.0)[0].item() == 500
    # Where the time allows more, the batch still bounds the quota; with no time left, one subdomain.
    assert quotas(rows, working, 32, seconds, 40.0).tolist() == [32, 16]
    assert quotas(rows, working, 512, seconds, 0.0).tolist() == [1, 1]
