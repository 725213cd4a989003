"""The root of a search: the bounds of every split node over the whole box, tightened by alpha-CROWN layer by
layer before the search splits (they hold on every subdomain, so every subdomain starts from them)."""

from __future__ import annotations

import time

import torch
from torch import Tensor, nn

from daic.runtime.certification.alpha_crown import optimized_lower
from daic.runtime.certification.search.bounded import Bounded, open_first, restricted, rows_of
from daic.runtime.certification.search.bounding import LEAST_GAIN, splittable
from daic.runtime.context import AbstractContext
from daic.runtime.domains.coeffs import Dense
from daic.runtime.domains.symbolic import SAMPLE, Symbolic, backsubstitute, paying_rest, spread_sample

ROOT_RATE = 0.5
"""Adam's rate for the intermediate bounds' slopes at the root (AlphaCROWN's default)."""

ROOT_SHARE = 0.5
"""The share of a search's time left after the root's first bound and attack that may go to tightening
the intermediate bounds (alpha-CROWN, layer by layer): the root is then bounded again with them and the
rest of the time splits. On an MNIST ConvBig, refining until the deadline left the search no time to
bound the root again, and every tightened bound was lost. The first bound gets more (`FIRST_SHARE`): on
a CNN7 it takes 20 s, and cut at half of a 60 s limit it left the later layers to the intervals, so that
the refined root verified none of the 4 images it verifies whole."""

FIRST_SHARE = 0.8
"""The share of a search's time its root's first CROWN pass may refine neurons in: the passes after it (the
hybrid zonotope's through the later layers, the margins' back-substitution) take the rest."""

INTERMEDIATE = ("auto", "crown", "root")
"""Where a subdomain's intermediate bounds come from: CROWN again with its splits ("crown"), or the root's
with the splits clamped in ("root", beta-CROWN's way); "auto" chooses by the network and the root's cost
(`CHEAP_ROOT`)."""

CHEAP_ROOT = 0.02
"""`intermediate="auto"` recomputes a subdomain's intermediate bounds by CROWN only where subdomains cut
their boxes (a network with Sigmoid, Tanh or HardTanh: CROWN over a smaller box is what tightens them)
and the root's own CROWN pass took at most this share of the time limit. A ReLU split leaves the box
whole, and there the root's bounds (alpha-CROWN-refined, the split clamped in, the constraints left to
beta-CROWN's multipliers) grow the same trees for less: on an MNIST ConvSmall CROWN again took 1.9-2.1x
the seconds of rounds for the same subdomains (docs/certification.md). On an MNIST ConvBig a subdomain's
CROWN pass costs as much as the root's (8 s)."""


def refined_intermediates(
    model: nn.Module, lower: Tensor, upper: Tensor, known: dict[int, tuple[Tensor, Tensor]], relu: str,
    steps: int, lr: float, deadline: float = float("inf"),
) -> dict[int, tuple[Tensor, Tensor]]:  # fmt: skip
    """The bounds of every ReLU's input (by node id) over the box, `known` tightened by alpha-CROWN (Xu et
    al. 2021): layer by layer, the unstable neurons' two rows (``+x`` and ``-x``) are back-substituted with
    the lower slopes of the ReLUs they depend on optimised by Adam, one slope per row and neuron, the best
    bound of each row kept (every slope in [0, 1] gives a sound one). After a layer is tightened the network
    is analysed again, so that later layers start from the tighter relaxations. A ReLU input that depends
    on no ReLU (the first layer's, or the first of a parallel branch) is affine in the input: its bounds are
    exact already. Stops refining at `deadline`; every ReLU input's bounds of the last analysis are
    returned, refined or not."""
    prior = dict(known)
    ctx = AbstractContext(training=False, relu=relu)
    relus: list[Symbolic] = []
    index, changed = 0, True
    while time.perf_counter() < deadline:
        if changed:
            value = Symbolic.input(lower, upper, crown=True, prior=prior, deadline=deadline,
                                   least_gain=LEAST_GAIN)  # fmt: skip
            output = model.abstract(value, ctx)
            relus = sorted((n for n in output.ancestors() if splittable(n)), key=lambda n: n.id)
            # Every layer's bounds of this analysis, so that later layers keep what the tighter earlier
            # ones gave them even where the deadline stops the refining before they are reached.
            prior.update({node.parents[0].id: node.parents[0].bounds() for node in relus})
            changed = False
        if index >= len(relus):
            break
        node = relus[index].parents[0]
        index += 1
        depends = any(splittable(a) for a in node.ancestors())
        low, up = node.bounds()
        unstable = ((low < 0) & (up > 0)).flatten(1)
        if depends and bool(unstable.any()):
            prior[node.id], changed = _alpha_refined(node, unstable, steps, lr, deadline)
    return prior


