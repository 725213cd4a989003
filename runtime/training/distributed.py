"""Data-parallel training over several processes (launched by torchrun): who this process is, which
examples it trains on, how its random draws stay those of a single process, and the few collectives the
trainer needs.

The scheme's `batch` is the global batch. Each epoch's permutation is split the way PyTorch's
DistributedSampler splits it (padded by wrap-around to a multiple of the process count, then every
`world`-th index from `rank`), and each process takes `batch / world` of its share per step, so step i of
every process together covers exactly the examples of a single process's batch i. Every random number an
example gets (augmentation, sampled goals) is drawn for the whole global batch from the epoch's generator
and each process keeps its own rows (`GlobalDraws`): one process and eight see the same numbers, so they
train the same network up to floating-point rounding.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.overrides import TorchFunctionMode


class DistributedError(ValueError):
    """A setting that cannot work with this many processes (the message says what to change)."""


# --- the process group ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """This process's place among `world` processes; a group of one does no communication at all."""

    rank: int = 0
    world: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        """Rank 0 alone writes the run folder, the checkpoints and the display."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1

    def sum(self, tensor: Tensor) -> Tensor:
        """The elementwise sum over all processes (a new tensor; the argument is left alone).

        The tensor must be on this process's device: NCCL reduces CUDA tensors, gloo CPU ones."""
        if not self.active:
            return tensor
        total = tensor.clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total

    def broadcast(self, value: Any) -> Any:
        """Rank 0's `value` on every process (any picklable object; tensors inside should be on the CPU)."""
        if not self.active:
            return value
        box = [value if self.is_main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def close(self, wait: bool = True) -> None:
        """Leaves the group, by default once every process is done with it: a process that tore its
        connections down while another was still receiving would crash that one. After a failure there is
        no waiting (the others may never come; torchrun stops them when one process exits with an error)."""
        if self.active and dist.is_initialized():
            if wait:
                dist.barrier()
            dist.destroy_process_group()


def launched_world() -> int:
    """How many processes torchrun started (1 outside torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def process_device(name: str, local_rank: int, cuda_devices: int) -> torch.device:
    """The device of the process with `local_rank` on its node, for `--device name`.

    Under torchrun every process owns one GPU, `cuda:LOCAL_RANK`; naming one GPU (`cuda:3`) would put every
    process on it, so that is refused."""
    if name == "auto":
        name = "cuda" if cuda_devices else "cpu"
    device = torch.device(name)
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise DistributedError(f"--device {name}: distributed training runs on cpu or cuda")
    if device.index is not None:
        raise DistributedError(
            f"--device {name}: each process uses cuda:LOCAL_RANK; pass --device cuda (or auto), and choose "
            "the GPUs with CUDA_VISIBLE_DEVICES"
        )
    if not cuda_devices:
        raise DistributedError(f"--device {name}: no CUDA device is available")
    if local_rank >= cuda_devices:
        raise DistributedError(
            f"process {local_rank} of this node has no GPU: {cuda_devices} visible; start at most "
            f"{cuda_devices} processes per node, or pass --device cpu"
        )
    return torch.device("cuda", local_rank)


def join(device: str) -> Group:
    """Joins the process group torchrun described in the environment (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT): NCCL between GPUs, gloo between CPU processes."""
    world = launched_world()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    chosen = process_device(device, local_rank, cuda_devices)
    if world == 1:
        return Group(0, 1, chosen)
    if chosen.type == "cuda":
        # Before init: NCCL binds each rank's communicator to the current device.
        torch.cuda.set_device(chosen)
        dist.init_process_group("nccl", device_id=chosen)
    else:
        dist.init_process_group("gloo")
    return Group(dist.get_rank(), dist.get_world_size(), chosen)


# --- which examples a process trains on -----------------------------------------------------------------


def local_batch(batch: int, world: int) -> int:
    """Each process's share of the global batch."""
    if batch % world:
        raise DistributedError(
            f"the scheme's batch ({batch}) is the global batch, split evenly over {world} processes; "
            f"choose a batch that is a multiple of {world}, or another number of processes"
        )
    return batch // world


def shard(order: Tensor, rank: int, world: int) -> Tensor:
    """This process's indices of an epoch's permutation, as DistributedSampler chooses them: the order padded
    with its own first indices to a multiple of `world` (so that every process takes as many steps), then
    every `world`-th index starting at `rank`."""
    pad = -len(order) % world
    if pad:
        repeats = -(-pad // len(order))
        order = torch.cat([order, order.repeat(repeats)[:pad]])
    return order[rank::world]


def evaluation_share(n: int, rank: int, world: int) -> slice:
    """A contiguous, unpadded share of the test set (counts are summed, so nothing may be seen twice)."""
    return slice(rank * n // world, (rank + 1) * n // world)


# --- random draws that do not depend on the number of processes -----------------------------------------

_SIZED = frozenset({torch.rand, torch.randn, torch.randint})


def _size_of(func: Callable, args: tuple, kwargs: dict) -> tuple[tuple, tuple[int, ...] | None, dict]:
    """(the positional arguments before the size, the size, the keyword arguments without it)."""
    kwargs = dict(kwargs)
    if "size" in kwargs:
        return args, tuple(kwargs.pop("size")), kwargs
    if func is torch.randint:  # randint(high, size) or randint(low, high, size)
        return args[:-1], tuple(args[-1]), kwargs
    if len(args) == 1 and isinstance(args[0], Sequence):  # rand((n, c)) rather than rand(n, c)
        return (), tuple(args[0]), kwargs
    return (), tuple(args), kwargs


class GlobalDraws(TorchFunctionMode):
    """Inside it, a per-example draw from `generator` is made for the whole global batch, and this process
    keeps the rows of its own examples.

    A draw is per-example when its first dimension is the local batch (`local`, set before each step); it
    is then drawn `world` times as long and rows `rank::world` are kept, which are the rows a single process
    gives to this process's examples (see `shard`). Any other draw from the generator (a scalar, say) is
    made as it is, the same on every process. Either way each process's generator advances exactly as a
    single process's does, so later draws stay aligned too. Only rand, randn and randint are understood;
    another sampler called with the generator is refused rather than silently giving each process different
    numbers for the same example.

    Only draws that name `generator` are touched; any other torch call passes straight through (a mode sees
    every torch call inside it, so the trainer enters it only around augmentation and the goal's sampling).
    """

    def __init__(self, generator: torch.Generator, rank: int, world: int) -> None:
        super().__init__()
        self.generator, self.rank, self.world = generator, rank, world
        self.local: int | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if kwargs.get("generator") is not self.generator and not any(a is self.generator for a in args):
            return func(*args, **kwargs)
        if func not in _SIZED:
            name = getattr(func, "__name__", repr(func))
            raise DistributedError(
                f"{name} draws from the epoch's generator, which distributed training splits only for "
                "torch.rand, torch.randn and torch.randint; draw with one of those (batch first)"
            )
        prefix, size, rest = _size_of(func, args, kwargs)
        if not size or size[0] != self.local:
            return func(*prefix, size, **rest)
        drawn = func(*prefix, (size[0] * self.world, *size[1:]), **rest)
        return drawn[self.rank :: self.world]


# --- moving batches to the device -----------------------------------------------------------------------


def gather(source: Tensor, pick: Tensor, device: torch.device) -> Tensor:
    """source[pick] on `device`, without making the host wait for the device.

    For a GPU the rows are gathered straight into page-locked (pinned) memory and copied with
    non_blocking=True, which the GPU's copy engine does while the host goes on with the next step. Pinning
    the whole data set once would not help: indexing makes a new, pageable tensor, and a copy from
    pageable memory is synchronous. PyTorch's caching host allocator does not hand a pinned block out again
    until the copy that reads it has finished, so a fresh buffer per batch is safe and cheap.
    """
    if device.type != "cuda":
        return source[pick].to(device)
    staged = torch.empty(
        (len(pick), *source.shape[1:]), dtype=source.dtype, pin_memory=True
    )  # CPU: pinned, to copy from
    torch.index_select(source, 0, pick, out=staged)
    return staged.to(device, non_blocking=True)
