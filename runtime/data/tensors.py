"""Data held in memory as tensors: the training and test sets a run uses, their batches, and the errors
a data set that cannot be loaded raises."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from daic.errors import DaicError


class DataError(DaicError):
    """A data set that cannot be loaded, with a message that says what to do."""


class NoDataFolder(DataError):
    """A data set read from files was given no folder, or one that does not exist: a command-line mistake."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=2)


@dataclass
class TensorData:
    train_x: Tensor  # float32 in [0, 1], (N, C, H, W)
    train_y: Tensor  # int64, (N,)
    test_x: Tensor
    test_y: Tensor
    classes: int
    value_range: tuple[float, float] = (0.0, 1.0)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])

    def held_out(self, share: float) -> TensorData:
        """The training set split in two: `share` of it (drawn with seed 0, so the same images on every
        machine and run) becomes the test set, the rest the training set; the test set is not read."""
        n = len(self.train_y)
        held = min(n - 1, max(1, round(share * n)))
        # CPU: the split's own generator, where the loaded tensors are: the split is data, not training
        order = torch.randperm(n, generator=torch.Generator().manual_seed(0))
        test, train = order[:held].sort().values, order[held:].sort().values
        return TensorData(
            self.train_x[train],
            self.train_y[train],
            self.train_x[test],
            self.train_y[test],
            self.classes,
            self.value_range,
        )


def to_device(tensor: Tensor, device: torch.device) -> Tensor:
    """A host tensor (random draws come from CPU generators, so that runs reproduce on any device) on the
    device without making the host wait: pinned memory is what lets the copy run asynchronously."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def batches(
    x: Tensor, y: Tensor, size: int, generator: torch.Generator | None = None, indices: Tensor | None = None
) -> Iterator[tuple[Tensor, Tensor]]:
    """Batches of (x, y) in a shuffled order (when a generator is given) or in order."""
    n = len(y) if indices is None else len(indices)
    # CPU: an order of host-held images; a CUDA tensor may be indexed by it as it is
    order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
    if indices is not None:
        order = indices[order]
    for start in range(0, n, size):
        pick = order[start : start + size]
        yield x[pick], y[pick]
