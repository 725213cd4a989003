"""The pieces of distributed training that need no second process: how an epoch is split among processes,
random draws that do not depend on the number of processes, devices per process, and the group of one."""

import pytest
import torch
from torch.utils.data import DistributedSampler

from daic.runtime.data.augment import HorizontalFlip, RandomCrop, augment
from daic.runtime.data.tensors import batches
from daic.runtime.training.distributed import (
    DistributedError,
    GlobalDraws,
    Group,
    evaluation_share,
    gather,
    local_batch,
    process_device,
    shard,
)


@pytest.mark.parametrize(("n", "world"), [(10, 1), (10, 2), (10, 3), (7, 4), (2, 5)])
def test_shards_are_distributed_samplers_split(n, world):
    order = torch.randperm(n, generator=torch.Generator().manual_seed(3))
    for rank in range(world):
        sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False)
        # The sampler splits range(n); ours splits the permutation: the same positions of it.
        assert shard(order, rank, world).tolist() == [order[i].item() for i in sampler]


def test_shards_are_disjoint_equal_and_cover_the_epoch():
    order = torch.randperm(11, generator=torch.Generator().manual_seed(0))
    parts = [shard(order, rank, 4) for rank in range(4)]
    assert [len(p) for p in parts] == [3, 3, 3, 3]
    # 12 places for 11 examples: one (the permutation's first) is seen twice, by the last rank.
    assert sorted(torch.cat(parts).tolist()) == sorted([*order.tolist(), order[0].item()])
    assert parts[3][-1] == order[0]


def test_step_i_of_all_processes_is_batch_i_of_one_process():
    order = torch.randperm(24, generator=torch.Generator().manual_seed(1))
    world, batch = 3, 6
    local = local_batch(batch, world)
    for i in range(4):
        together = torch.cat([shard(order, r, world)[i * local : (i + 1) * local] for r in range(world)])
        assert sorted(together.tolist()) == sorted(order[i * batch : (i + 1) * batch].tolist())


def test_one_process_keeps_the_order_of_batches():
    """A group of one trains on exactly the batches it trained on before distributed training existed."""
    x, y = torch.arange(23.0)[:, None], torch.arange(23)
    old = [b.tolist() for _, b in batches(x, y, 5, torch.Generator().manual_seed(4))]
    mine = shard(torch.randperm(23, generator=torch.Generator().manual_seed(4)), 0, 1)
    assert [mine[i : i + 5].tolist() for i in range(0, 23, 5)] == old


def test_the_global_batch_must_divide_among_processes():
    assert local_batch(50, 1) == 50 and local_batch(50, 5) == 10
    with pytest.raises(DistributedError, match=r"batch \(50\) is the global batch.*multiple of 4"):
        local_batch(50, 4)


def draws_of(rank, world, local, draw):
    generator = torch.Generator().manual_seed(7)
    mode = GlobalDraws(generator, rank, world)
    mode.local = local
    with mode:
        first = draw(generator, local)
    return first, torch.rand(3, generator=generator)  # where the generator is afterwards


@pytest.mark.parametrize(
    "draw",
    [
        lambda g, n: torch.randn((n, 3, 2), generator=g),
        lambda g, n: torch.randn(n, 3, generator=g, dtype=torch.float64),
        lambda g, n: torch.rand(n, generator=g),
        lambda g, n: torch.randint(0, 9, (n,), generator=g),
        lambda g, n: torch.randint(9, size=(n, 2), generator=g),
    ],
)
def test_per_example_draws_are_a_single_processs_rows(draw):
    whole, after = draws_of(0, 1, 8, draw)  # one process, global batch 8
    for rank in range(2):
        mine, mine_after = draws_of(rank, 2, 4, draw)
        assert torch.equal(mine, whole[rank::2])
        assert torch.equal(mine_after, after)  # every process's generator stays where one process's is


def test_draws_without_a_batch_dimension_are_the_same_everywhere():
    alone, _ = draws_of(0, 1, 8, lambda g, n: torch.rand(5, generator=g))
    assert torch.equal(draws_of(1, 2, 4, lambda g, n: torch.rand(5, generator=g))[0], alone)


def test_draws_from_other_generators_and_other_samplers_are_left_or_refused():
    generator = torch.Generator().manual_seed(0)
    other = torch.Generator().manual_seed(0)
    mode = GlobalDraws(generator, 1, 2)
    mode.local = 4
    with mode:
        fresh = torch.Generator().manual_seed(0)
        assert torch.equal(torch.rand(4, generator=other), torch.rand(4, generator=fresh))
        with pytest.raises(DistributedError, match="bernoulli draws from the epoch's generator"):
            torch.bernoulli(torch.full((4,), 0.5), generator=generator)


def test_augmentation_is_the_same_for_one_process_and_two():
    images = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    transforms = [RandomCrop(8, padding=2), HorizontalFlip()]
    whole = augment(images, transforms, torch.Generator().manual_seed(5))
    for rank in range(2):
        generator = torch.Generator().manual_seed(5)
        mode = GlobalDraws(generator, rank, 2)
        mode.local = 4
        with mode:
            mine = augment(images[rank::2], transforms, generator)
        assert torch.equal(mine, whole[rank::2])


def test_each_process_owns_one_gpu():
    cuda = torch.device("cuda", 2)
    assert process_device("cuda", 2, 4) == cuda and process_device("auto", 2, 4) == cuda
    assert process_device("auto", 2, 0) == torch.device("cpu") and process_device("cpu", 3, 8).type == "cpu"
    with pytest.raises(DistributedError, match="pass --device cuda"):
        process_device("cuda:1", 0, 4)
    with pytest.raises(DistributedError, match="4 visible; start at most 4 processes per node"):
        process_device("cuda", 4, 4)
    with pytest.raises(DistributedError, match="no CUDA device"):
        process_device("cuda", 0, 0)


def test_test_set_shares_are_contiguous_and_unpadded():
    shares = [evaluation_share(10, rank, 3) for rank in range(3)]
    assert [list(range(10))[s] for s in shares] == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    # Fewer images than processes: some test none.
    assert [list(range(1))[evaluation_share(1, rank, 2)] for rank in range(2)] == [[], [0]]


def test_a_group_of_one_does_not_communicate():
    group = Group()
    values = torch.tensor([1.0, 2.0])
    assert group.is_main and not group.active and group.device == torch.device("cpu")
    assert group.sum(values) is values and group.broadcast({"a": 1}) == {"a": 1}
    group.close()


def test_batches_are_gathered_onto_the_device():
    source = torch.arange(12.0).reshape(6, 2)
    pick = torch.tensor([4, 0, 2])
    assert torch.equal(gather(source, pick, torch.device("cpu")), source[pick])
    if torch.cuda.is_available():
        moved = gather(source, pick, torch.device("cuda"))
        assert moved.device.type == "cuda" and torch.equal(moved.cpu(), source[pick])
