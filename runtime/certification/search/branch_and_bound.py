"""Branch and bound over the splits of a network's splittable layers (ReLUs), many images in one search.

The images' properties (every margin ``y_t - y_j`` positive over the clipped eps-ball) are first bounded
together at their roots, with intermediate bounds tightened by alpha-CROWN layer by layer (`root`), then
split into subdomains by fixing unstable neurons active (``x >= 0``) or inactive (``x <= 0``). Each
subdomain is bounded by CROWN with its split neurons' bounds clamped, then alpha-CROWN's slopes and
beta-CROWN's multipliers are optimised together for a few Adam steps from its parent's (`bounding`): its
bound is then its exact minimum over the relaxation at the optimum. Only the margins a subdomain's parent
leaves open are bounded on it (a margin proved on a subdomain holds on its every part). Subdomains whose
bounds are all positive are done; the others wait in the `Frontier`, and each round splits the worst `batch`
of every image on one of the neurons whose relaxation costs their bound most (`branching`), several levels in
one round while few are open. The subdomains of every image are bounded in one batch.

A subdomain with no unstable neuron left is decided exactly (`leaves`): this makes the search complete on
piecewise-linear networks. On a network with an activation that is not affine on a leaf (a Sigmoid or
Tanh, split at zero at most; a HardTanh, not split), a leaf's input box is cut in two instead, and the
halves bounded again (`boxes`): bounds over ever smaller boxes approach the network's least margin there,
so a leaf is decided in the limit (a box the width of a float is left undecided). A falsification is only
ever a witness: a point the network was run on (targeted attacks from many starts, the minimiser of a
subdomain's linear bound, or of a leaf's linear program) that `falsify` accepts.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from daic.runtime.certification.certify import Batch
from daic.runtime.certification.search import branching, passes
from daic.runtime.certification.search.bounded import Bounded, open_first, reordered, restricted
from daic.runtime.certification.search.bounding import Bounder, Work
from daic.runtime.certification.search.budget import Budget
from daic.runtime.certification.search.frontier import Frontier, groups
from daic.runtime.certification.search.images import Images
from daic.runtime.certification.search.leaves import LeafPhase, inexact_members
from daic.runtime.certification.search.policy import Search
from daic.runtime.certification.search.root import INTERMEDIATE, RootPhase


class BranchAndBound(Search):
    """Branch and bound over ReLU splits until each image is verified, falsified, or the time (`timeout`
    seconds an image) is spent (see the module docstring)."""

    def __init__(
        self, timeout: float = 60.0, batch: int = 1024, steps: int = 20, lr_alpha: float = 0.1,
        lr_beta: float = 0.05, root_steps: int = 50, candidates: int = 3, intermediate: str = "auto",
    ) -> None:  # fmt: skip
        if timeout <= 0 or batch < 1 or steps < 0 or root_steps < 0 or candidates < 1:
            raise ValueError(
                "BranchAndBound: timeout > 0, batch >= 1, steps >= 0, root_steps >= 0 and candidates >= 1, "
                "please"
            )
        if intermediate not in INTERMEDIATE:
            raise ValueError(f"BranchAndBound: intermediate is one of {INTERMEDIATE}, not {intermediate!r}")
        self.intermediate = intermediate
        self.timeout, self.batch, self.steps = float(timeout), int(batch), int(steps)
        self.root_steps, self.candidates = int(root_steps), int(candidates)
        self.lr_alpha, self.lr_beta = float(lr_alpha), float(lr_beta)
        self.label = self._label()

    def _label(self) -> str:
        """The call as written, with every argument that differs from its default: a record says which
        search produced it."""
        defaults = inspect.signature(BranchAndBound.__init__).parameters
        given = [
            f"{name}={_written(getattr(self, name))}"
            for name, param in defaults.items()
            if name != "self" and getattr(self, name) != param.default
        ]
        return f"BranchAndBound({', '.join(given)})" if given else "BranchAndBound"

    def _search(self, model: nn.Module, batch: Batch, pending: Tensor, budget: Budget) -> list[float]:
        run = _Run(self, model, Images(batch, pending), budget)
        try:
            run.go()
        finally:
            run.record()
        return run.images.seconds


class _Run(RootPhase, LeafPhase):
    """One search of a batch's images: their roots, then rounds until nothing is open or the time is spent.
    Tensors indexed by image are ``(I, ...)`` over every image of the search, decided ones included."""

    def __init__(self, search: BranchAndBound, model: nn.Module, images: Images, budget: Budget) -> None:
        self.search, self.model, self.images, self.budget = search, model, images, budget
        batch = images.batch
        self.bounder = Bounder(model, None, batch.relu, search.steps, search.lr_alpha, search.lr_beta)
        index = images.batch_index.to(batch.lower.device)
        self.lower, self.upper, self.y = batch.lower[index], batch.upper[index], batch.y[index]
        self.classes = int(model(self.lower[:1]).shape[1])
        self.frontier: Frontier | None = None
        self.margins = torch.arange(self.classes - 1, device=self.lower.device).expand(len(images), -1)
        self.prior: dict[int, tuple[Tensor, Tensor]] = {}  # the roots' split-node bounds, (I, *F)
        # (I,): what bounding a child of each image took in its last round's passes (None: not yet measured)
        self.child_seconds: Tensor | None = None
        self.pass_cost = passes.PassCost()
        # The activations whose leaves are not decided exactly: with any, each subdomain keeps its own box.
        self.inexact = inexact_members(model)
        self.searched: list[int] = []  # the images whose subdomains were split

    def go(self) -> None:
        with self.budget.phase("root"):
            first = self._first()
        if first is None:
            return
        with self.budget.phase("attacks"):
            if not self._attack(self.images.open()):
                return
        with self.budget.phase("root"):
            root = self._after_attack(*first)
        if root is not None:
            self.frontier = self._first_frontier(*root)
            self.searched = root[0].tolist()
            self._rounds()

    def _work(
        self,
        image: Tensor,
        signs: Tensor | None = None,
        boxes: Boxes | None = None,
        margins: Tensor | None = None,
    ) -> Work:
        """The subdomains of the images `image` (``(N,)``) with the split `signs`, on their own `boxes`
        where given (else their images'), as a batch to bound on `margins` (``(N, K)``; default: those
        their images' roots leave open)."""
        prior = {k: (low[image], up[image]) for k, (low, up) in self.prior.items()} or None
        lower, upper = boxes if boxes is not None else (self.lower[image], self.upper[image])
        return Work(
            lower, upper, self.y[image], self.margins[image] if margins is None else margins, signs, prior
        )

    def _passes(self, count: Tensor) -> Iterator[tuple[int, Tensor]]:
        """Subdomains with `count` (``(N,)``) margins open each, cut into bounding passes: grouped by how
        many (one read of the host), groups bounded as one where the passes saved cost more
        than the margins padded (`passes.merged`, at the search's `PassCost`), each group cut
        into as many passes as its margins need (`passes.passes`); each pass as its margins and its
        subdomains' indices. Grouped before they are cut, a pass holds as many as its own margins allow:
        cut first by the most margins of any image, six MNIST ConvSmall images with 1 to 9 open bounded
        passes of 91 children, each then split again by margins, mostly of one."""
        found, neurons, device = groups(count), self.bounder.layout.size, self.lower.device
        per_pass = {k: passes.children_per_pass(neurons, k, device) for k, _ in found}  # one plan, one cut
        if len(found) > 1:
            on = passes.merged([(k, len(rows)) for k, rows in found], self.pass_cost.fixed_rows(), per_pass)
            found = [(k, torch.cat([rows for (_, rows), m in zip(found, on, strict=True) if m == k]))
                     for k in sorted(set(on))]  # fmt: skip
        for k, rows in found:
            for part in passes.passes(len(rows), per_pass[k]):
                yield k, rows[part]

    def _first_frontier(self, left: Tensor, root: Bounded) -> Frontier:
        """The open images' roots as the first subdomains."""
        layout, n, count = self.bounder.layout, len(left), self.row_counts[left]
        self._prove(root, left, count)
        signs = torch.zeros((n, layout.size), dtype=torch.int8, device=self.lower.device)
        columns = {
            "bound": root.lower.amin(1),
            "image": left,
            "depth": torch.zeros_like(left),
            "signs": signs,
        }
        if self.inexact:
            columns["lower"], columns["upper"] = self.lower[left], self.upper[left]
        return Frontier(columns | self._kept_columns(root, self.margins[left], count))

    def _prove(self, bounded: Bounded, image: Tensor, count: Tensor) -> None:
        """The least bound of the rows `bounded` proves (of subdomains of the images `image`, the first
        `count` rows each) is its image's `proved`, whether or not the subdomain stays open."""
        proved = open_first(bounded.lower, count)[2]
        self.images.prove(image, proved.masked_fill(bounded.infeasible, torch.inf))

    def _kept_columns(self, bounded: Bounded, margins: Tensor, count: Tensor) -> dict[str, Tensor]:
        """What a subdomain keeps of its bounding (on the rows `margins`, its first `count` its own): the
        margins it leaves open, first, and how many (`open_first`; a margin proved on a subdomain holds on
        its every part, so its children leave it out: on MNIST ConvSmall, children of images with 6 and 9
        margins open at the root had 2 open on average), its ranked neurons, and its slopes and multipliers
        in its margins' order, each padded to the frontier's margins by repeating its first."""
        layout, n, width = self.bounder.layout, len(count), self.margins.shape[1]
        order, many, _ = open_first(bounded.lower, count, width)
        most = self.search.candidates + branching.MAX_LEVELS
        columns = {"margins": margins.gather(1, order), "open": many,
                   "ranked": branching.ranked_neurons(bounded, layout, most, count)}  # fmt: skip
        if self.search.steps:
            for node, shape in zip(layout.outputs, layout.shapes, strict=True):
                if node in layout.sloped:
                    columns[f"alpha{node}"] = reordered(bounded.alphas[node], order)
                beta = bounded.betas.get(node)
                columns[f"beta{node}"] = (
                    reordered(beta, order) if beta is not None
                    else bounded.lower.new_zeros((n, width, *shape))
                )  # fmt: skip
        return columns

    # ----------------------------------------------------------------------------------------------
    # rounds

    def _rounds(self) -> None:
        """Splits and bounds the open subdomains, the worst `batch` of each image a round, until none is
        left, every image is decided, or the budget is spent. Another attack runs whenever attacks have had
        less than their share of the time; a round starts only if the last one's time still fits."""
        while len(self.frontier) and self.budget.fits():
            if self.budget.due():
                with self.budget.phase("attacks"):
                    if not self._attack(self.images.open()):
                        break
            began = time.perf_counter()
            counts = self.frontier.counts(len(self.images))
            working = counts.nonzero().flatten().tolist()
            rows = self.frontier.mean("open", len(self.images))
            quotas = branching.quotas(
                rows, counts > 0, self.search.batch, self.child_seconds, self.budget.left()
            )
            picked = self.frontier.pop(quotas, len(self.images))
            leaf = picked["ranked"][:, 0] < 0
            with self.budget.phase("leaves"):
                if self.inexact:
                    self._cut_boxes(picked.take(leaf))
                else:
                    self._settle_leaves(picked.take(leaf))
            with self.budget.phase("rounds"):
                self._split(picked.take(~leaf), quotas, self.child_seconds)
            self._prune()
            self.budget.round_seconds = time.perf_counter() - began
            self.images.charge(working, self.budget.round_seconds)

    def _split(self, splitting: Frontier, quotas: Tensor, child_seconds: Tensor | None) -> None:
        """Each subdomain of `splitting` split on its best neuron (and while its image has few open, its
        next best, several levels at once, within twice its image's `quotas` and, at `child_seconds` a
        child, its share of the time), its children bounded and the open ones pushed on the frontier."""
        if not len(splitting):
            return
        chosen, by_box = self._choose(splitting)
        if by_box is not None and bool(by_box.any()):
            self._cut_boxes(splitting.take(by_box))
            splitting, chosen = splitting.take(~by_box), chosen[~by_box]
            if not len(splitting):
                return
        wanted = branching.split_levels(splitting["image"], len(self.images), quotas,
                                        child_seconds, self.budget.left())  # fmt: skip
        # Children of every depth in one batch: on a GPU a batch costs little more than one of its parts.
        made = [self._children(splitting, part, chosen[part], levels) for levels, part in groups(wanted)]
        self._bound_children(splitting, {name: torch.cat([children[name] for children in made])
                                         for name in made[0]})  # fmt: skip

    def _children(self, splitting: Frontier, part: Tensor, chosen: Tensor, wanted: int) -> dict[str, Tensor]:
        """The children of the subdomains `part` of `splitting` split on their `chosen` neurons and their
        next best, `wanted` levels where each has as many ranked: each its parent's row, its own signs and
        depth (its other columns are its parent's, taken a pass at a time: `_pass_columns`)."""
        ranked = splitting["ranked"][part]
        levels = branching.usable_levels(ranked, wanted)
        neurons = branching.split_neurons(chosen, ranked, levels)
        many = 2**levels
        depth = splitting["depth"][part].repeat_interleave(many) + levels
        signs = branching.children_signs(splitting["signs"][part], neurons)
        return {"parent": part.repeat_interleave(many), "depth": depth, "signs": signs}

    def _choose(self, splitting: Frontier) -> tuple[Tensor, Tensor | None]:
        """``(P,)``: each subdomain's neuron to split among its best-ranked `candidates`: the one whose worse
        child CROWN bounds highest, every candidate's children bounded together without optimisation (past
        the deadline, the best-ranked). A score alone misjudges a neuron whose split moves other neurons'
        bounds: on an MNIST ConvSmall, searches that chose by it reached 50 splits deep with their worst
        bound unmoved. On a network whose activations are not all affine on a leaf, also ``(P,)``: whether
        the two halves of the subdomain's box bound better still (then its box is cut instead); else None."""
        ranked = splitting["ranked"]
        if self.search.candidates == 1 or self.budget.over():
            return ranked[:, 0], None
        candidates = ranked[:, : self.search.candidates]
        candidates = torch.where(candidates < 0, candidates[:, :1], candidates)  # too few: the best again
        trials, many = branching.trial_signs(splitting["signs"], candidates), 2 * candidates.shape[1]
        image, margins, count = (
            splitting[name].repeat_interleave(many, 0) for name in ("image", "margins", "open")
        )
        worst = self._estimates(image, margins, count, trials, _boxes(splitting, many))
        neuron, worth = branching.best_candidate(worst, candidates)
        return neuron, (self._box_worth(splitting) > worth) if self.inexact else None

    def _bound_children(self, parents: Frontier, children: dict[str, Tensor]) -> None:
        """`children` (each its `parent`'s row of `parents` and the columns it has of its own) bounded in
        `_passes`: their candidate points tried, the closed ones counted, the open ones pushed on the
        frontier. An image's seconds a child over its passes are its own (`child_seconds`, which sizes its
        next rounds): one figure for all the search's children made the small, slow passes of images with
        many margins shrink the rounds of those with one."""
        image = parents["image"][children["parent"]]
        spent = torch.zeros(len(self.images), dtype=torch.float64, device=image.device)
        for k, rows in self._passes(parents["open"][children["parent"]]):
            began = time.perf_counter()
            self._bound_pass(self._pass_columns(parents, children, rows, k), k)
            took = time.perf_counter() - began
            self.pass_cost.add(len(rows) * k, took)
            spent.index_add_(0, image[rows], spent.new_full((len(rows),), took / len(rows)))
        made = torch.bincount(image, minlength=len(self.images))
        if self.child_seconds is None:  # the first measured: every image's until it has its own
            self.child_seconds = (spent.sum() / made.sum().clamp(min=1)).expand(len(self.images)).clone()
        self.child_seconds = torch.where(made > 0, spent / made.clamp(min=1), self.child_seconds)

    def _pass_columns(
        self, parents: Frontier, children: dict[str, Tensor], rows: Tensor, k: int
    ) -> dict[str, Tensor]:
        """The columns of the `children` `rows`, bounded in a pass on `k` margins: their own, and their
        parents' others, those a margin (slopes and multipliers) on the first `k` only. A round's children
        copied whole (every parent's column repeated, joined, then cut into passes) cost a joint search of
        six MNIST ConvSmall images 6 s of 60."""
        parent = children["parent"][rows]
        own = {name: column[rows] for name, column in children.items() if name != "parent"}
        layout = self.bounder.layout
        per_margin = {f"alpha{node}" for node in layout.sloped} | {f"beta{node}" for node in layout.outputs}
        taken = {name: (column[:, :k] if name in per_margin else column)[parent]
                 for name, column in parents.columns.items() if name not in {*own, "ranked"}}  # fmt: skip
        return own | taken

    def _bound_pass(self, children: dict[str, Tensor], k: int) -> None:
        """Children (`_pass_columns`) with at most `k` margins open each, bounded together in one pass."""
        image = children["image"]
        warm = None
        if self.search.steps:
            layout = self.bounder.layout
            warm = ({node: children[f"alpha{node}"] for node in layout.sloped},
                    {node: children[f"beta{node}"] for node in layout.outputs})  # fmt: skip
        work = self._work(image, children["signs"], _boxes(children), children["margins"][:, :k])
        bounded = self.bounder.bound(work, self.budget.deadline, warm=warm)
        self._try_corners(bounded.corners, image)
        self.images.not_a_number(bounded.lower, image)
        # A child's box lies in its parent's: the parent's bound (its `bound` column) holds on it too.
        least = torch.maximum(bounded.lower.amin(1), children["bound"])
        keep = ~(bounded.infeasible | (least > 0))
        self._prove(bounded, image, children["open"])
        self.images.count(image, children["depth"])
        columns = {"bound": least[keep], "image": image[keep], "depth": children["depth"][keep],
                   "signs": children["signs"][keep]}  # fmt: skip
        if self.inexact:
            columns["lower"], columns["upper"] = children["lower"][keep], children["upper"][keep]
        kept = self._kept_columns(
            restricted(bounded, keep), children["margins"][keep], children["open"][keep]
        )
        self.frontier.push(Frontier(columns | kept))

    def _estimates(
        self, image: Tensor, margins: Tensor, count: Tensor, signs: Tensor, boxes: Boxes | None = None
    ) -> Tensor:
        """``(N,)``: estimates (`Bounder.estimate`) of the least margin of the subdomains of the images
        `image` with the split `signs` (on their `boxes`, where they have their own), infinity where the
        splits contradict each other, each on its first `count` `margins` (padded where `_passes` merges
        its group), in `_passes` (a round's trials are six times its subdomains)."""
        found = torch.empty(len(image), dtype=self.lower.dtype, device=image.device)
        for k, rows in self._passes(count):
            part_boxes = None if boxes is None else (boxes[0][rows], boxes[1][rows])
            work = self._work(image[rows], signs[rows], part_boxes, margins[rows, :k])
            lower, infeasible = self.bounder.estimate(work, self.budget.deadline)
            found[rows] = lower.amin(1).masked_fill(infeasible, torch.inf)
        return found

    def _prune(self) -> None:
        """Drops the subdomains of images a point or an error decided."""
        self.frontier.drop_images(self.images.gone(self.lower.device))

    def _attack(self, images: list[int]) -> bool:
        """An attack on the open `images` together (`Images.attack`); whether any image is left."""
        self.images.attack(self.model, images, self.budget.attack_until(), self.search.label)
        self._prune_if_any()
        return bool(self.images.open())

    def _prune_if_any(self) -> None:
        if self.frontier is not None:
            self._prune()

    # ----------------------------------------------------------------------------------------------
    # the end

    def record(self) -> None:
        """Each image's outcome once the search stops, and what the search did for it."""
        frontier = self.frontier
        n = len(self.images)
        counts = [0] * n if frontier is None else frontier.counts(n).tolist()
        least = [math.inf] * n if frontier is None else frontier.least_bounds(n).tolist()
        phases = self.budget.record()
        for j in self.searched:
            self.images.ended(j, counts[j], least[j], self.search.label, self.inexact)
            self.images.outcome(j).search = self.images.effort(j, counts[j], phases)


Boxes = tuple[Tensor, Tensor]
"""Subdomains' own input boxes, ``(N, *input)`` lower and upper ends."""


def _boxes(subdomains: Frontier | dict[str, Tensor], repeat: int = 1) -> Boxes | None:
    """The subdomains' own boxes (each repeated `repeat` times), or None where they have none."""
    columns = subdomains.columns if isinstance(subdomains, Frontier) else subdomains
    if "lower" not in columns:
        return None
    return columns["lower"].repeat_interleave(repeat, 0), columns["upper"].repeat_interleave(repeat, 0)


def _written(value: float | str) -> str:
    """An argument as the language writes it."""
    return f'"{value}"' if isinstance(value, str) else f"{value:g}"
