"""Augmentations applied to whole batches at once (no per-image Python), drawing from a host generator so
that runs reproduce on any device."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from daic.runtime.data.tensors import to_device


class RandomCrop:
    """Zero-pads by `padding` and crops a random `size` x `size` window, per image."""

    def __init__(self, size: int, padding: int = 4) -> None:
        self.size, self.padding = int(size), int(padding)

    def __call__(self, x: Tensor, generator: torch.Generator) -> Tensor:
        n, c, h, w = x.shape
        p, s = self.padding, self.size
        padded = F.pad(x, (p, p, p, p))
        top = to_device(torch.randint(0, h + 2 * p - s + 1, (n,), generator=generator), x.device)
        left = to_device(torch.randint(0, w + 2 * p - s + 1, (n,), generator=generator), x.device)
        rows = top[:, None] + torch.arange(s, device=x.device)
        cols = left[:, None] + torch.arange(s, device=x.device)
        by_rows = padded.gather(2, rows[:, None, :, None].expand(n, c, s, w + 2 * p))
        return by_rows.gather(3, cols[:, None, None, :].expand(n, c, s, s))

    def __repr__(self) -> str:
        return f"RandomCrop({self.size}, padding={self.padding})"


class HorizontalFlip:
    """Flips each image left to right with probability 1/2."""

    def __call__(self, x: Tensor, generator: torch.Generator) -> Tensor:
        flip = to_device(torch.rand(x.shape[0], generator=generator) < 0.5, x.device)
        return torch.where(flip[:, None, None, None], x.flip(3), x)

    def __repr__(self) -> str:
        return "HorizontalFlip"


def augment(x: Tensor, transforms: Sequence, generator: torch.Generator) -> Tensor:
    for transform in transforms:
        x = transform(x, generator)
    return x
