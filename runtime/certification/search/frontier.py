"""The open subdomains of a search, as tensors: one row per subdomain in every column.

A `Frontier` holds the columns `bound` (``(Q,)``: a lower bound of the subdomain's least margin) and
`image` (``(Q,)``: which of the searched images it belongs to) beside whatever a policy keeps per subdomain
(branch and bound: its split signs, ranked neurons, slopes and multipliers; input splitting: its box).
Subdomains of every image a search was given share it, so that one bounding batch holds several images'.
Popping, pushing and pruning are tensor operations on the device the columns are on.

The columns are kept with room to grow (twice the rows at most, after they shrink to a quarter): a push
writes after the last row, and rows popped or pruned are filled by the last rows kept, so a round copies
the rows it moves, not the frontier. Copied whole at every round (a concatenation to push, a gather to
keep the rest), the frontier of six MNIST ConvSmall images searched together for 360 s took 41 s of it."""

from __future__ import annotations

import torch
from torch import Tensor


class Frontier:
    """Open subdomains: each column a tensor of one row per subdomain (see the module docstring)."""

    def __init__(self, columns: dict[str, Tensor]) -> None:
        self._store = dict(columns)
        self._size = len(columns["bound"])
        self._owned = False  # whether the store is this frontier's own (else the caller's tensors)

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, name: str) -> Tensor:
        return self._store[name][: self._size]

    @property
    def columns(self) -> dict[str, Tensor]:
        """Every column's rows (views: a later push or pop changes them)."""
        return {name: column[: self._size] for name, column in self._store.items()}

    def take(self, rows: Tensor) -> Frontier:
        """The subdomains `rows` (indices or a mask), as a frontier of their own."""
        return Frontier({name: column[rows] for name, column in self.columns.items()})

    def push(self, other: Frontier) -> None:
        """Adds `other`'s subdomains (the same columns, of the same dtypes)."""
        n = len(other)
        if not n:
            return
        theirs = {name: column.dtype for name, column in other.columns.items()}
        if theirs != {name: column.dtype for name, column in self._store.items()}:
            raise ValueError(f"Frontier.push: columns {theirs} where the frontier has {sorted(self._store)}")
        self._own(self._size + n)
        for name, column in self._store.items():
            column[self._size : self._size + n] = other[name]
        self._size += n

    def pop(self, quota: int | Tensor, images: int) -> Frontier:
        """Removes and returns the worst-bounded `quota` subdomains of each image (fewer where it has fewer;
        `quota` one number, or ``(images,)`` one an image): each open image is split in every round,
        whatever its bounds beside the others'."""
        if not len(self):
            return self.take(torch.zeros(0, dtype=torch.long, device=self["bound"].device))
        by_bound = torch.argsort(self["bound"], stable=True)
        image = self["image"][by_bound]
        grouped = torch.argsort(image, stable=True)  # by image, worst bound first within each
        order = by_bound[grouped]
        counts = torch.bincount(image, minlength=images)
        starts = torch.cumsum(counts, 0) - counts
        ordered = self["image"][order]
        rank = torch.arange(len(order), device=order.device) - starts[ordered]
        picked = order[rank < (quota[ordered] if isinstance(quota, Tensor) else quota)]
        taken = self.take(picked)
        removed = torch.zeros(len(self), dtype=torch.bool, device=picked.device)
        removed[picked] = True
        self._remove(removed)
        return taken

    def drop_images(self, gone: Tensor) -> None:
        """Removes the subdomains of the images `gone` (a mask over the images)."""
        if len(self):
            self._remove(gone[self["image"]])

    def least_bounds(self, images: int) -> Tensor:
        """``(images,)``: each image's least open bound (infinity where it has none)."""
        least = torch.full((images,), torch.inf, dtype=self["bound"].dtype, device=self["bound"].device)
        return least.scatter_reduce(0, self["image"], self["bound"], "amin")

    def counts(self, images: int) -> Tensor:
        """``(images,)``: each image's open subdomains."""
        return torch.bincount(self["image"], minlength=images)

    def mean(self, name: str, images: int) -> Tensor:
        """``(images,)``: the mean of the column `name` over each image's open subdomains (one where it has
        none)."""
        counts = self.counts(images)
        sums = torch.zeros(images, dtype=torch.float64, device=counts.device)
        sums.index_add_(0, self["image"], self[name].to(torch.float64))
        return torch.where(counts > 0, sums / counts.clamp(min=1), 1.0)

    def _remove(self, removed: Tensor) -> None:
        """Removes the rows `removed` (a mask over the rows), the last rows kept moved into their places
        (one read of the host)."""
        gone = int(removed.sum())
        if not gone:
            return
        size = self._size - gone
        holes = removed[:size].nonzero().squeeze(1)
        movers = (~removed[size:]).nonzero().squeeze(1) + size
        self._own(size)
        for column in self._store.values():
            column[holes] = column[movers]
        self._size = size
        if 4 * size < len(self._store["bound"]):  # a frontier that shrank gives back what it held
            self._store = {name: _resized(column[:size], 2 * size) for name, column in self._store.items()}

    def _own(self, rows: int) -> None:
        """Makes the store this frontier's own, with room for `rows` (twice what it had where that is
        short): the columns it was made from are never written."""
        capacity = len(self._store["bound"])
        if self._owned and rows <= capacity:
            return
        room = max(rows, 2 * capacity) if rows > capacity else capacity
        self._store = {name: _resized(column[: self._size], room) for name, column in self._store.items()}
        self._owned = True


def _resized(column: Tensor, rows: int) -> Tensor:
    """`column`'s rows copied into a new tensor of `rows` rows (those past them unset)."""
    store = column.new_empty((rows, *column.shape[1:]))
    store[: len(column)] = column
    return store


def groups(key: Tensor) -> list[tuple[int, Tensor]]:
    """The rows of each value of `key` (``(N,)``, small non-negative integers), values in increasing order,
    each with the indices of its rows: one read of the host for the group sizes, whatever the groups."""
    order, found, first = torch.argsort(key, stable=True), [], 0
    for value, count in enumerate(torch.bincount(key).tolist()):
        if count:
            found.append((value, order[first : first + count]))
            first += count
    return found
