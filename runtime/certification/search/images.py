"""The images one search works on together, and what it knows of each so far (on the host: one read a round).

The search numbers its images 0 .. I-1; `batch_index` maps them to the `Batch`'s. Each image keeps the least
bound that proved one of its margins on a subdomain, closed or still open (`proved`; `closed`: of the margins
its root proved), the least bound of
its undecided leaves (`undecided`), its effort, and the seconds charged to it: each phase's time is shared by
the images it worked on."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from daic.runtime.certification.certify import Batch, falsify, least_margins

ATTACK_RESTARTS, ATTACK_STEPS = 4, 100
"""An attack of a search: random starts per other class (36 trajectories for ten classes) and the
steps of each (`attacks.margin_attack`)."""


@dataclass
class Images:
    """The images of one search (see the module docstring)."""

    batch: Batch
    batch_index: Tensor  # (I,) long, on the host: each image's index in the batch
    proved: list[float] = field(init=False)
    closed: list[float] = field(init=False)
    undecided: list[float] = field(init=False)
    bounded: list[int] = field(init=False)
    deepest: list[int] = field(init=False)
    attacks: list[int] = field(init=False)
    seconds: list[float] = field(init=False)
    root_seconds: list[float] = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.batch_index)
        self.proved, self.closed, self.undecided = [math.inf] * n, [math.inf] * n, [math.inf] * n
        self.bounded, self.deepest, self.attacks = [0] * n, [0] * n, [0] * n
        self.seconds, self.root_seconds = [0.0] * n, [0.0] * n

    def __len__(self) -> int:
        return len(self.batch_index)

    def outcome(self, j: int):
        return self.batch.outcomes[int(self.batch_index[j])]

    def open(self) -> list[int]:
        """The images no point or error has decided yet."""
        return [j for j in range(len(self)) if self.outcome(j).status == "unknown"]

    def prove(self, image: Tensor, least: Tensor) -> None:
        """Subdomains of the images `image` (``(N,)``) proved margins, the least of each `least` (infinity:
        none): each image's least proved bound (one read of the host)."""
        per_image = least.new_full((len(self),), torch.inf).scatter_reduce(0, image, least, "amin")
        self.proved = [min(was, now) for was, now in zip(self.proved, per_image.tolist(), strict=True)]

    def count(self, image: Tensor, depth: Tensor) -> None:
        """Subdomains of the images `image` (``(N,)``) bounded, `depth` (``(N,)``) splits deep: each image's
        count and deepest split."""
        made = torch.bincount(image, minlength=len(self)).tolist()
        deepest = depth.new_zeros(len(self)).scatter_reduce(0, image, depth, "amax").tolist()
        self.bounded = [was + now for was, now in zip(self.bounded, made, strict=True)]
        self.deepest = [max(was, now) for was, now in zip(self.deepest, deepest, strict=True)]

    def gone(self, device: torch.device) -> Tensor:
        """``(I,)`` bool on `device`: the images decided by a point or an error (their subdomains go)."""
        # CPU: the outcomes are host objects; the mask goes to the subdomains' device
        return torch.tensor([self.outcome(j).status != "unknown" for j in range(len(self))], device=device)

    def charge(self, images: list[int], seconds: float) -> None:
        """Shares `seconds` among `images`."""
        for j in images:
            self.seconds[j] += seconds / max(len(images), 1)

    def falsify(self, model: nn.Module, points: Tensor, image: Tensor, by: str) -> None:
        """Runs the network on candidate `points` (``(N, *input)``, of the images `image`, ``(N,)``) and
        hands each image's worst one to `falsify` (a witness falsifies it)."""
        if not len(points):
            return
        batch_image = self.batch_index.to(image.device)[image]
        margins = least_margins(model, points, self.batch.y[batch_image])
        worst = torch.full((len(self),), torch.inf, dtype=margins.dtype, device=margins.device)
        worst = worst.scatter_reduce(0, image, margins, "amin")
        at = (margins == worst[image]).nonzero().squeeze(1)
        first = torch.full((len(self),), len(points), dtype=torch.long, device=margins.device)
        first = first.scatter_reduce(0, image[at], at, "amin")
        has = first < len(points)
        chosen = first[has]
        # CPU: image numbers, read on the host; a CUDA tensor may be indexed by them as they are
        pending = self.batch_index[has.cpu()]
        falsify(model, self.batch, pending, points[chosen], margins[chosen], by)

    def attack(self, model: nn.Module, images: list[int], until: float, by: str) -> None:
        """A targeted attack on the `images` together, a few trajectories towards each other class
        (`attacks.margin_attack`), until `until`: on images the cascade's attack left open it pays (at eps
        0.3 on an MNIST ConvSmall, 8 of 12 images that searches of 60 s left unknown fell to an untargeted
        attack of 32 starts of 100 steps). Seeded by the first image's index and its count of attacks:
        reproducible, and new starts each time. Its seconds are charged to the images."""
        if not images:
            return
        batch, began = self.batch, time.perf_counter()
        index = self.batch_index[images].to(batch.lower.device)
        seed = self.outcome(images[0]).index + 1_000_003 * self.attacks[images[0]]
        generator = torch.Generator().manual_seed(seed)
        point = batch.attacker.targeted(batch.inner_lower[index], batch.inner_upper[index], batch.y[index],
                                        ATTACK_STEPS, ATTACK_RESTARTS, generator, until)  # fmt: skip
        # CPU: the search's image numbers, read on the host
        self.falsify(model, point, torch.tensor(images, device=point.device), by)
        for j in images:
            self.attacks[j] += 1
        self.charge(images, time.perf_counter() - began)

    def not_a_number(self, lower: Tensor, image: Tensor) -> None:
        """Marks an error every image with a bound ``lower`` (``(N, K)`` of its subdomains `image`) that is
        not a number (an overflow): neither a proof nor a counterexample can come of it."""
        counts = torch.zeros(len(self), dtype=torch.long, device=lower.device)
        nan = counts.index_add(0, image, torch.isnan(lower).any(1).long()) > 0
        for j in nan.nonzero().flatten().tolist():
            outcome = self.outcome(j)
            if outcome.status == "unknown":
                outcome.status, outcome.margin = "error", None
                outcome.message = (
                    "a bound over the image's box is not a number (NaN): the network overflows there"
                )

    def ended(self, j: int, still_open: int, least_open: float, label: str, inexact: list[str]) -> None:
        """Image j's outcome once the search (`label`) stops undecided by a point: verified when nothing is
        left open, else unknown with the worst open bound, saying whether the time ran out (with the
        activations whose leaves are not decided exactly, `inexact`, named when they are what is left)."""
        outcome = self.outcome(j)
        if outcome.status != "unknown":
            return
        if not still_open and self.undecided[j] == math.inf:
            outcome.status, outcome.by = "verified", label
            proved = min(self.proved[j], self.closed[j])
            outcome.margin = proved if proved != math.inf else 0.0
            return
        i = int(self.batch_index[j])
        self.batch.best[i] = max(float(self.batch.best[i]), min(self.undecided[j], least_open))
        outcome.timed_out = bool(still_open)
        if still_open:
            outcome.message = f"{label}: the time ran out with {still_open} subdomains open"
        elif inexact:
            outcome.message = (
                f"{label}: every subdomain was split to its end and its box cut until no float lies inside "
                f"an input's interval; {' and '.join(inexact)} is not affine there, and the bound of "
                "such a box stays at most zero at points that are no witness"
            )
        else:
            outcome.message = (
                f"{label}: every subdomain was split to its end; a leaf's least margin is at most zero "
                "at points that are no witness (a tie, or a violation float32 or exact arithmetic undoes)"
            )

    def effort(self, j: int, open_count: int, phases: dict[str, float]) -> dict[str, object]:
        """Image j's search for the record: the seconds of its root, the subdomains it bounded, the deepest
        (in splits) and those still open, its attacks; and where the search's time went (`phases`, shared
        by the `images` searched together)."""
        return {"root_seconds": round(self.root_seconds[j], 3), "subdomains": self.bounded[j],
                "depth": self.deepest[j], "open": open_count, "attacks": self.attacks[j],
                "images": len(self), "phases": phases}  # fmt: skip
