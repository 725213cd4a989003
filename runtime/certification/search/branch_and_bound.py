"""Branch and bound over the splits of a network's splittable layers (ReLUs), many images in one search.

The images' properties (every margin ``y_t - y_j`` positive over the clipped eps-ball) are first bounded
together at their roots, with intermediate bounds tightened by alpha-CROWN layer by layer (`root`), then
split into subdomains by fixing unstable neurons active (``x >= 0``) or inactive (``x <= 0``). Each
subdomain is bounded by CROWN with its split neurons' bounds clamped, then alpha-CROWN's slopes and
beta-CROWN's multipliers are optimised together for a few Adam steps from its parent's (`bounding`): its
bound is then its exact minimum over the relaxation at the optimum. Only the margins an image's root leaves
open are bounded on its subdomains. Subdomains whose bounds are all positive are done; the others wait in
the `Frontier`, and each round splits the worst `batch` of every image on one of the neurons whose
relaxation costs their bound most (`branching`), several levels in one round while few are open. The
subdomains of every image are bounded in one batch.

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
from daic.runtime.certification.search.bounded import Bounded, padded, restricted
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
        self, image: Tensor, signs: Tensor | None = None, boxes: Boxes | None = None, rows: int | None = None
    ) -> Work:
        """The subdomains of the images `image` (``(N,)``) with the split `signs`, on their own `boxes`
        where given (else their images'), as a batch to bound on their first `rows` margins (default: all
        the frontier's)."""
        prior = {k: (low[image], up[image]) for k, (low, up) in self.prior.items()} or None
        lower, upper = boxes if boxes is not None else (self.lower[image], self.upper[image])
        return Work(lower, upper, self.y[image], self.margins[image, :rows], signs, prior)

    def _passes(self, image: Tensor) -> Iterator[tuple[int, Tensor]]:
        """Subdomains of the images `image` cut into bounding passes: grouped by how many margins their
        images have open (one read of the host), groups bounded as one where the passes saved cost more
        than the margins padded (`passes.merged`, at the search's `PassCost`), each group cut
        into as many passes as its margins need (`passes.passes`); each pass as its margins and its
        subdomains' indices. Grouped before they are cut, a pass holds as many as its own margins allow:
        cut first by the most margins of any image, six MNIST ConvSmall images with 1 to 9 open bounded
        passes of 91 children, each then split again by margins, mostly of one."""
        found, neurons, device = groups(self.row_counts[image]), self.bounder.layout.size, self.lower.device
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
        layout, n = self.bounder.layout, len(left)
        signs = torch.zeros((n, layout.size), dtype=torch.int8, device=self.lower.device)
        columns = {
            "bound": root.lower.amin(1),
            "image": left,
            "depth": torch.zeros_like(left),
            "signs": signs,
        }
        if self.inexact:
            columns["lower"], columns["upper"] = self.lower[left], self.upper[left]
        return Frontier(columns | self._kept_columns(root, n))

    def _kept_columns(self, bounded: Bounded, n: int) -> dict[str, Tensor]:
        """What a subdomain keeps of its bounding: its ranked neurons, slopes and multipliers."""
        layout, columns = self.bounder.layout, {}
        count = self.search.candidates + branching.MAX_LEVELS
        columns["ranked"] = branching.ranked_neurons(bounded, layout, count)
        if self.search.steps:
            k = bounded.lower.shape[1]
            for node, shape in zip(layout.outputs, layout.shapes, strict=True):
                if node in layout.sloped:
                    columns[f"alpha{node}"] = bounded.alphas[node]
                beta = bounded.betas.get(node)
                dtype = bounded.lower.dtype
                columns[f"beta{node}"] = (
                    beta if beta is not None else bounded.lower.new_zeros((n, k, *shape), dtype=dtype)
                )
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
            quotas = branching.quotas(self.row_counts, counts > 0, self.search.batch, self.child_seconds,
                                      self.budget.left())  # fmt: skip
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
        made = [self._children(splitting.take(part), chosen[part], levels) for levels, part in groups(wanted)]
        parents = {name: torch.cat([children[name] for children in made]) for name in made[0]}
        self._bound_children(parents)

    def _children(self, splitting: Frontier, chosen: Tensor, wanted: int) -> dict[str, Tensor]:
        """The children of `splitting` split on its `chosen` neurons and its next best, `wanted` levels
        where each has as many ranked: their parents' columns, their own signs and depth."""
        levels = branching.usable_levels(splitting["ranked"], wanted)
        neurons = branching.split_neurons(chosen, splitting["ranked"], levels)
        many = 2**levels
        children = {name: column.repeat_interleave(many, 0) for name, column in splitting.columns.items()
                    if name not in ("signs", "ranked")}  # fmt: skip
        children["signs"] = branching.children_signs(splitting["signs"], neurons)
        children["depth"] = children["depth"] + levels
        return children

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
        trials = branching.trial_signs(splitting["signs"], candidates)
        image = splitting["image"].repeat_interleave(2 * candidates.shape[1])
        boxes = _boxes(splitting, 2 * candidates.shape[1])
        worst = self._estimates(image, trials, boxes)
        neuron, worth = branching.best_candidate(worst, candidates)
        return neuron, (self._box_worth(splitting) > worth) if self.inexact else None

    def _bound_children(self, parents: dict[str, Tensor]) -> None:
        """Children (their parents' columns, their own signs and depth) bounded in `_passes`: their
        candidate points tried, the closed ones counted, the open ones pushed on the frontier. An image's
        seconds a child over its passes are its own (`child_seconds`, which sizes its next rounds): one
        figure for all the search's children made the small, slow passes of images with many margins
        shrink the rounds of those with one."""
        image = parents["image"]
        spent = torch.zeros(len(self.images), dtype=torch.float64, device=image.device)
        for k, rows in self._passes(image):
            began = time.perf_counter()
            self._bound_pass({name: column[rows] for name, column in parents.items()}, k)
            took = time.perf_counter() - began
            self.pass_cost.add(len(rows) * k, took)
            spent.index_add_(0, image[rows], spent.new_full((len(rows),), took / len(rows)))
        made = torch.bincount(image, minlength=len(self.images))
        if self.child_seconds is None:  # the first measured: every image's until it has its own
            self.child_seconds = (spent.sum() / made.sum().clamp(min=1)).expand(len(self.images)).clone()
        self.child_seconds = torch.where(made > 0, spent / made.clamp(min=1), self.child_seconds)

    def _bound_pass(self, parents: dict[str, Tensor], k: int) -> None:
        """Children of images with `k` open margins each, bounded together (see `_bound_children`)."""
        image = parents["image"]
        warm = None
        if self.search.steps:
            layout = self.bounder.layout
            warm = ({node: parents[f"alpha{node}"][:, :k] for node in layout.sloped},
                    {node: parents[f"beta{node}"][:, :k] for node in layout.outputs})  # fmt: skip
        work = self._work(image, parents["signs"], _boxes(parents), k)
        # Padded back to the frontier's margins by repeating the first: a least bound is unchanged.
        bounded = padded(self.bounder.bound(work, self.budget.deadline, warm=warm), self.margins.shape[1])
        self._try_corners(bounded.corners, image)
        self.images.not_a_number(bounded.lower, image)
        # A child's box lies in its parent's: the parent's bound holds on it too.
        least = torch.maximum(bounded.lower.amin(1), parents["bound"])
        closed = bounded.infeasible | (least > 0)
        proved = least.masked_fill(~closed | bounded.infeasible, torch.inf)
        per_image = torch.full((len(self.images),), torch.inf, dtype=least.dtype, device=least.device)
        per_image = per_image.scatter_reduce(0, image, proved, "amin")
        counts = torch.bincount(image, minlength=len(self.images))
        deepest = torch.zeros(len(self.images), dtype=torch.long, device=image.device)
        deepest = deepest.scatter_reduce(0, image, parents["depth"], "amax")
        for j, (low, count, depth) in enumerate(
            zip(per_image.tolist(), counts.tolist(), deepest.tolist(), strict=True)
        ):
            self.images.proved[j] = min(self.images.proved[j], low)
            self.images.bounded[j] += count
            self.images.deepest[j] = max(self.images.deepest[j], depth)
        keep = ~closed
        columns = {"bound": least[keep], "image": image[keep], "depth": parents["depth"][keep],
                   "signs": parents["signs"][keep]}  # fmt: skip
        if self.inexact:
            columns["lower"], columns["upper"] = parents["lower"][keep], parents["upper"][keep]
        kept = restricted(bounded, keep)
        self.frontier.push(Frontier(columns | self._kept_columns(kept, int(keep.sum()))))

    def _estimates(self, image: Tensor, signs: Tensor, boxes: Boxes | None = None) -> Tensor:
        """``(N,)``: estimates (`Bounder.estimate`) of the least margin of the subdomains of the images
        `image` with the split `signs` (on their `boxes`, where they have their own), infinity where the
        splits contradict each other, each on its image's open margins (padded where `_passes` merges its
        group), in `_passes` (a round's trials are six times its subdomains)."""
        found = torch.empty(len(image), dtype=self.lower.dtype, device=image.device)
        for k, rows in self._passes(image):
            part_boxes = None if boxes is None else (boxes[0][rows], boxes[1][rows])
            work = self._work(image[rows], signs[rows], part_boxes, k)
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
            self._ended(j, counts[j], least[j])
            self.images.outcome(j).search = self.images.effort(j, counts[j], phases)

    def _ended(self, j: int, still_open: int, least_open: float) -> None:
        """Image j's outcome once the search stops undecided by a point: verified when nothing is left
        open, else unknown with the worst open bound, saying whether the time ran out."""
        outcome, images, label = self.images.outcome(j), self.images, self.search.label
        if outcome.status != "unknown":
            return
        if not still_open and images.undecided[j] == math.inf:
            outcome.status, outcome.by = "verified", label
            proved = min(images.proved[j], images.closed[j])
            outcome.margin = proved if proved != math.inf else 0.0
            return
        batch, i = images.batch, int(images.batch_index[j])
        batch.best[i] = max(float(batch.best[i]), min(images.undecided[j], least_open))
        outcome.timed_out = bool(still_open)
        if still_open:
            outcome.message = f"{label}: the time ran out with {still_open} subdomains open"
        elif self.inexact:
            outcome.message = (
                f"{label}: every subdomain was split to its end and its box cut until no float lies inside "
                f"an input's interval; {' and '.join(self.inexact)} is not affine there, and the bound of "
                "such a box stays at most zero at points that are no witness"
            )
        else:
            outcome.message = (
                f"{label}: every subdomain was split to its end; a leaf's least margin is at most zero "
                "at points that are no witness (a tie, or a violation float32 or exact arithmetic undoes)"
            )


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
