"""The open subdomains of a search, as tensors: one row per subdomain in every column.

A `Frontier` holds the columns `bound` (``(Q,)``: a lower bound of the subdomain's least margin) and
`image` (``(Q,)``: which of the searched images it belongs to) beside whatever a policy keeps per subdomain
(branch and bound: its split signs, ranked neurons, slopes and multipliers; input splitting: its box).
Subdomains of every image a search was given share it, so that one bounding batch holds several images'.
Picking, pushing and pruning are tensor operations on the device the columns are on."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Frontier:
    """Open subdomains: each column a tensor of one row per subdomain (see the module docstring)."""

    columns: dict[str, Tensor]

    def __len__(self) -> int:
        return len(self.columns["bound"])

    def __getitem__(self, name: str) -> Tensor:
        return self.columns[name]

    def take(self, rows: Tensor) -> Frontier:
        """The subdomains `rows` (indices or a mask)."""
        return Frontier({name: column[rows] for name, column in self.columns.items()})

    def push(self, other: Frontier) -> Frontier:
        """These subdomains and `other`'s (the same columns)."""
        if not len(other):
            return self
        if not len(self):
            return other
        return Frontier(
            {name: torch.cat([column, other.columns[name]]) for name, column in self.columns.items()}
        )

    def pick(self, quota: int, images: int) -> tuple[Frontier, Frontier]:
        """The worst-bounded `quota` subdomains of each image (fewer where it has fewer), and the rest: each
        open image is split in every round, whatever its bounds beside the others'."""
        if not len(self):
            return self, self
        by_bound = torch.argsort(self["bound"], stable=True)
        image = self["image"][by_bound]
        grouped = torch.argsort(image, stable=True)  # by image, worst bound first within each
        order = by_bound[grouped]
        counts = torch.bincount(image, minlength=images)
        starts = torch.cumsum(counts, 0) - counts
        rank = torch.arange(len(order), device=order.device) - starts[self["image"][order]]
        chosen = rank < quota
        return self.take(order[chosen]), self.take(order[~chosen])

    def drop_images(self, gone: Tensor) -> Frontier:
        """Without the subdomains of the images `gone` (a mask over the images)."""
        return self.take(~gone[self["image"]])

    def least_bounds(self, images: int) -> Tensor:
        """``(images,)``: each image's least open bound (infinity where it has none)."""
        least = torch.full((images,), torch.inf, dtype=self["bound"].dtype, device=self["bound"].device)
        return least.scatter_reduce(0, self["image"], self["bound"], "amin")

    def counts(self, images: int) -> Tensor:
        """``(images,)``: each image's open subdomains."""
        return torch.bincount(self["image"], minlength=images)


def groups(key: Tensor) -> list[tuple[int, Tensor]]:
    """The rows of each value of `key` (``(N,)``, small non-negative integers), values in increasing order,
    each with the indices of its rows: one read of the host for the group sizes, whatever the groups."""
    order, found, first = torch.argsort(key, stable=True), [], 0
    for value, count in enumerate(torch.bincount(key).tolist()):
        if count:
            found.append((value, order[first : first + count]))
            first += count
    return found
