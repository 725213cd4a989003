"""Bounding a batch of subdomains: CROWN with the splits clamped in, then alpha- and beta-CROWN's slopes and
multipliers optimised together for a few Adam steps from each subdomain's parent's (Wang et al. 2021).

A batch is a `Work`: each row a subdomain of one of the searched images, with its box, its label, the
margins it still has to prove (`rows`: the others are proved on the image's whole box), its split signs
over the `Layout`'s neurons and the root's bounds of every split node (they hold on every subdomain)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from daic.runtime.context import AbstractContext
from daic.runtime.domains.coeffs import Dense
from daic.runtime.domains.element import margin_others
from daic.runtime.domains.symbolic import Backward, Symbolic, backsubstitute

LEAST_GAIN = 0.02
"""CROWN refines a layer's intermediate bounds only if it narrows a sample of its unstable neurons' intervals
by at least this share (`Symbolic.input`'s ``least_gain``). On an MNIST CNN7 trained with intervals it
narrowed its five layers by 0.7% to 0% beside the hybrid zonotope in 28 s of the root's 30; without it,
the root's alpha-CROWN verified image 55 in 12 s. On an MNIST ConvBig its last layer gains 5% and stays."""


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
class Bounded:
    """What bounding a batch found, per subdomain: ``lower`` ``(N, K)`` bounds of its margins, whether its
    splits contradict each other, the corner of its box that minimises its worst row's linear bound, its
    split nodes' bounds (``(N, *F)`` by node id), its coefficients on each splittable layer's output (for
    branching), and its slopes and multipliers at the step where each row was best (by output node id,
    ``(N, K, *F)``; empty without optimisation)."""

    lower: Tensor
    infeasible: Tensor
    corners: Tensor
    split_inputs: dict[int, tuple[Tensor, Tensor]]
    coefficients: dict[int, Tensor]
    alphas: dict[int, Tensor]
    betas: dict[int, Tensor]


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

    def bound(
        self, work: Work, deadline: float, steps: int | None = None, warm: Warm | None = None,
        companions: tuple[str, ...] = ("box",),
    ) -> Bounded:  # fmt: skip
        """The batch bounded with `steps` Adam steps (default: the bounder's) from `warm` (slopes and
        multipliers by output node id) where given, stopping at `deadline`."""
        signs = self._signs(work)
        value = Symbolic.input(work.lower, work.upper, companions, crown=self.crown, splits=signs,
                               prior=work.prior, deadline=deadline, least_gain=LEAST_GAIN)  # fmt: skip
        output = model_output(self.model, value, self.relu)
        if self.layout is None:
            self.layout = Layout.of(output)
        rows = margin_rows(work.y, output.shape[1], work.lower.dtype, work.margins)
        layers = [node for node in output.ancestors() if splittable(node)]
        how = Backward(record={node.id for node in layers} | {value.id})
        best = backsubstitute(output, rows, how)
        recorded = dict(how.recorded)
        alphas: dict[int, Tensor] = {}
        betas: dict[int, Tensor] = {}
        steps = self.steps if steps is None else steps
        if steps:  # past the deadline: no step, the starting slopes and multipliers kept
            steps = steps if time.perf_counter() < deadline else 0
            best, recorded, alphas, betas = self._optimise(output, rows, layers, signs, best, recorded,
                                                            deadline, steps, warm)  # fmt: skip
        corners = minimisers(recorded[value.id].A, best, work.lower, work.upper)
        inputs = {node.parents[0].id: node.parents[0].bounds() for node in layers}
        # The margins folded into the layers after the last nonlinearity and bounded there by its (split,
        # refined) intervals: on networks trained with intervals these beat the full back-substitution.
        folded = output.margin_lower(work.y, until_nonlinear=True).gather(1, work.margins)
        coefficients = {node.id: recorded[node.id].A for node in layers}
        infeasible = output.analysis.infeasible.clone()
        return Bounded(torch.maximum(best, folded), infeasible, corners, inputs, coefficients, alphas, betas)

    def _signs(self, work: Work) -> dict[int, Tensor] | None:
        """The split signs by split node, only the nodes some row of the batch splits (one read of the
        host): each split node costs every step a dense term."""
        if work.signs is None or self.layout is None or not self.layout.inputs:
            return None
        per_node = self.layout.per_node(work.signs)
        used = torch.stack([sign.flatten(1).any(1).any() for sign in per_node.values()]).tolist()
        return {node: sign for (node, sign), split in zip(per_node.items(), used, strict=True) if split}

    def _optimise(self, output, rows, layers, signs, best, recorded, deadline, steps, warm):
        """alpha- and beta-CROWN: the lower slopes and the split constraints' multipliers, by Adam, from
        CROWN's slopes and zero multipliers or from `warm`, keeping the best bound of each row (each setting
        gives a sound one), until `deadline`. Returns the best bounds, their rows as recorded, and the
        slopes and multipliers at the step where each row was best."""
        alphas, betas, weighed = _starting_parameters(rows, layers, signs, warm)
        groups = [{"params": list(alphas.values()), "lr": self.lr_alpha}] if alphas else []
        if betas:
            groups.append({"params": list(betas.values()), "lr": self.lr_beta})
        kept_alphas = {key: a.detach().clone() for key, a in alphas.items()}
        kept_betas = {key: b.detach().clone() for key, b in betas.items()}
        if not groups:  # nothing to relax: CROWN is exact
            return best, recorded, kept_alphas, kept_betas
        optimizer = torch.optim.Adam(groups, fused=best.device.type in ("cpu", "cuda"))
        for _ in range(steps):
            how = Backward(alphas, betas, weighed, record=set(recorded))
            with torch.enable_grad():
                found = backsubstitute(output, rows, how)
                loss = -found.clamp(max=0).sum() - 1e-3 * found.sum()
                grads = torch.autograd.grad(loss, [*alphas.values(), *betas.values()])
            improved = found.detach() > best
            best = torch.where(improved, found.detach(), best)
            recorded = {k: _kept_rows(improved, recorded[k], v) for k, v in how.recorded.items()}
            _keep_improved(improved, (kept_alphas, alphas), (kept_betas, betas))
            if time.perf_counter() > deadline or bool((best > 0).all()):
                break
            _adam_step(optimizer, alphas, betas, grads)
        return best, recorded, kept_alphas, kept_betas


def model_output(model: nn.Module, value: Symbolic, relu: str) -> Symbolic:
    """The network's output node on `value` in certification's context."""
    return model.abstract(value, AbstractContext(training=False, relu=relu))


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
    now = now.A.detach()
    mask = improved.view(*improved.shape, *[1] * (now.dim() - 2))
    return Dense(torch.where(mask, now, kept.A))


def _keep_improved(improved: Tensor, *pairs: tuple[dict[int, Tensor], dict[int, Tensor]]) -> None:
    """Each (kept, now) pair of parameters: now's values copied into kept on the rows `improved` (N, K)."""
    for kept, now in pairs:
        for key, value in now.items():
            mask = improved.view(*improved.shape, *[1] * (value.dim() - 2))
            kept[key] = torch.where(mask, value.detach(), kept[key])


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


def restricted(bounded: Bounded, keep: Tensor) -> Bounded:
    """Only the subdomains `keep` (a mask or indices) of `bounded`."""
    return Bounded(
        bounded.lower[keep], bounded.infeasible[keep], bounded.corners[keep],
        {k: (low[keep], up[keep]) for k, (low, up) in bounded.split_inputs.items()},
        {k: v[keep] for k, v in bounded.coefficients.items()},
        {k: v[keep] for k, v in bounded.alphas.items()}, {k: v[keep] for k, v in bounded.betas.items()},
    )  # fmt: skip


def padded(bounded: Bounded, most: int) -> Bounded:
    """`bounded` with its rows padded to `most` by repeating its first (a bound's least is unchanged)."""

    def pad(value: Tensor) -> Tensor:
        extra = most - value.shape[1]
        return (
            value if extra == 0 else torch.cat([value, value[:, :1].expand(-1, extra, *value.shape[2:])], 1)
        )

    return Bounded(
        pad(bounded.lower), bounded.infeasible, bounded.corners, bounded.split_inputs,
        {k: pad(v) for k, v in bounded.coefficients.items()}, {k: pad(v) for k, v in bounded.alphas.items()},
        {k: pad(v) for k, v in bounded.betas.items()},
    )  # fmt: skip


def joined(parts: list[Bounded], order: Tensor) -> Bounded:
    """The parts' subdomains one after another, taken in `order`; a multiplier one part lacks (it split no
    neuron of that layer) is zero there."""
    keys = {key for part in parts for key in part.betas}
    for part in parts:
        for key in keys - set(part.betas):
            part.betas[key] = torch.zeros_like(part.alphas[key])

    def cat(values: list[Tensor]) -> Tensor:
        return torch.cat(values)[order]

    first = parts[0]
    return Bounded(
        cat([p.lower for p in parts]), cat([p.infeasible for p in parts]), cat([p.corners for p in parts]),
        {k: (cat([p.split_inputs[k][0] for p in parts]), cat([p.split_inputs[k][1] for p in parts]))
         for k in first.split_inputs},
        {k: cat([p.coefficients[k] for p in parts]) for k in first.coefficients},
        {k: cat([p.alphas[k] for p in parts]) for k in first.alphas},
        {k: cat([p.betas[k] for p in parts]) for k in keys},
    )  # fmt: skip


def rows_of(bounded: Bounded, margins: Tensor) -> Bounded:
    """`bounded` (every margin) on the rows `margins` (``(N, K)`` indices) only."""
    return Bounded(
        bounded.lower.gather(1, margins), bounded.infeasible, bounded.corners, bounded.split_inputs,
        {k: v.gather(1, expanded(margins, v)) for k, v in bounded.coefficients.items()},
        {k: v.gather(1, expanded(margins, v)) for k, v in bounded.alphas.items()}, {},
    )  # fmt: skip


def expanded(margins: Tensor, value: Tensor) -> Tensor:
    """`margins` ``(N, K)`` as gather indices over dim 1 of `value` ``(N, S, *F)``."""
    return margins.view(*margins.shape, *[1] * (value.dim() - 2)).expand(-1, -1, *value.shape[2:])
