"""The leaves of branch and bound: a subdomain with no unstable neuron left is decided exactly, by linear
programs (HiGHS, through SciPy) over the input box and the split constraints: the network is affine on it.
This makes the search complete on piecewise-linear networks. On a network with an activation that is not
affine on a leaf, the leaf's box is cut in two and the halves bounded again (`LeafPhase._cut_boxes`);
where the halves of a subdomain's box bound better than splitting any neuron, it is cut before it is a
leaf."""

from __future__ import annotations

from dataclasses import dataclass

import numpy
import torch
from torch import Tensor, nn

from daic.runtime.certification.certify import Batch, falsify, least_margins
from daic.runtime.certification.search.bounding import model_output, splittable
from daic.runtime.certification.search.boxes import cut, margin_gradient
from daic.runtime.certification.search.frontier import Frontier
from daic.runtime.domains.coeffs import Dense
from daic.runtime.domains.element import margin_others
from daic.runtime.domains.rounding import outward_rounding
from daic.runtime.domains.symbolic import Backward, Symbolic, backsubstitute


def inexact_members(model: nn.Module) -> list[str]:
    """The activations of `model` whose leaves branch and bound cannot decide exactly (a member that it
    does not split, or that a split does not make affine), by name."""
    return sorted({type(m).__name__ for m in model.modules() if getattr(m, "activation", False)
                   and not (m.splittable and m.piecewise_linear)})  # fmt: skip


