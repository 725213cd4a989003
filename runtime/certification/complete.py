"""Complete verification: branch and bound over ReLU splits, with linear-relaxation bounds.

An image's property (every margin ``y_t - y_j`` positive over the clipped eps-ball) is first bounded with
intermediate bounds tightened by alpha-CROWN, layer by layer (`refined_intermediates`; they hold on the whole
ball, so every subdomain starts from them; CROWN and alpha-CROWN bound a sample of a layer's unstable neurons
first, and the rest only where the sample narrowed enough: `LEAST_GAIN`), then split into subdomains by fixing
unstable ReLUs active (``x >= 0``) or inactive (``x <= 0``). Each subdomain is bounded by CROWN with the split
neurons' bounds clamped (their relaxation becomes exact, and every later layer's intermediate bounds are
recomputed from them), then alpha-CROWN's slopes and beta-CROWN's multipliers of the split constraints are
optimised together for a few Adam steps from its parent's best ones (Wang et al. 2021): the bound of a
subdomain is then its exact minimum over the relaxation at the optimum. Only the margins the root leaves open
are bounded on subdomains. Subdomains whose bounds are all positive are done; the others are split again,
worst subdomain first, a batch of them at a time, on one of the few neurons whose upper relaxation costs their
bound most (the intercept score of BaBSR, Bunel et al. 2020): the one whose worse child CROWN bounds highest
(filtered smart branching). While few subdomains are open, each is split on the next best-scored neurons too,
several levels in one round.

A subdomain with no unstable neuron left is decided exactly: the network is affine on it, and a linear
program (HiGHS, through scipy) over the input box and the split constraints gives its least margin; this
makes the search complete. A falsification is only ever a point the network was run on: one found by
targeted attacks from many starts before and while the search splits, the minimiser of a subdomain's
linear bound (a corner of the box) or of its linear program, misclassified.
"""

from __future__ import annotations

import bisect
import heapq
import inspect
import itertools
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from daic.runtime.certification.alpha_crown import optimized_lower
from daic.runtime.certification.certify import Batch, Search, falsify, least_margins
from daic.runtime.context import AbstractContext
from daic.runtime.domains.coeffs import Dense
from daic.runtime.domains.element import margin_others
from daic.runtime.domains.rounding import outward_rounding
from daic.runtime.domains.symbolic import (
    SAMPLE,
    Backward,
    Symbolic,
    backsubstitute,
    paying_rest,
    spread_sample,
)
from daic.runtime.layers.activation import crown_relaxation

ROOT_RATE = 0.5
"""Adam's rate for the intermediate bounds' slopes at the root (AlphaCROWN's default)."""

ROOT_SHARE = 0.5
"""The share of a search's time left after the root's first bound and attack that may go to tightening
the intermediate bounds (alpha-CROWN, layer by layer): the root is then bounded again with them and the
rest of the time splits. On an MNIST ConvBig, refining until the deadline left the search no time to
bound the root again, and every tightened bound was lost. The first bound gets more (`FIRST_SHARE`): on
a CNN7 it takes 20 s, and cut at half of a 60 s limit it left the later layers to the intervals, so that
the refined root verified none of the 4 images it verifies whole. 0.3 left an MNIST ConvBig's search more of
a 60 s limit and narrowed its five open bounds, but verified no image more (the same four, sooner), and
at 20 s it left CNN7 image 72 open, which 0.5 verifies."""

FIRST_SHARE = 0.8
"""The share of a search's time its root's first CROWN pass may refine neurons in: the passes after it (the
hybrid zonotope's through the later layers, the margins' back-substitution) take the rest. On an MNIST
CNN7 at 20 s, CROWN paced to the limit itself ended 2-6 s past it."""

INTERMEDIATE = ("auto", "crown", "root")
"""Where a subdomain's intermediate bounds come from: CROWN again with its splits ("crown"), or the root's
with the splits clamped in ("root", beta-CROWN's way); "auto" chooses by the root's cost (`CHEAP_ROOT`)."""

CHEAP_ROOT = 0.02
"""`intermediate="auto"` recomputes a subdomain's intermediate bounds by CROWN when the root's own CROWN
pass took at most this share of the time limit (an MNIST ConvSmall: 0.1 s of 20), else keeps the root's
(an MNIST ConvBig: 8 s; a subdomain's full CROWN pass costs as much, so a 20 s search would bound none)."""

LEAST_GAIN = 0.02
"""CROWN refines a layer's intermediate bounds only if it narrows a sample of its unstable neurons' intervals
by at least this share (`Symbolic.input`'s ``least_gain``). On an MNIST CNN7 trained with intervals it
narrowed its five layers by 0.7% to 0% beside the hybrid zonotope in 28 s of the root's 30; without it,
the root's alpha-CROWN verified image 55 in 12 s. On an MNIST ConvBig its last layer gains 5% and stays."""

MAX_LEVELS = 7
"""The most neurons a subdomain is split on in one round (2 ** 7 children), as alpha-beta-CROWN's."""

ATTACK_RESTARTS, ATTACK_STEPS = 4, 100
"""An attack of a search: random starts per other class (36 trajectories for ten classes) and the
steps of each (`attacks.margin_attack`)."""

ATTACK_SHARE = 0.2
"""The share of a search's time that goes to further attacks, each from new random starts, while it
splits: on an MNIST ConvSmall at eps 0.3, an image whose every subdomain bound stayed negative for 20 s
fell to 13 of 20 attacks of different seeds, each under a second; alpha-beta-CROWN spends 100 random
starts per class before anything else instead. One attack, the root's included, takes at most this share
of the search's time."""


