"""Where branch and bound splits: how deep each subdomain is split in a round."""

import torch

from daic.runtime.certification.search.branching import MAX_LEVELS, split_levels


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