class LeafPhase:
    """What branch and bound does with its leaves (subdomains with no neuron left to split), as a part of
    its run (`branch_and_bound._Run`, whose images, frontier and bounding it uses)."""

    def _settle_leaves(self, leaves: Frontier) -> None:
        """Subdomains with no neuron left to split, decided exactly, one by one."""
        layout = self.bounder.layout
        for k in range(len(leaves)):
            j = int(leaves["image"][k])
            outcome = self.images.outcome(j)
            if outcome.status != "unknown":
                continue
            signs = {node: sign[0] for node, sign in layout.per_node(leaves["signs"][k : k + 1]).items()}
            open_rows = torch.zeros(self.classes - 1, dtype=torch.bool, device=self.lower.device)
            open_rows[leaves["margins"][k, : int(leaves["open"][k])]] = True
            i = int(self.images.batch_index[j])
            verdict = exact_leaf(self.model, self.images.batch, i, signs, self.search.label, open_rows)
            if outcome.status != "unknown":
                continue
            if verdict is None:  # neither proved nor refuted: the image cannot be verified
                self.images.undecided[j] = min(self.images.undecided[j], float(leaves["bound"][k]))
            else:
                self.images.proved[j] = min(self.images.proved[j], verdict)

    def _cut_boxes(self, subdomains: Frontier) -> None:
        """Subdomains whose boxes are cut (leaves of a network whose activations are not all affine on a
        leaf, or subdomains whose halves bound better than a neuron's split): each box's centre and its
        corner against the margin's gradient tried as candidates, then the box halved (`boxes.cut`) and the
        halves bounded as children (a half lies in its box, so the box's bound holds on it too). A box too
        narrow to cut is left undecided with its bound."""
        subdomains = subdomains.take(~self.images.gone(self.lower.device)[subdomains["image"]])
        if not len(subdomains):
            return
        image, lower, upper = subdomains["image"], subdomains["lower"], subdomains["upper"]
        halves, uncut, gradient = self._halves(subdomains)
        candidates = torch.cat([(lower + upper) / 2, torch.where(gradient > 0, lower, upper)])
        self.images.falsify(self.model, candidates, image.repeat(2), self.search.label)
        for j, bound in zip(image[uncut].tolist(), subdomains["bound"][uncut].tolist(), strict=True):
            self.images.undecided[j] = min(self.images.undecided[j], bound)
        every = torch.arange(len(halves), device=image.device)
        self._bound_children(halves, {"parent": every, "depth": halves["depth"] + 1})

    def _box_worth(self, subdomains: Frontier) -> Tensor:
        """``(P,)``: the worse estimated bound (`Bounder.estimate`) of the two halves of each subdomain's box
        (an infeasible half counts as infinity; minus infinity where the box cannot be cut)."""
        halves, uncut, _ = self._halves(subdomains)
        worth = torch.full((len(subdomains),), -torch.inf, dtype=self.lower.dtype, device=self.lower.device)
        if len(halves):
            boxes = (halves["lower"], halves["upper"])
            worst = self._estimates(
                halves["image"], halves["margins"], halves["open"], halves["signs"], boxes
            )
            worth[~uncut] = torch.minimum(*worst.chunk(2))  # `cut` puts every first half before the second
        return worth

    def _halves(self, subdomains: Frontier) -> tuple[Frontier, Tensor, Tensor]:
        """The subdomains' boxes cut in two (`boxes.cut`: every column but the ranked neurons copied to
        both halves), the mask of those too narrow to cut, and each least margin's gradient at its box's
        centre (what chose the cut)."""
        image, lower, upper = subdomains["image"], subdomains["lower"], subdomains["upper"]
        gradient = margin_gradient(self.model, lower, upper, self.y[image])
        scale = (self.upper - self.lower)[image].clamp(min=torch.finfo(lower.dtype).tiny)
        kept = Frontier({name: column for name, column in subdomains.columns.items() if name != "ranked"})
        halves, uncut = cut(kept, gradient, scale)
        return halves, uncut, gradient


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
    Returns infinity where no input satisfies the splits, None where nothing was decided. A program
    without a feasible point proves that no input follows the splits only through multipliers too: those
    of the least violation any input leaves (`_infeasibility_multipliers`), back-substituted alike. On a
    leaf where some layer is not affine (a Sigmoid, a max pooling window with no dominating input) the
    programs' rows are bounds, not the network: their minimisers are still only candidates, and only the
    multipliers' certificates, over the relaxation, prove anything."""
    splits = {k: v.unsqueeze(0) for k, v in signs.items()}
    program = _leaf_program(model, batch, i, signs, open_rows)
    if program is None:
        return float("inf")
    verdict, duals = _solve_leaf(model, batch, i, program, by)
    if duals is None:
        return verdict
    if verdict == float("inf"):  # no feasible point: proved only if the programs' multipliers prove it
        empty = Dense(program.rows.A.new_zeros(1, 1, *program.rows.A.shape[2:]))
        return float("inf") if _leaf_bound(model, batch, i, splits, program, empty, duals) > 0 else None
    least = _leaf_bound(model, batch, i, splits, program, program.rows, duals)
    return least if least > 0 else None


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
        output = model_output(model, value, batch.relu)
    if bool(output.analysis.infeasible[0]):
        # Bounds rounded to nearest that cross prove nothing: the search's own rounding must find them so.
        value = Symbolic.input(lower, upper, crown=True, splits=splits)
        output = model_output(model, value, batch.relu)
        if bool(output.analysis.infeasible[0]):
            return None
    with outward_rounding(False):
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
    """The programs solved, one per margin: (verdict, None) where they decide (a margin: a minimiser
    falsified image i; None: a solver failed, its minimiser did not falsify, or no point is feasible and
    no multipliers say why); (infinity, [the multipliers of the least violation]) where no point is
    feasible by the solver's tolerances (a certificate to check); else (None, each program's dual
    multipliers of the split constraints)."""
    from scipy.optimize import linprog

    lower, upper = batch.lower[i : i + 1], batch.upper[i : i + 1]
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
        if solved.status == 2:  # no feasible point, by the solver's tolerances: a certificate may prove it
            farkas = _infeasibility_multipliers(a_ub, b_ub, bounds, lower.device)
            return (float("inf"), [farkas]) if farkas is not None else (None, None)
        if solved.status != 0:
            return None, None
        if float(solved.fun) + float(program.offset[r]) <= 0:
            return _try_minimiser(model, batch, i, solved.x, by), None
        duals.append(
            torch.zeros(0, device=lower.device)
            if a_ub is None
            else torch.tensor(-solved.ineqlin.marginals, device=lower.device).clamp(min=0)
        )
    return None, duals