def _alpha_refined(
    node: Symbolic, unstable: Tensor, steps: int, lr: float, deadline: float
) -> tuple[tuple[Tensor, Tensor], bool]:
    """`node`'s bounds with its `unstable` neurons (``(B, N)``) bounded by alpha-CROWN: a sample of each
    image's first (`spread_sample`), the rest of an image's only if its sample narrowed by `LEAST_GAIN`;
    and whether any image's rest was refined (the network is then worth analysing again). On an MNIST
    CNN7 a layer's neurons took minutes, past a 60 s limit, for nothing CROWN had not found."""
    sample = spread_sample(unstable, SAMPLE)
    if sample is None:
        return _alpha_bounds(node, unstable, steps, lr, deadline), True
    before, began = node.bounds(), time.perf_counter()
    found = _alpha_bounds(node, sample, steps, lr, deadline)
    slot_seconds = (time.perf_counter() - began) / max(int(sample.sum(1).max()), 1)
    rest = paying_rest(unstable, sample, before, found, LEAST_GAIN)
    if not bool(rest.any()):
        return found, False
    return _alpha_bounds(node, rest, steps, lr, deadline, start=found, slot_seconds=slot_seconds), True


def _alpha_bounds(
    node: Symbolic, unstable: Tensor, steps: int, lr: float, deadline: float,
    start: tuple[Tensor, Tensor] | None = None, slot_seconds: float = 0.0,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """`node`'s bounds (from `start`, default its own) with its `unstable` neurons (``(B, N)``) bounded by
    alpha-CROWN (`optimized_lower`: the slopes of the ReLUs it depends on), a chunk of each image's
    neurons at a time within the analysis' memory budget, until `deadline`: a chunk that would end past
    it at the last chunk's seconds per neuron of an image (`slot_seconds` before the first) is not
    started."""
    low, up = (t.flatten(1).clone() for t in (start or node.bounds()))
    b, n = unstable.shape
    image, neuron = unstable.nonzero(as_tuple=True)
    slot = torch.cumsum(unstable.to(torch.long), 1)[image, neuron] - 1  # each neuron's row in its image
    most = int(unstable.sum(1).max())
    # Rows, slopes, their gradients and Adam's moments: a few copies of the widest node per row.
    per_row = 2 * b * node.analysis.widest * low.element_size() * 8
    chunk = max(1, node.analysis.budget_bytes // per_row)
    for first_slot in range(0, most, chunk):
        began, k = time.perf_counter(), min(chunk, most - first_slot)
        if began + k * slot_seconds > deadline:
            break
        mine = (slot >= first_slot) & (slot < first_slot + k)
        at, row, neurons = image[mine], slot[mine] - first_slot, neuron[mine]
        A = low.new_zeros((b, 2 * k, n))
        A[at, row, neurons] = 1
        A[at, k + row, neurons] = -1
        rows = Dense(A.reshape(b, 2 * k, *node.shape[1:]))
        best = optimized_lower(node, rows, backsubstitute(node, rows), steps, lr, deadline)
        low[at, neurons] = torch.maximum(low[at, neurons], best[at, row])
        up[at, neurons] = torch.minimum(up[at, neurons], -best[at, k + row])
        slot_seconds = (time.perf_counter() - began) / k
    return low.reshape(node.shape), up.reshape(node.shape)


class RootPhase:
    """The roots of a branch-and-bound run: every image's whole box bounded, the images that decides
    settled, and the margins each image's subdomains must bound. A base of the run, whose state (`model`,
    `images`, `budget`, `bounder`, `search`, the images' boxes, `prior`, `margins`; `inexact` it only reads)
    it reads and sets."""

    def _first(self) -> tuple[Bounded, float] | None:
        """Every image's whole box bounded, the images it decides settled; its bounds and seconds, or None
        where no image is left."""
        began, n = time.perf_counter(), len(self.images)
        everyone = torch.arange(n, device=self.lower.device)
        first = self.bounder.bound(self._work(everyone), self.budget.share(FIRST_SHARE),
                                   companions=("box", "hbox"))  # fmt: skip
        seconds = time.perf_counter() - began
        self.bounder.crown = self._recomputes(seconds / n)
        self._charge_root(list(range(n)), seconds)
        self.prior = first.split_inputs
        if not self._settle_root(first, everyone):
            return None
        self._open_rows(first.lower)
        return first, seconds

    def _after_attack(self, first: Bounded, first_seconds: float) -> tuple[Tensor, Bounded] | None:
        """The images left (``(n,)``) and their roots' bounds on the margins they leave open: refined where
        time allows. Refining and the second pass take about what the first did: without that much time
        left they would end past the deadline."""
        left = self._left()
        root = rows_of(restricted(first, left), self.margins[left])
        if not self.search.root_steps or self.budget.left() < first_seconds:
            return left, root
        return self._refined(left, root)

    def _refined(self, left: Tensor, root: Bounded) -> tuple[Tensor, Bounded] | None:
        """The images `left` bounded again after their intermediate bounds are tightened by alpha-CROWN (for
        a share of the time; they hold on every subdomain and leave fewer neurons to split), the second
        optimisation from the first's slopes, for a share of what is left."""
        began, search, work = time.perf_counter(), self.search, self._work(left)
        refined = refined_intermediates(self.model, work.lower, work.upper, root.split_inputs,
                                        self.images.batch.relu, search.root_steps, ROOT_RATE,
                                        self.budget.share(ROOT_SHARE))  # fmt: skip
        work.prior = refined
        crown, self.bounder.crown = self.bounder.crown, False
        again = self.bounder.bound(work, self.budget.share(ROOT_SHARE), max(search.steps, search.root_steps),
                                   warm=(root.alphas, {}), companions=("box", "hbox"))  # fmt: skip
        self.bounder.crown = crown
        # Both passes' bounds hold (fmax: a bound that is not a number in one pass leaves the other's).
        again.lower = torch.fmax(again.lower, root.lower)
        self._charge_root(left.tolist(), time.perf_counter() - began)
        for key, (low, up) in again.split_inputs.items():
            self.prior[key][0][left], self.prior[key][1][left] = low, up
        if not self._settle_root(again, left):
            return None
        still = self._open_mask()[left]
        return left[still], restricted(again, still)

    def _settle_root(self, root: Bounded, image: Tensor) -> bool:
        """Settles the images `image` whose `root` bounds decide them (a candidate point falsifies, a bound
        is not a number, every margin is proved, or no input follows the splits); whether any is left. A
        verified image's margin is the least of these bounds and of those its first pass proved (`closed`,
        infinite until then): the refined pass bounds only the margins the first left open."""
        self._try_corners(root.corners, image)
        self.images.not_a_number(root.lower, image)
        least = root.lower.amin(1)
        proved = (root.infeasible | (least > 0)).tolist()
        for j, done, margin in zip(image.tolist(), proved, least.tolist(), strict=True):
            outcome = self.images.outcome(j)
            if done and outcome.status == "unknown":
                least_proved = min(margin, self.images.closed[j])
                outcome.status, outcome.by, outcome.margin = "verified", self.search.label, least_proved
        return bool(self.images.open())

    def _try_corners(self, corners: Tensor, image: Tensor) -> None:
        """The minimisers of the subdomains' linear bounds (``(N, *input)``, of the images `image`) as
        candidates: each image's worst falsifies it if it leads to a witness."""
        self.images.falsify(self.model, corners, image, self.search.label)

    def _open_rows(self, lower: Tensor) -> None:
        """The margins each image's subdomains bound: those its root leaves open (`open_first`), padded to
        the most any image has. A margin proved on the whole box is proved on every subdomain: the least of
        those is kept (`closed`)."""
        every = torch.full((len(lower),), lower.shape[1], device=lower.device)
        order, self.row_counts, closed = open_first(lower, every)
        self.margins = order[:, : int(self.row_counts.max())]
        self.images.closed = closed.tolist()

    def _left(self) -> Tensor:
        return self._open_mask().nonzero().squeeze(1)

    def _open_mask(self) -> Tensor:
        # CPU: which images are open, from the host outcomes, onto the bounds' device
        return torch.tensor([self.images.outcome(j).status == "unknown" for j in range(len(self.images))],
                            device=self.lower.device)  # fmt: skip

    def _recomputes(self, root_seconds: float) -> bool:
        """Whether subdomains recompute their intermediate bounds by CROWN (see `INTERMEDIATE`), given the
        seconds the root's CROWN pass took an image."""
        if self.search.intermediate == "auto":
            return bool(self.inexact) and root_seconds <= CHEAP_ROOT * self.search.timeout
        return self.search.intermediate == "crown"

    def _charge_root(self, images: list[int], seconds: float) -> None:
        self.images.charge(images, seconds)
        for j in images:
            self.images.root_seconds[j] += seconds / max(len(images), 1)
