"""Bounding a batch of subdomains: CROWN with the splits clamped in, then alpha- and beta-CROWN's slopes and
multipliers optimised together for a few Adam steps from each subdomain's parent's (Wang et al. 2021).

A batch is a `Work`: each row a subdomain of one of the searched images, with its box, its label, the
margins it still has to prove (`rows`: the others are proved on the image's whole box), its split signs
over the `Layout`'s neurons and the root's bounds of every split node (they hold on every subdomain)."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from daic.runtime.certification.alpha_crown import kept_where, set_gradient
from daic.runtime.certification.search.bounded import Bounded
from daic.runtime.context import AbstractContext
from daic.runtime.domains.coeffs import Dense
from daic.runtime.domains.element import margin_others
from daic.runtime.domains.rounding import outward_rounding
from daic.runtime.domains.symbolic import Backward, Symbolic, backsubstitute

LEAST_GAIN = 0.02
"""CROWN refines a layer's intermediate bounds only if it narrows a sample of its unstable neurons' intervals
by at least this share (`Symbolic.input`'s ``least_gain``). On an MNIST CNN7 trained with intervals it
narrowed its five layers by 0.7% to 0% beside the hybrid zonotope in 28 s of the root's 30; without it,
the root's alpha-CROWN verified image 55 in 12 s. On an MNIST ConvBig its last layer gains 5% and stays."""

STEERING = torch.float32
"""The precision alpha- and beta-CROWN's Adam steps run in: their bounds only steer (`Bounder._optimise`)."""

NARROW_SHARE = 0.1
"""The share of a batch its warm start must prove for the rest to be optimised in a batch of their own (each
Adam step then costs the open subdomains alone; their float32 graph is made in either case)."""


Warm = tuple[dict[int, Tensor], dict[int, Tensor]]
"""Where a batch's optimisation starts: its slopes and its split multipliers, ``(N, K, *F)`` by the
splittable layers' output node ids (beta-CROWN's warm start: a child starts near its parent's bound)."""


def splittable(node: Symbolic) -> bool:
    """Whether branch and bound splits `node`'s input: the node is a layer that declares it splittable."""
    return node.layer is not None and node.layer.splittable


@dataclass(frozen=True)
class Layout:
    """The neurons branch and bound may split, numbered one after another: each split node (a splittable
    layer's input; node ids are the same in every analysis of one network) with its offset and shape."""

    inputs: tuple[int, ...]  # the split nodes' ids, in order
    outputs: tuple[int, ...]  # the splittable layers' output nodes' ids, in the same order
    shapes: tuple[tuple[int, ...], ...]  # each node's neuron shape
    offsets: tuple[int, ...]
    layers: tuple[nn.Module, ...]  # the splittable layers (each declares its relaxation)

    @classmethod
    def of(cls, output: Symbolic) -> Layout:
        nodes = sorted((node for node in output.ancestors() if splittable(node)), key=lambda n: n.id)
        shapes = tuple(tuple(node.shape[1:]) for node in nodes)
        sizes = [torch.Size(shape).numel() for shape in shapes]
        offsets = tuple(sum(sizes[:k]) for k in range(len(sizes)))
        inputs, outputs = tuple(n.parents[0].id for n in nodes), tuple(n.id for n in nodes)
        return cls(inputs, outputs, shapes, offsets, tuple(n.layer for n in nodes))

    @property
    def sloped(self) -> tuple[int, ...]:
        """The output node ids of the splittable layers alpha-CROWN optimises (their lower slopes, or their
        tangent points)."""
        return tuple(
            o for o, layer in zip(self.outputs, self.layers, strict=True) if layer.initial_slopes is not None
        )

    @property
    def size(self) -> int:
        return self.offsets[-1] + torch.Size(self.shapes[-1]).numel() if self.shapes else 0

    def per_node(self, flat: Tensor) -> dict[int, Tensor]:
        """``(N, size)`` values as views ``(N, *F)`` per split node (by its id)."""
        return {
            node: flat[:, at : at + torch.Size(shape).numel()].reshape(len(flat), *shape)
            for node, at, shape in zip(self.inputs, self.offsets, self.shapes, strict=True)
        }

    def flat(self, per_node: dict[int, Tensor]) -> Tensor:
        """The inverse of `per_node`: ``(N, size)`` from ``(N, *F)`` per split node."""
        return torch.cat([per_node[node].flatten(1) for node in self.inputs], 1)


@dataclass
class Work:
    """A batch to bound: boxes ``(N, *input)``, labels ``(N,)``, the margins each row bounds (``(N, K)``
    indices among the ``C - 1`` margins), split signs ``(N, size)`` (int8; None: no split) and the bounds of
    every split node known on each row's whole image (``(N, *F)`` by node id; None: none)."""

    lower: Tensor
    upper: Tensor
    y: Tensor
    margins: Tensor
    signs: Tensor | None = None
    prior: dict[int, tuple[Tensor, Tensor]] | None = None


@dataclass
class Bounder:
    """How a search bounds its batches: the network, its hybrid-zonotope setting, Adam's steps and rates,
    and whether split nodes' bounds are recomputed by CROWN with the splits (else the companions', within
    the root's)."""

    model: nn.Module
    layout: Layout | None
    relu: str
    steps: int
    lr_alpha: float
    lr_beta: float
    crown: bool = True
    _steering_model: nn.Module | None = field(default=None, repr=False)

    def bound(
        self, work: Work, deadline: float, steps: int | None = None, warm: Warm | None = None,
        companions: tuple[str, ...] = ("box",),
    ) -> Bounded:  # fmt: skip
        """The batch bounded with `steps` Adam steps (default: the bounder's) from `warm` (slopes and
        multipliers by output node id) where given, stopping at `deadline`."""
        signs = self._signs(work)
        value, output, rows = self._analysed(work, signs, work.lower.dtype, deadline, companions)
        if self.layout is None:
            self.layout = Layout.of(output)
        layers = [node for node in output.ancestors() if splittable(node)]
        how = Backward(record={node.id for node in layers} | {value.id})
        best = backsubstitute(output, rows, how)
        recorded = dict(how.recorded)
        alphas: dict[int, Tensor] = {}
        betas: dict[int, Tensor] = {}
        steps = self.steps if steps is None else steps
        if steps:  # past the deadline: no step, the starting slopes and multipliers kept
            steps = steps if time.perf_counter() < deadline else 0
            best, recorded, alphas, betas = self._optimised(
                Start(output, rows, signs, best, recorded, warm), work, companions, deadline, steps
            )
        corners = minimisers(recorded[value.id].A, best, work.lower, work.upper)
        inputs = {node.parents[0].id: node.parents[0].bounds() for node in layers}
        coefficients = {node.id: recorded[node.id].A for node in layers}
        infeasible = output.analysis.infeasible.clone()
        best = torch.maximum(best, folded_margins(output, work))
        return Bounded(best, infeasible, corners, inputs, coefficients, alphas, betas)

    def estimate(
        self, work: Work, deadline: float, companions: tuple[str, ...] = ("box",)
    ) -> tuple[Tensor, Tensor]:
        """CROWN's bounds of the batch's margins ``(N, K)`` and whether each subdomain's splits contradict
        each other, in `STEERING` precision rounding to nearest: estimates that only choose where to split,
        for which the bounds' own precision and outward rounding buy nothing."""
        with outward_rounding(False), torch.no_grad():
            _, output, rows = self._analysed(work, self._signs(work), STEERING, deadline, companions)
            best = torch.maximum(backsubstitute(output, rows, Backward()), folded_margins(output, work))
        return best.to(work.lower.dtype), output.analysis.infeasible.clone()

    def _analysed(
        self, work: Work, signs: dict[int, Tensor] | None, dtype: torch.dtype, deadline: float,
        companions: tuple[str, ...],
    ) -> tuple[Symbolic, Symbolic, Dense]:  # fmt: skip
        """The batch's input node with its `signs`, in `dtype` (the network's `STEERING` copy where that
        is not the batch's), the network's output node on it, and the rows of the batch's margins."""
        prior = {node: (low.to(dtype), up.to(dtype)) for node, (low, up) in (work.prior or {}).items()}
        value = Symbolic.input(work.lower.to(dtype), work.upper.to(dtype), companions, crown=self.crown,
                               splits=signs, prior=prior or None, deadline=deadline,
                               least_gain=LEAST_GAIN)  # fmt: skip
        model = self.model if dtype == work.lower.dtype else self._steering_copy(work.lower.dtype)
        output = model_output(model, value, self.relu)
        return value, output, margin_rows(work.y, output.shape[1], dtype, work.margins)

    def _steering_copy(self, dtype: torch.dtype) -> nn.Module:
        """The network in `STEERING` precision (itself where its batches are; a copy made once)."""
        if dtype == STEERING:
            return self.model
        if self._steering_model is None:
            self._steering_model = copy.deepcopy(self.model).to(STEERING)
        return self._steering_model

    def _optimised(self, start: Start, work: Work, companions: tuple[str, ...], deadline: float, steps: int):
        """`_optimise` from `start`; where the warm start alone proves at least `NARROW_SHARE` of the batch
        (often half a round's children: their parent's slopes already suffice), only the rest are
        optimised, and the proved keep their warm start's bound and parameters."""
        if start.warm is None:
            return self._optimise(start, work, companions, deadline, steps)
        start, alphas, betas = _at_warm(start)
        proved = (start.best > 0).all(1) | start.output.analysis.infeasible
        share = float(proved.float().mean())
        if share == 1.0:
            return start.best, start.recorded, alphas, betas
        rest = (~proved).nonzero().squeeze(1) if share >= NARROW_SHARE else None
        return self._optimise(start, work, companions, deadline, steps, rest)

    def _steering(self, start: Start, work: Work, companions: tuple[str, ...], rows: Tensor) -> Start:
        """`start`'s graph made again in `STEERING` precision on its subdomains `rows`, from the first
        graph's bounds of every relaxed node (no CROWN pass), node ids unchanged, rounding to nearest."""
        model = self._steering_copy(work.lower.dtype)
        known = {
            node.parents[0].id: tuple(b[rows].to(STEERING) for b in node.parents[0].bounds())
            for node in start.output.ancestors() if node.layer is not None and node.layer.relaxes_input
        }  # fmt: skip
        signs = None if start.signs is None else {key: sign[rows] for key, sign in start.signs.items()}
        lower, upper = (end[rows].to(STEERING) for end in (work.lower, work.upper))
        with outward_rounding(False):
            value = Symbolic.input(lower, upper, companions, splits=signs, prior=known)
            output = model_output(model, value, self.relu)
        return Start(output, Dense(start.rows.A[rows].to(STEERING)), signs, start.best[rows].to(STEERING), {},
                     None)  # fmt: skip

    def _signs(self, work: Work) -> dict[int, Tensor] | None:
        """The split signs by split node, only the nodes some row of the batch splits (one read of the
        host): each split node costs every step a dense term."""
        if work.signs is None or self.layout is None or not self.layout.inputs:
            return None
        per_node = self.layout.per_node(work.signs)
        used = torch.stack([sign.flatten(1).any(1).any() for sign in per_node.values()]).tolist()
        return {node: sign for (node, sign), split in zip(per_node.items(), used, strict=True) if split}

    def _optimise(
        self, start: Start, work: Work, companions: tuple[str, ...], deadline: float, steps: int,
        rest: Tensor | None = None,
    ):  # fmt: skip
        """alpha- and beta-CROWN: the lower slopes and the split constraints' multipliers of the rows `rest`
        (default: all), by Adam, from CROWN's slopes and zero multipliers or from the warm start, until
        `deadline`; then every row bounded at the parameters kept, each at the step where it was best.
        Returns the best bounds (of that and `start`'s), their rows as recorded, and those parameters.

        The steps steer: they run on a `STEERING` copy of the graph, rounding to nearest, and their bounds
        only move Adam and choose each row's best step. The bound returned is the graph's own, at its
        precision and (in certification) rounded outward: on an MNIST ConvBig a float64 step took 3x a
        float32 one (no oneDNN for float64), and the ledger of rounding errors half a step at most."""
        alphas, betas, weighed = _starting_parameters(start.rows, start.layers, start.signs, start.warm)
        alphas = {key: a.detach() for key, a in alphas.items()}
        betas = {key: b.detach() for key, b in betas.items()}
        if (not alphas and not betas) or not steps:  # nothing to relax (CROWN is exact), or no time
            return start.best, start.recorded, alphas, betas
        rows = torch.arange(len(start.best), device=start.best.device) if rest is None else rest
        steering = self._steering(start, work, companions, rows)
        steered = _steered(steering, (self.lr_alpha, self.lr_beta), {k: v[rows] for k, v in weighed.items()},
                           ({k: v[rows] for k, v in alphas.items()}, {k: v[rows] for k, v in betas.items()}),
                           deadline, steps)  # fmt: skip
        alphas = {k: v.index_copy(0, rows, steered[0][k].to(v.dtype)) for k, v in alphas.items()}
        betas = {k: v.index_copy(0, rows, steered[1][k].to(v.dtype)) for k, v in betas.items()}
        how = Backward(alphas, betas, weighed, record=set(start.recorded))
        with torch.no_grad():
            found = backsubstitute(start.output, start.rows, how)
        improved = found > start.best
        recorded = {k: _kept_rows(improved, start.recorded[k], v) for k, v in how.recorded.items()}
        return torch.where(improved, found, start.best), recorded, alphas, betas


@dataclass
class Start:
    """Where a batch's optimisation starts: its graph's output node, its rows, the split signs by split
    node, the best bounds so far and their rows as recorded (by node id), and the warm start, if any."""

    output: Symbolic
    rows: Dense
    signs: dict[int, Tensor] | None
    best: Tensor
    recorded: dict[int, Dense]
    warm: Warm | None

    @property
    def layers(self) -> list[Symbolic]:
        return [node for node in self.output.ancestors() if splittable(node)]


def _steered(
    start: Start, rates: tuple[float, float], weighed: dict[int, Tensor], warm: tuple[dict, dict],
    deadline: float, steps: int,
) -> tuple[dict[int, Tensor], dict[int, Tensor]]:  # fmt: skip
    """Adam's steps on `start`'s graph from the slopes and multipliers `warm` (in the graph's precision);
    the slopes and multipliers of each row at the step where its bound was best (its start, if none beat
    ``start.best``)."""
    dtype = start.rows.A.dtype
    alphas = {k: v.to(dtype).clone().requires_grad_(True) for k, v in warm[0].items()}
    betas = {k: v.to(dtype).clone().requires_grad_(True) for k, v in warm[1].items()}
    weighed = {k: v.to(dtype) for k, v in weighed.items()}
    groups = [{"params": list(alphas.values()), "lr": rates[0]}] if alphas else []
    if betas:
        groups.append({"params": list(betas.values()), "lr": rates[1]})
    kept_alphas = {key: a.detach().clone() for key, a in alphas.items()}
    kept_betas = {key: b.detach().clone() for key, b in betas.items()}
    optimizer = torch.optim.Adam(groups, fused=start.best.device.type in ("cpu", "cuda"))
    best = start.best
    with outward_rounding(False):
        for _ in range(steps):
            with torch.enable_grad():
                found = backsubstitute(start.output, start.rows, Backward(alphas, betas, weighed))
                loss = -found.clamp(max=0).sum() - 1e-3 * found.sum()
                grads = torch.autograd.grad(loss, [*alphas.values(), *betas.values()])
            improved = found.detach() > best
            best = torch.where(improved, found.detach(), best)
            _keep_improved(improved, (kept_alphas, alphas), (kept_betas, betas))
            if time.perf_counter() > deadline or bool((best > 0).all()):
                break
            _adam_step(optimizer, alphas, betas, grads)
    return kept_alphas, kept_betas


def _at_warm(start: Start) -> tuple[Start, dict[int, Tensor], dict[int, Tensor]]:
    """`start` with each row's bound at its warm start taken where better (no gradient: one evaluation),
    and the warm start's slopes and multipliers as evaluated (what a row proved there keeps)."""
    alphas, betas, weighed = _starting_parameters(start.rows, start.layers, start.signs, start.warm)
    alphas = {key: a.detach() for key, a in alphas.items()}
    betas = {key: b.detach() for key, b in betas.items()}
    how = Backward(alphas, betas, weighed, record=set(start.recorded))
    with torch.no_grad():
        found = backsubstitute(start.output, start.rows, how)
    improved = found > start.best
    recorded = {k: _kept_rows(improved, start.recorded[k], v) for k, v in how.recorded.items()}
    best = torch.where(improved, found, start.best)
    return Start(start.output, start.rows, start.signs, best, recorded, start.warm), alphas, betas


def model_output(model: nn.Module, value: Symbolic, relu: str) -> Symbolic:
    """The network's output node on `value` in certification's context."""
    return model.abstract(value, AbstractContext(training=False, relu=relu))


def folded_margins(output: Symbolic, work: Work) -> Tensor:
    """``(N, K)``: the batch's margins folded into the layers after the last nonlinearity and bounded there
    by its (split, refined) intervals: on networks trained with intervals these beat the full
    back-substitution."""
    return output.margin_lower(work.y, until_nonlinear=True).gather(1, work.margins)


def margin_rows(y: Tensor, classes: int, dtype: torch.dtype, margins: Tensor) -> Dense:
    """The margins ``y_t - y_j`` each row bounds (``margins``: ``(N, K)`` indices among the ``C - 1``), as
    rows over the output."""
    rows = margin_others(y, classes, dtype)[0]
    return Dense(rows.gather(1, margins[..., None].expand(*margins.shape, classes)))


def minimisers(on_input: Tensor, best: Tensor, lower: Tensor, upper: Tensor) -> Tensor:
    """``(N, *input)``: each subdomain's corner of the box that minimises its worst row's linear bound
    (`on_input`, ``(N, K, *input)``: the rows' coefficients at the input)."""
    worst = best.argmin(1)
    row = on_input[torch.arange(len(worst), device=worst.device), worst]
    return torch.where(row > 0, lower, upper)


def _kept_rows(improved: Tensor, kept, now):
    """The recorded rows of the step where each row was best: `now`'s where it `improved` (N, K)."""
    return Dense(kept_where(improved, kept.A, now.A))


def _keep_improved(improved: Tensor, *pairs: tuple[dict[int, Tensor], dict[int, Tensor]]) -> None:
    """Each (kept, now) pair of parameters: now's values copied into kept on the rows `improved` (N, K)."""
    for kept, now in pairs:
        for key, value in now.items():
            kept[key] = kept_where(improved, kept[key], value)


def _adam_step(
    optimizer: torch.optim.Optimizer, alphas: dict[int, Tensor], betas: dict[int, Tensor], grads: tuple
) -> None:
    """One step of Adam on the slopes and multipliers from `grads`, then each back in its sound range:
    slopes in [0, 1], multipliers non-negative."""
    for parameter, grad in zip([*alphas.values(), *betas.values()], grads, strict=True):
        set_gradient(parameter, grad)
    optimizer.step()
    with torch.no_grad():
        for alpha in alphas.values():
            alpha.clamp_(0, 1)
        for beta in betas.values():
            beta.clamp_(min=0)


def _starting_parameters(
    rows: Dense, layers: list[Symbolic], signs: dict[int, Tensor] | None,
    warm: Warm | None,
) -> tuple[dict[int, Tensor], dict[int, Tensor], dict[int, Tensor]]:  # fmt: skip
    """Where alpha- and beta-CROWN start, ``(N, K, *F)`` per splittable layer's output node: the slopes
    (CROWN's, or `warm`'s), the split multipliers (zero, or `warm`'s) and the split signs they weigh."""
    n, k = rows.A.shape[:2]
    warm_alphas, warm_betas = warm if warm is not None else ({}, {})
    alphas = {}
    for node in layers:
        if node.layer.initial_slopes is None:  # nothing to optimise (a HardTanh): its lines stay
            continue
        start = warm_alphas.get(node.id)
        if start is None:
            start = node.layer.initial_slopes(node).unsqueeze(1).expand(n, k, *node.shape[1:])
        alphas[node.id] = start.clone().requires_grad_(True)
    weighed = {} if signs is None else {
        node.id: signs[node.parents[0].id].to(rows.A.dtype) for node in layers if node.parents[0].id in signs
    }  # fmt: skip
    betas = {}
    for key, sign in weighed.items():
        start = warm_betas.get(key)
        if start is None:
            start = torch.zeros((n, k, *sign.shape[1:]), dtype=rows.A.dtype, device=rows.A.device)
        betas[key] = start.clone().requires_grad_(True)
    return alphas, betas, weighed