def _try_minimiser(model: nn.Module, batch: Batch, i: int, minimiser, by: str) -> float | None:
    """A program's minimiser (its minimum at or below zero), moved into image i's ball and run through the
    network: its margin where it falsifies image i, else None. It is a candidate even where float64 puts
    it a rounding above zero: the witness check decides."""
    lower, y = batch.lower[i : i + 1], batch.y[i : i + 1]
    point = torch.tensor(minimiser, dtype=lower.dtype, device=lower.device).reshape(lower.shape)
    point = torch.maximum(torch.minimum(point, batch.inner_upper[i : i + 1]), batch.inner_lower[i : i + 1])
    margins = least_margins(model, point, y)
    # CPU: image numbers, read on the host; a CUDA tensor may be indexed by them as they are
    falsify(model, batch, torch.tensor([i]), point, margins.clamp(max=0.0), by)
    return float(margins[0]) if batch.outcomes[i].status == "falsified" else None


def _infeasibility_multipliers(a_ub, b_ub, bounds, device: torch.device) -> Tensor | None:
    """Multipliers ``l >= 0`` of the split constraints ``A x <= b`` under which no input of the box satisfies
    them all: the duals of ``min t`` subject to ``A x - t <= b`` (the least violation any input must
    leave), which make ``l (A x - b)`` at least that minimum over the box. None where the least violation
    is not positive or the solver fails."""
    from scipy.optimize import linprog

    rows = a_ub.shape[0]
    objective = [0.0] * a_ub.shape[1] + [1.0]
    relaxed = numpy.hstack([a_ub, -numpy.ones((rows, 1))])
    solved = linprog(objective, A_ub=relaxed, b_ub=b_ub, bounds=[*bounds, (0, None)], method="highs")
    if solved.status != 0 or not float(solved.fun) > 0:
        return None
    return torch.tensor(-solved.ineqlin.marginals, device=device).clamp(min=0)


def _leaf_bound(
    model: nn.Module, batch: Batch, i: int, splits: dict[int, Tensor], program: _LeafProgram, rows: Dense,
    duals: list[Tensor],
) -> float:  # fmt: skip
    """The least of `rows`' beta-CROWN bounds with the programs' multipliers `duals` (one list per row, over
    the split constraints), in the domain's own rounding: a bound that holds whatever the programs'
    tolerances. With rows of zeros it bounds ``-sum l s z`` over the relaxation: positive, no input
    follows the splits. Infinity where the analysis itself finds the splits contradict each other."""
    lower, upper = batch.lower[i : i + 1], batch.upper[i : i + 1]
    value = Symbolic.input(lower, upper, crown=True, splits=splits)
    output = model_output(model, value, batch.relu)
    if bool(output.analysis.infeasible[0]):
        return float("inf")
    how = Backward()
    start = 0
    relus = {n.parents[0].id: n for n in output.ancestors() if splittable(n)}
    for relu, chosen, *_ in program.constraints:
        node = relus[relu.parents[0].id]
        beta = torch.zeros((1, len(duals), *node.shape[1:]), dtype=lower.dtype, device=lower.device)
        for r, dual in enumerate(duals):
            beta[0, r].view(-1)[chosen] = dual[start : start + len(chosen)].to(lower.dtype)
        how.betas[node.id] = beta
        how.signs[node.id] = splits[relu.parents[0].id].to(lower.dtype)
        start += len(chosen)
    return float(backsubstitute(output, rows, how).min())


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


def _margin_rows(y: Tensor, classes: int, dtype: torch.dtype, open_rows: Tensor | None) -> Dense:
    """The margins ``y_t - y_j`` as rows over the output, only those of `open_rows` when given."""
    margins = margin_others(y, classes, dtype)[0]
    return Dense(margins if open_rows is None else margins[:, open_rows])