@dataclass(order=True)
class Subdomain:
    """A set of split decisions: `signs` maps the id of a node feeding a ReLU to ``(*F)`` int8 signs."""

    bound: float
    order: int
    signs: dict[int, Tensor] = field(compare=False)
    depth: int = field(compare=False, default=0)
    warm: Warm | None = field(compare=False, default=None)


@dataclass
class Warm:
    """Where a subdomain's optimisation starts: its parent's slopes and split multipliers, by ReLU output
    node id, ``(S, *F)`` each (beta-CROWN's warm start: a child starts near its parent's bound)."""

    alphas: dict[int, Tensor]
    betas: dict[int, Tensor]

    def for_rows(self, keep: Tensor) -> Warm:
        """Only the rows `keep` (a mask over the rows)."""
        return Warm({k: v[keep] for k, v in self.alphas.items()}, {k: v[keep] for k, v in self.betas.items()})


@dataclass
class Bounded:
    """What bounding a batch of subdomains found, per subdomain."""

    lower: Tensor  # (N, S) lower bounds of the margins
    infeasible: Tensor  # (N,) bool: the splits contradict each other
    corners: Tensor  # (N, *input) the minimiser of the worst row's linear bound over the box
    scores: list[dict[int, Tensor]]  # per subdomain, per split node: (*F) branching scores (-inf: none)
    relu_inputs: dict[int, tuple[Tensor, Tensor]]  # bounds of every ReLU's input node, by node id
    warm: list[Warm | None]  # per subdomain, each row's slopes and multipliers where its bound was best

    def warm_for_rows(self, keep: Tensor) -> list[Warm | None]:
        """The warm starts with only the rows `keep` (a mask over the rows)."""
        return [None if w is None else w.for_rows(keep) for w in self.warm]


class _Tree:
    """One image's search: the open subdomains, worst bound first, and what the closed ones proved."""

    def __init__(self, root: Bounded, batch: int, crown: bool) -> None:
        self.root, self.batch = root, batch
        self.crown = crown  # whether a subdomain's intermediate bounds are recomputed by CROWN
        # A margin the root proves positive is positive on every subdomain: only the others are bounded
        # below it (on an image left open, usually one or two of the nine).
        self.open_rows = ~(root.lower[0] > 0)  # a NaN bound stays open
        closed_rows = ~self.open_rows
        self.closed = float(root.lower[0][closed_rows].min()) if bool(closed_rows.any()) else float("inf")
        self.queue = [Subdomain(float(root.lower.min()), 0, {}, 0, root.warm_for_rows(self.open_rows)[0])]
        self.scores = {0: root.scores[0]}
        self.counter, self.proved, self.undecided = 1, float("inf"), float("inf")
        self.child_seconds: float | None = None  # what bounding one child took in the last round
        self.bounded, self.deepest = 0, 0  # subdomains bounded, and the most splits any of them has

    def effort(self, root_seconds: float, attacks: _Attacks) -> dict[str, float]:
        """What the search did, for the record: the seconds its root took, the subdomains it bounded, the
        deepest of them (in splits) and those still open. A search that gains with time shows it here
        even when its worst open bound stays put."""
        return {"root_seconds": round(root_seconds, 3), "subdomains": self.bounded, "depth": self.deepest,
                "open": len(self.queue), "attacks": attacks.count}  # fmt: skip

    def pick(self, ranked: int) -> list[tuple[Subdomain, list[tuple[int, int]]]]:
        """The worst `batch` subdomains, each with its best-scored neurons (node id, neuron), at most
        `ranked`, best first; none: the subdomain has no neuron left to split (a leaf)."""
        picked = [heapq.heappop(self.queue) for _ in range(min(self.batch, len(self.queue)))]
        return [(domain, _branching_candidates(self.scores.pop(domain.order), ranked)) for domain in picked]

    def split(self, domain: Subdomain, choices: list[tuple[int, int]]) -> list[Subdomain]:
        """`domain`'s ``2 ** len(choices)`` children: every neuron of `choices` fixed active or inactive."""
        children = []
        for pattern in itertools.product((1, -1), repeat=len(choices)):
            signs = self._with_signs(domain.signs, zip(choices, pattern, strict=True))
            children.append(
                Subdomain(domain.bound, self.counter, signs, domain.depth + len(choices), domain.warm)
            )
            self.counter += 1
        return children

    def levels(self, splitting: int, seconds_left: float) -> int:
        """How many neurons each of `splitting` subdomains is split on at once: as many as keep a round's
        children within twice the batch (one, with a full queue) and, at the last round's seconds per
        child, its time within a quarter of `seconds_left` (one in the first round, which measures it).
        A short queue is split several levels deep in one round, as alpha-beta-CROWN does, instead of one
        level a round: on an MNIST ConvSmall image whose search ran 28 rounds deep for 22 s, a round cost
        nearly as much for 2 children as for 64; on an MNIST ConvBig, 64 children took 15 s."""
        if splitting == 0 or self.child_seconds is None:
            return 1
        room = 2 * self.batch / splitting
        if self.child_seconds > 0:
            room = min(room, seconds_left / 4 / (self.child_seconds * splitting))
        return max(1, min(MAX_LEVELS, int(math.log2(max(room, 1)))))

    def split_signs(self, parent: dict[int, Tensor], choice: tuple[int, int]) -> list[dict[int, Tensor]]:
        """The split decisions `parent` with the neuron `choice` fixed active, and inactive."""
        return [self._with_signs(parent, [(choice, sign)]) for sign in (1, -1)]

    def _with_signs(
        self, parent: dict[int, Tensor], fixed: Iterable[tuple[tuple[int, int], int]]
    ) -> dict[int, Tensor]:
        """A copy of the split decisions `parent` with each ``((node, neuron), sign)`` of `fixed` set."""
        signs = {k: v.clone() for k, v in parent.items()}
        for (node, neuron), sign in fixed:
            if node not in signs:
                signs[node] = torch.zeros_like(self.root.scores[0][node], dtype=torch.int8)
            signs[node].view(-1)[neuron] = sign
        return signs


@dataclass
class _Attacks:
    """The attacks of one image's search so far: how many ran, and their seconds; and the seconds one may
    take (`ATTACK_SHARE` of the search's)."""

    longest: float
    count: int = 0
    seconds: float = 0.0


class BranchAndBound(Search):
    """Branch and bound per image until it is verified, falsified, or `timeout` seconds pass (unknown)."""

    def __init__(
        self, timeout: float = 60.0, batch: int = 32, steps: int = 20, lr_alpha: float = 0.1,
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

    # ----------------------------------------------------------------------------------------------

    def _search(self, model: nn.Module, batch: Batch, i: int, deadline: float) -> None:
        started = time.perf_counter()
        attacks = _Attacks(ATTACK_SHARE * (deadline - started))
        found = self._root(model, batch, i, deadline, attacks)
        if found is None:
            return
        root, crown = found
        tree = _Tree(root, self.batch, crown)
        root_seconds = time.perf_counter() - started
        try:
            self._branch_and_bound(model, batch, i, tree, (started, deadline), attacks)
        finally:
            batch.outcomes[i].search = tree.effort(root_seconds, attacks)

    def _branch_and_bound(
        self, model: nn.Module, batch: Batch, i: int, tree: _Tree, time_span: tuple[float, float],
        attacks: _Attacks,
    ) -> None:  # fmt: skip
        """Splits and bounds image i's open subdomains, worst first, until none is left (verified), one
        falsifies it, or `deadline` passes (unknown, with the worst open bound as its margin). Another
        attack runs whenever attacks have had less than `ATTACK_SHARE` of the time since the search began
        (`time_span`: its start and its deadline). A round starts only if the last one's time still fits
        before the deadline, so that the search keeps to its limit on a network whose round takes long."""
        began, deadline = time_span
        last = 0.0  # the seconds the last round of splitting and bounding took
        while tree.queue and time.perf_counter() + last < deadline:
            due = attacks.seconds < ATTACK_SHARE * (time.perf_counter() - began)
            if due and self._attacked(model, batch, i, attacks, deadline):
                return
            round_began = time.perf_counter()
            picked = tree.pick(self.candidates + MAX_LEVELS)
            leaves = [domain for domain, ranked in picked if not ranked]
            splitting = [(domain, ranked) for domain, ranked in picked if ranked]
            chosen = self._choose(model, batch, i, tree, splitting, deadline)
            levels = tree.levels(len(splitting), deadline - time.perf_counter())
            children = [child for (domain, ranked), choice in zip(splitting, chosen, strict=True)
                        for child in tree.split(domain, _neurons(choice, ranked, levels))]  # fmt: skip
            if not self._settle(model, batch, i, leaves, tree):
                return
            bounding = time.perf_counter()
            if children and not self._bound_children(model, batch, i, children, tree, deadline):
                return
            if children:
                tree.child_seconds = (time.perf_counter() - bounding) / len(children)
            last = time.perf_counter() - round_began
        self._ended(batch, i, tree)

    def _ended(self, batch: Batch, i: int, tree: _Tree) -> None:
        """Image i's outcome once the search stops undecided by a point: verified when nothing is left
        open, else unknown with the worst open bound, saying whether the time ran out."""
        outcome = batch.outcomes[i]
        if not tree.queue and tree.undecided == float("inf"):
            outcome.status, outcome.by = "verified", self.label
            proved = min(tree.proved, tree.closed)
            outcome.margin = proved if proved != float("inf") else 0.0
            return
        open_bound = min([tree.undecided, *(domain.bound for domain in tree.queue)])
        batch.best[i] = max(float(batch.best[i]), open_bound)
        outcome.timed_out = bool(tree.queue)
        outcome.message = (
            f"{self.label}: the time ran out with {len(tree.queue)} subdomains open"
            if tree.queue
            else f"{self.label}: every subdomain was split to its end; a leaf's least margin is at most zero "
            "at points that are no witness (a tie, or a violation float32 or exact arithmetic undoes)"
        )

    def _root(
        self, model: nn.Module, batch: Batch, i: int, deadline: float, attacks: _Attacks
    ) -> tuple[Bounded, bool] | None:
        """The whole box bounded (its intermediate bounds refined for a share of the time), and whether
        subdomains recompute their intermediate bounds by CROWN; None where the root, or the attack before
        the search, decides image i."""
        y, lower, upper = batch.y[i : i + 1], batch.lower[i : i + 1], batch.upper[i : i + 1]
        # The root's intermediate bounds, the best of CROWN's, the intervals' and the hybrid zonotope's
        # (often the tightest on DiffAI-trained networks), hold on every subdomain: each is intersected
        # with them.
        began = time.perf_counter()
        crown_until = began + FIRST_SHARE * (deadline - began)
        root = self._bound(model, lower, upper, y, [{}], batch.relu, crown_until, companions=("box", "hbox"))
        first_seconds = time.perf_counter() - began
        crown = self._recomputes(first_seconds)
        if self._decided(model, batch, i, root) or self._attacked(model, batch, i, attacks, deadline):
            return None
        now = time.perf_counter()
        # Refining and the second pass take about what the first did, its companions' passes uncut by any
        # deadline: without that much time left they would end past it (on an MNIST CNN7 at 20 s, by 7 s).
        if not self.root_steps or deadline - now < first_seconds:
            return root, crown
        # Tighter intermediate bounds hold on every subdomain and leave fewer neurons to split; they get a
        # share of the time, and the root is bounded again with them (its optimisation for a share of what
        # is left), so that the search still splits.
        prior = refined_intermediates(model, lower, upper, root.relu_inputs, batch.relu, self.root_steps,
                                      ROOT_RATE, now + ROOT_SHARE * (deadline - now))  # fmt: skip
        now = time.perf_counter()
        again = self._bound(model, lower, upper, y, [{}], batch.relu, now + ROOT_SHARE * (deadline - now),
                            companions=("box", "hbox"), prior=prior, steps=max(self.steps, self.root_steps),
                            crown=False)  # fmt: skip
        # Both passes' bounds hold: a second pass cut short by its share of the time may end below the first
        # (fmax: a bound that is not a number in one pass leaves the other's).
        again.lower = torch.fmax(again.lower, root.lower)
        return None if self._decided(model, batch, i, again) else (again, crown)

    def _recomputes(self, root_seconds: float) -> bool:
        """Whether subdomains recompute their intermediate bounds by CROWN (see `INTERMEDIATE`), given the
        seconds the root's CROWN pass took."""
        if self.intermediate == "auto":
            return root_seconds <= CHEAP_ROOT * self.timeout
        return self.intermediate == "crown"

    def _choose(
        self, model: nn.Module, batch: Batch, i: int, tree: _Tree,
        splitting: list[tuple[Subdomain, list[tuple[int, int]]]], deadline: float,
    ) -> list[tuple[int, int]]:  # fmt: skip
        """Each subdomain's neuron to split among its candidates: the one whose worse child CROWN bounds
        highest (filtered smart branching, De Palma et al. 2021; alpha-beta-CROWN's kfsb), every
        candidate's children bounded together, without optimisation (past `deadline`, the best score).
        A score alone misjudges a neuron whose split moves other neurons' bounds: on an MNIST ConvSmall,
        searches chose by it reached 50 splits deep with their worst bound unmoved."""
        splitting = [(domain, ranked[: self.candidates]) for domain, ranked in splitting]
        if all(len(choices) == 1 for _, choices in splitting) or time.perf_counter() > deadline:
            return [choices[0] for _, choices in splitting]
        trials = [
            signs
            for domain, choices in splitting
            for choice in choices
            for signs in tree.split_signs(domain.signs, choice)
        ]
        n = len(trials)
        y, lower, upper = batch.y[i : i + 1], batch.lower[i : i + 1], batch.upper[i : i + 1]
        bounded = self._bound(model, lower.expand(n, *lower.shape[1:]), upper.expand(n, *upper.shape[1:]),
                              y.expand(n), trials, batch.relu, deadline, prior=tree.root.relu_inputs,
                              open_rows=tree.open_rows, steps=0, crown=tree.crown)  # fmt: skip
        worst = bounded.lower.amin(1).masked_fill(bounded.infeasible, torch.inf).tolist()
        chosen, at = [], 0
        for _, choices in splitting:
            # A candidate's worth: its worse child's bound (pairs of trials, active then inactive).
            worth = [min(worst[at + 2 * c], worst[at + 2 * c + 1]) for c in range(len(choices))]
            chosen.append(choices[max(range(len(choices)), key=worth.__getitem__)])
            at += 2 * len(choices)
        return chosen

    def _settle(self, model: nn.Module, batch: Batch, i: int, leaves: list[Subdomain], tree: _Tree) -> bool:
        """Subdomains with no neuron left to split, decided exactly; False once one falsifies image i."""
        for leaf in leaves:
            verdict = exact_leaf(model, batch, i, leaf.signs, self.label, tree.open_rows)
            if batch.outcomes[i].status == "falsified":
                return False
            if verdict is None:  # neither proved nor refuted: the image cannot be verified
                tree.undecided = min(tree.undecided, leaf.bound)
            else:
                tree.proved = min(tree.proved, verdict)
        return True

    def _bound_children(
        self, model: nn.Module, batch: Batch, i: int, children: list[Subdomain], tree: _Tree, deadline: float
    ) -> bool:
        """The children bounded together; those left open go back on the queue. False once one of their
        candidate points falsifies image i (or a bound is not a number)."""
        n = len(children)
        y, lower, upper = batch.y[i : i + 1], batch.lower[i : i + 1], batch.upper[i : i + 1]
        bounded = self._bound(model, lower.expand(n, *lower.shape[1:]), upper.expand(n, *upper.shape[1:]),
                              y.expand(n), [c.signs for c in children], batch.relu, deadline,
                              prior=tree.root.relu_inputs, open_rows=tree.open_rows,
                              warm=[c.warm for c in children], crown=tree.crown)  # fmt: skip
        tree.bounded += n
        tree.deepest = max(tree.deepest, *(child.depth for child in children))
        if self._falsified(model, batch, i, bounded) or _not_a_number(batch, i, bounded.lower):
            return False
        for k, child in enumerate(children):
            # A child's box lies in its parent's: the parent's bound holds on it too.
            least = max(float(bounded.lower[k].min()), child.bound)
            if bool(bounded.infeasible[k]) or least > 0:
                if not bool(bounded.infeasible[k]):
                    tree.proved = min(tree.proved, least)
                continue
            child.bound, child.warm = least, bounded.warm[k]
            tree.scores[child.order] = bounded.scores[k]
            heapq.heappush(tree.queue, child)
        return True

    def _decided(self, model: nn.Module, batch: Batch, i: int, root: Bounded) -> bool:
        """Whether the root's bounds decide image i: a candidate point falsifies it, or every margin is
        proved (or the root is infeasible)."""
        if self._falsified(model, batch, i, root) or _not_a_number(batch, i, root.lower):
            return True
        if bool(root.infeasible[0]) or float(root.lower.min()) > 0:
            outcome = batch.outcomes[i]
            outcome.status, outcome.by, outcome.margin = "verified", self.label, float(root.lower.min())
            return True
        return False

    def _attacked(self, model: nn.Module, batch: Batch, i: int, attacks: _Attacks, deadline: float) -> bool:
        """A targeted attack, a few trajectories towards each other class (`attacks.margin_attack`): on
        images the cascade's attack left open it pays (at eps 0.3 on an MNIST ConvSmall, 8 of 12 images
        that searches of 60 s left unknown fell to an untargeted attack of 32 starts of 100 steps, in 0.23 s
        each). Seeded by the image's index and the count of `attacks` before it (which it adds to):
        reproducible, and new starts each time. It stops with the best points so far at `deadline`, or once
        it has taken `ATTACK_SHARE` of the search's time (on an MNIST CNN7 its 3,600 steps take 31 s)."""
        started = time.perf_counter()
        until = min(deadline, started + attacks.longest)
        lower, upper, y = batch.inner_lower[i : i + 1], batch.inner_upper[i : i + 1], batch.y[i : i + 1]
        generator = torch.Generator().manual_seed(batch.outcomes[i].index + 1_000_003 * attacks.count)
        point = batch.attacker.targeted(lower, upper, y, ATTACK_STEPS, ATTACK_RESTARTS, generator, until)
        # CPU: image numbers, read on the host; a CUDA tensor may be indexed by them as they are
        falsify(model, batch, torch.tensor([i]), point, least_margins(model, point, y), self.label)
        attacks.count += 1
        attacks.seconds += time.perf_counter() - started
        return batch.outcomes[i].status == "falsified"

    def _falsified(self, model: nn.Module, batch: Batch, i: int, bounded: Bounded) -> bool:
        """Runs the network on the subdomains' candidate points; a misclassified one falsifies image i."""
        margins = least_margins(model, bounded.corners, batch.y[i : i + 1].expand(len(bounded.corners)))
        worst = int(margins.argmin())
        # CPU: image numbers, read on the host; a CUDA tensor may be indexed by them as they are
        falsify(model, batch, torch.tensor([i]), bounded.corners[worst : worst + 1],
                margins[worst : worst + 1], self.label)  # fmt: skip
        return batch.outcomes[i].status == "falsified"

    # ----------------------------------------------------------------------------------------------
    # bounding a batch of subdomains

    def _bound(
        self, model: nn.Module, lower: Tensor, upper: Tensor, y: Tensor, signs: list[dict[int, Tensor]],
        relu: str, deadline: float = float("inf"), companions: tuple[str, ...] = ("box",),
        prior: dict[int, tuple[Tensor, Tensor]] | None = None, open_rows: Tensor | None = None,
        steps: int | None = None, warm: list[Warm | None] | None = None, crown: bool = True,
    ) -> Bounded:  # fmt: skip
        """The subdomains' bounds of the margins (those of `open_rows` only, when given), with `steps`
        Adam steps of alpha- and beta-CROWN (default: the search's) from `warm` where given; with `crown`,
        every ReLU's input bounded by CROWN too, with the splits (else by the companions, within
        `prior`)."""
        n = len(signs)
        splits = _stacked(signs, n)
        value = Symbolic.input(lower, upper, companions, crown=crown, splits=splits, prior=prior,
                               deadline=deadline, least_gain=LEAST_GAIN)  # fmt: skip
        output = model.abstract(value, AbstractContext(training=False, relu=relu))
        rows = _margin_rows(y, output.shape[1], lower.dtype, open_rows)
        relus = [node for node in output.ancestors() if _splits(node)]
        how = Backward(record={node.id for node in relus} | {value.id})
        best = backsubstitute(output, rows, how)
        recorded = dict(how.recorded)
        steps = self.steps if steps is None else steps
        ended: list[Warm | None] = [None] * n
        if steps:
            found = self._optimise(
                output, rows, relus, splits, best, recorded, deadline, steps, warm or [None] * n
            )
            best, recorded, ended = found
        infeasible = output.analysis.infeasible.clone()
        corners = _minimisers(recorded[value.id].A, best, lower, upper)
        scores = [_scores(relus, recorded, best, k) for k in range(n)]
        relu_inputs = {node.parents[0].id: node.parents[0].bounds() for node in relus}
        # The margins folded into the layers after the last ReLU and bounded there by its (split, refined)
        # intervals: on networks trained with intervals these beat the full back-substitution.
        folded = output.margin_lower(y, until_nonlinear=True)
        if open_rows is not None:
            folded = folded[:, open_rows]
        return Bounded(torch.maximum(best, folded), infeasible, corners, scores, relu_inputs, ended)

    def _optimise(self, output, rows, relus, splits, best, recorded, deadline, steps, warm):
        """alpha- and beta-CROWN: the ReLUs' lower slopes and the split constraints' multipliers, by Adam,
        from CROWN's slopes and zero multipliers or, per subdomain, from `warm`, keeping the best bound of
        each row (each setting of them gives a sound one), until `deadline`. Returns the best bounds, their
        rows as recorded, and each subdomain's slopes and multipliers at the step where each row was best
        (where they started, if no step beat CROWN's own slopes)."""
        n = rows.A.shape[0]
        alphas, betas, signs = _starting_parameters(rows, relus, splits, warm)
        groups = [{"params": list(alphas.values()), "lr": self.lr_alpha}] if alphas else []
        if betas:
            groups.append({"params": list(betas.values()), "lr": self.lr_beta})
        if not groups or time.perf_counter() >= deadline:  # no ReLU to relax (CROWN is exact), or no time
            steps = 0
        optimizer = torch.optim.Adam(groups) if steps else None
        kept_alphas = {key: a.detach().clone() for key, a in alphas.items()}
        kept_betas = {key: b.detach().clone() for key, b in betas.items()}
        for _ in range(steps):
            how = Backward(alphas, betas, signs, record=set(recorded))
            with torch.enable_grad():
                found = backsubstitute(output, rows, how)
                loss = -found.clamp(max=0).sum() - 1e-3 * found.sum()
                grads = torch.autograd.grad(loss, [*alphas.values(), *betas.values()])
            improved = found.detach() > best
            if bool(improved.any()):
                best = torch.where(improved, found.detach(), best)
                recorded = {k: _detached(v) for k, v in how.recorded.items()}
                _keep_improved(improved, (kept_alphas, alphas), (kept_betas, betas))
            if bool((best > 0).all()) or time.perf_counter() > deadline:
                break
            _adam_step(optimizer, alphas, betas, grads)
        # Each row's slopes and multipliers where it was best.
        return best, recorded, _per_subdomain(kept_alphas, kept_betas, n)


def _per_subdomain(alphas: dict[int, Tensor], betas: dict[int, Tensor], n: int) -> list[Warm]:
    """The slopes and multipliers ``(N, S, *F)`` as each of the `n` subdomains' own warm start (copied: a
    queued child keeps only its own)."""

    def own(parameters: dict[int, Tensor], k: int) -> dict[int, Tensor]:
        return {key: value[k].clone() for key, value in parameters.items()}

    return [Warm(own(alphas, k), own(betas, k)) for k in range(n)]


def _adam_step(
    optimizer: torch.optim.Optimizer, alphas: dict[int, Tensor], betas: dict[int, Tensor], grads: tuple
) -> None:
    """One step of Adam on the slopes and multipliers from `grads`, then each back in its sound range:
    slopes in [0, 1], multipliers non-negative."""
    for parameter, grad in zip([*alphas.values(), *betas.values()], grads, strict=True):
        parameter.grad = grad
    optimizer.step()
    with torch.no_grad():
        for alpha in alphas.values():
            alpha.clamp_(0, 1)
        for beta in betas.values():
            beta.clamp_(min=0)


def _minimisers(on_input: Tensor, best: Tensor, lower: Tensor, upper: Tensor) -> Tensor:
    """``(N, *input)``: each subdomain's corner of the box that minimises its worst row's linear bound
    (`on_input`, ``(N, S, *input)``: the rows' coefficients at the input)."""
    worst = best.argmin(1)
    row = on_input[torch.arange(len(worst), device=worst.device), worst]
    return torch.where(row > 0, lower, upper)


def _written(value: float | str) -> str:
    """An argument as the language writes it."""
    return f'"{value}"' if isinstance(value, str) else f"{value:g}"


def _keep_improved(improved: Tensor, *pairs: tuple[dict[int, Tensor], dict[int, Tensor]]) -> None:
    """Each (kept, now) pair of parameters: now's values copied into kept on the rows `improved` (N, S)."""
    for kept, now in pairs:
        for key, value in now.items():
            mask = improved.view(*improved.shape, *[1] * (value.dim() - 2))
            kept[key] = torch.where(mask, value.detach(), kept[key])


def _starting_parameters(
    rows: Dense, relus: list[Symbolic], splits: dict[int, Tensor], warm: list[Warm | None]
) -> tuple[dict[int, Tensor], dict[int, Tensor], dict[int, Tensor]]:
    """Where alpha- and beta-CROWN start, ``(N, S, *F)`` per ReLU output node: the slopes (CROWN's, or a
    subdomain's warm ones), the split multipliers (zero, or warm) and the split signs they weigh."""
    n, s = rows.A.shape[:2]
    alphas = {
        node.id: _warm_started(
            node.layer.initial_slopes(node).unsqueeze(1).expand(n, s, *node.shape[1:]).clone(),
            [None if w is None else w.alphas.get(node.id) for w in warm],
        )
        for node in relus
    }
    signs = {node.id: splits[node.parents[0].id].to(rows.A.dtype) for node in relus
             if node.parents[0].id in splits}  # fmt: skip
    betas = {
        key: _warm_started(
            torch.zeros((n, s, *sign.shape[1:]), dtype=rows.A.dtype, device=rows.A.device),
            [None if w is None else w.betas.get(key) for w in warm],
        )
        for key, sign in signs.items()
    }
    return alphas, betas, signs


def _splits(node: Symbolic) -> bool:
    """Whether branch and bound splits `node`'s input: the node is a layer that declares it splittable."""
    return node.layer is not None and node.layer.splittable


def _margin_rows(y: Tensor, classes: int, dtype: torch.dtype, open_rows: Tensor | None) -> Dense:
    """The margins ``y_t - y_j`` as rows over the output, only those of `open_rows` when given."""
    margins = margin_others(y, classes, dtype)[0]
    return Dense(margins if open_rows is None else margins[:, open_rows])


def _warm_started(start: Tensor, warm: list[Tensor | None]) -> Tensor:
    """`start` ``(N, ...)`` with each subdomain's row replaced by its warm start where it has one, as a
    leaf to optimise."""
    for k, value in enumerate(warm):
        if value is not None:
            start[k] = value
    return start.requires_grad_(True)


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
            relus = sorted((n for n in output.ancestors() if _splits(n)), key=lambda n: n.id)
            # Every layer's bounds of this analysis, so that later layers keep what the tighter earlier
            # ones gave them even where the deadline stops the refining before they are reached.
            prior.update({node.parents[0].id: node.parents[0].bounds() for node in relus})
            changed = False
        if index >= len(relus):
            break
        node = relus[index].parents[0]
        index += 1
        depends = any(_splits(a) for a in node.ancestors())
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


def _not_a_number(batch: Batch, i: int, lower: Tensor) -> bool:
    """Marks image i an error when a bound over its box is not a number (an overflow in the network):
    neither a proof nor a counterexample can come of it, and splitting would only repeat it."""
    if not bool(torch.isnan(lower).any()):
        return False
    outcome = batch.outcomes[i]
    outcome.status, outcome.margin = "error", None
    outcome.message = "a bound over the image's box is not a number (NaN): the network overflows there"
    return True


@torch.no_grad()
def exact_leaf(
    model: nn.Module, batch: Batch, i: int, signs: dict[int, Tensor], by: str, open_rows: Tensor | None = None
) -> float | None:
    """Image i's subdomain `signs` (no unstable neuron left) decided by linear programs, one per margin
    (per margin of `open_rows`, when given: the others are proved on the whole ball): the network is affine
    on the subdomain, its inputs in the box that satisfy the split constraints.

    A program's minimiser at or below zero is run through the network: misclassified, it falsifies image
    i (the margin is returned). Otherwise the programs' dual multipliers of the split constraints are the
    multipliers of beta-CROWN: back-substituted with them (with the rounding of the surrounding domain),
    the bound holds whatever the programs' own tolerances, and a positive one verifies the subdomain.
    Returns infinity where no input satisfies the splits, None where nothing was decided."""
    splits = {k: v.unsqueeze(0) for k, v in signs.items()}
    program = _leaf_program(model, batch, i, signs, open_rows)
    if program is None:
        return float("inf")
    verdict, duals = _solve_leaf(model, batch, i, program, by)
    if duals is None:
        return verdict
    return _leaf_certificate(model, batch, i, splits, program, duals)


@dataclass
class _LeafProgram:
    """A leaf's linear programs: per split node, its ReLU output node, the split neurons and the rows of
    ``-s a x <= s c``; and the margins' rows, as affine functions of the input (objective, offset)."""

    constraints: list[tuple[Symbolic, Tensor, Tensor, Tensor]]
    rows: Dense
    objective: Tensor
    offset: Tensor


def _leaf_program(
    model: nn.Module, batch: Batch, i: int, signs: dict[int, Tensor], open_rows: Tensor | None
) -> _LeafProgram | None:
    """The linear programs of image i's subdomain `signs`; None where the splits contradict each other."""
    lower, upper, y = batch.lower[i : i + 1], batch.upper[i : i + 1], batch.y[i : i + 1]
    splits = {k: v.unsqueeze(0) for k, v in signs.items()}
    with outward_rounding(False):  # the programs' data; what they conclude is checked after
        value = Symbolic.input(lower, upper, crown=True, splits=splits)
        output = model.abstract(value, AbstractContext(training=False, relu=batch.relu))
        if bool(output.analysis.infeasible[0]):
            return None
        nodes = {node.id: node for node in output.ancestors()}
        constraints = []
        for node_id, sign in signs.items():
            chosen = sign.flatten().nonzero().squeeze(1)
            if chosen.numel() == 0:
                continue
            node = nodes[node_id]
            chosen = chosen.to(lower.device)
            eye = torch.zeros(
                (1, chosen.numel(), node.shape[1:].numel()), dtype=lower.dtype, device=lower.device
            )
            eye[0, torch.arange(chosen.numel(), device=lower.device), chosen] = 1
            a, c = _affine(node, value, Dense(eye.reshape(1, chosen.numel(), *node.shape[1:])))
            s = sign.flatten()[chosen].to(lower.dtype)
            relu = next(n for n in nodes.values() if n.parents and n.parents[0].id == node_id)
            constraints.append((relu, chosen, -(s[:, None] * a), s * c))  # s (a x + c) >= 0
        rows = _margin_rows(y, output.shape[1], lower.dtype, open_rows)
        objective, offset = _affine(output, value, rows)
    return _LeafProgram(constraints, rows, objective, offset)


def _solve_leaf(
    model: nn.Module, batch: Batch, i: int, program: _LeafProgram, by: str
) -> tuple[float | None, list[Tensor] | None]:
    """The programs solved, one per margin: (verdict, None) where they decide (infinity: no input follows
    the splits; a margin: a minimiser falsified image i; None: a solver failed or its minimiser did not
    falsify), else (None, each program's dual multipliers of the split constraints)."""
    from scipy.optimize import linprog

    lower, upper, y = batch.lower[i : i + 1], batch.upper[i : i + 1], batch.y[i : i + 1]
    constraints = program.constraints
    # The linear programs are solved by SciPy, on the host.
    a_ub = torch.cat([c[2] for c in constraints]).cpu().numpy() if constraints else None
    b_ub = torch.cat([c[3] for c in constraints]).cpu().numpy() if constraints else None
    bounds = list(zip(lower.flatten().tolist(), upper.flatten().tolist(), strict=True))
    duals = []
    for r in range(program.objective.shape[0]):
        solved = linprog(
            program.objective[r].cpu().numpy(), A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs"
        )
        if solved.status == 2:  # infeasible: no input follows the splits
            return float("inf"), None
        if solved.status != 0:
            return None, None
        if float(solved.fun) + float(program.offset[r]) <= 0:
            point = torch.tensor(solved.x, dtype=lower.dtype, device=lower.device).reshape(lower.shape)
            point = torch.maximum(
                torch.minimum(point, batch.inner_upper[i : i + 1]), batch.inner_lower[i : i + 1]
            )
            margins = least_margins(model, point, y)
            # CPU: image numbers, read on the host; a CUDA tensor may be indexed by them as they are
            # The program's minimum is at or below zero: its minimiser is a candidate even where float64
            # puts it a rounding above (the witness check decides).
            falsify(model, batch, torch.tensor([i]), point, margins.clamp(max=0.0), by)
            return (float(margins[0]) if batch.outcomes[i].status == "falsified" else None), None
        duals.append(
            torch.zeros(0, device=lower.device)
            if a_ub is None
            else torch.tensor(-solved.ineqlin.marginals, device=lower.device).clamp(min=0)
        )
    return None, duals


def _leaf_certificate(
    model: nn.Module,
    batch: Batch,
    i: int,
    splits: dict[int, Tensor],
    program: _LeafProgram,
    duals: list[Tensor],
) -> float | None:
    """beta-CROWN with the programs' multipliers, in the domain's own rounding: the least margin it
    proves where positive, infinity where the splits contradict each other, else None."""
    lower, upper = batch.lower[i : i + 1], batch.upper[i : i + 1]
    value = Symbolic.input(lower, upper, crown=True, splits=splits)
    output = model.abstract(value, AbstractContext(training=False, relu=batch.relu))
    if bool(output.analysis.infeasible[0]):
        return float("inf")
    how = Backward()
    start = 0
    relus = {n.parents[0].id: n for n in output.ancestors() if _splits(n)}
    for relu, chosen, *_ in program.constraints:
        node = relus[relu.parents[0].id]
        beta = torch.zeros((1, len(duals), *node.shape[1:]), dtype=lower.dtype, device=lower.device)
        for r, dual in enumerate(duals):
            beta[0, r].view(-1)[chosen] = dual[start : start + len(chosen)].to(lower.dtype)
        how.betas[node.id] = beta
        how.signs[node.id] = splits[relu.parents[0].id].to(lower.dtype)
        start += len(chosen)
    proved = backsubstitute(output, program.rows, how)
    least = float(proved.min())
    return least if least > 0 else None


def _affine(node: Symbolic, value: Symbolic, rows: Dense) -> tuple[Tensor, Tensor]:
    """Rows over `node`'s neurons as exact affine functions of the input (every ReLU on the way stable):
    ``(S, n_input)`` coefficients and ``(S,)`` constants."""
    how = Backward(record={value.id})
    # The least value over the box minus the coefficients' part of it leaves the constant.
    lowest = backsubstitute(node, rows, how)[0]
    coefficients = how.recorded[value.id].A[0].flatten(1)
    center, radius = value.analysis.center.flatten(), value.analysis.radius.flatten()
    constants = lowest - coefficients @ center + coefficients.abs() @ radius
    return coefficients, constants


def _stacked(signs: list[dict[int, Tensor]], n: int) -> dict[int, Tensor]:
    keys = {k for domain in signs for k in domain}
    stacked = {}
    for key in keys:
        like = next(domain[key] for domain in signs if key in domain)
        stacked[key] = torch.stack([domain.get(key, torch.zeros_like(like)) for domain in signs])
    return stacked


def _scores(relus: list[Symbolic], recorded: dict, best: Tensor, k: int) -> dict[int, Tensor]:
    """Subdomain k's branching scores per split node (the ReLU's input): for an unstable neuron, how much
    the intercept of its upper relaxation lowers the rows still at or below zero (BaBSR's intercept score),
    with the interval width as a tie-break; -inf elsewhere."""
    open_rows = (best[k] <= 0).to(best.dtype)
    scores = {}
    for node in relus:
        lower, upper = (t[k] for t in node.parents[0].bounds())
        _, _, intercept, unstable = crown_relaxation(lower, upper)
        coefficients = recorded[node.id].A[k]  # (S, *F): the rows on the ReLU's output
        weight = (open_rows.view(-1, *[1] * (coefficients.dim() - 1)) * (-coefficients).clamp(min=0)).sum(0)
        score = weight * intercept + 1e-6 * (upper - lower)
        scores[node.parents[0].id] = torch.where(unstable, score, -torch.inf)
    return scores


def _neurons(chosen: tuple[int, int], ranked: list[tuple[int, int]], levels: int) -> list[tuple[int, int]]:
    """The neurons a subdomain is split on in one round: the chosen one, then the best-scored others, at
    most `levels` in all."""
    return [chosen, *[neuron for neuron in ranked if neuron != chosen]][:levels]


def _branching_candidates(scores: dict[int, Tensor], k: int) -> list[tuple[int, int]]:
    """The `k` best-scored unstable neurons (node id, neuron) over every split node, best first."""
    nodes = [(node_id, score.flatten()) for node_id, score in scores.items() if score.numel()]
    if not nodes:
        return []
    flat = torch.cat([score for _, score in nodes])
    values, indices = flat.topk(min(k, len(flat)))
    starts = [0]
    for _, score in nodes:
        starts.append(starts[-1] + len(score))
    found = []
    for value, index in zip(values.tolist(), indices.tolist(), strict=True):
        if value == -math.inf:  # not unstable: nothing to split
            break
        owner = bisect.bisect_right(starts, index) - 1
        found.append((nodes[owner][0], index - starts[owner]))
    return found


def _detached(rows):
    return Dense(rows.A.detach(), rows.image) if isinstance(rows, Dense) else rows
