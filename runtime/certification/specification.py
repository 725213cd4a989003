"""Properties beyond robustness, certified by the same cascade: an input box and a disjunction of
conjunctions of linear constraints on the outputs (VNN-LIB's properties), made a margin problem.

A clause ``c`` (constraints ``a_r . y + k_r <= 0``, all of which a counterexample satisfies) holds nowhere
in the box exactly when ``z_c = max_r (a_r . y + k_r) > 0`` everywhere in it. Layers appended to the network
compute ``[0, -z_1, ..., -z_C]``: for the label 0, the margins ``y_0 - y_c`` are the ``z_c``, so every
domain, the attack and branch and bound certify the property as they certify robustness; a falsified
"image" is a point that satisfies a clause. The maximum of a clause's rows is built from ReLUs,
``max(u, v) = v + relu(u - v)`` with ``v = relu(v) - relu(-v)``, halving the rows at each level.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from daic.runtime.certification.certify import Batch, Outcome, Step, certify_batch
from daic.runtime.certification.witness import Witnesses
from daic.runtime.layers.activation import ReLU
from daic.runtime.layers.affine import Linear
from daic.runtime.layers.base import placement
from daic.runtime.layers.containers import Sequential


def clause_layers(clauses: Sequence[tuple[Tensor, Tensor]], outputs: int) -> list[nn.Module]:
    """The layers after a network of `outputs` outputs that compute ``[0, -z_1, ..., -z_C]`` for the
    clauses, each ``(rows (R, outputs), constants (R,))``; float64, on the host (they move with the
    network they are appended to). A clause of no rows holds everywhere (its ``z`` is 0: any point
    falsifies)."""
    rows = [r.tolist() if len(r) else [[0.0] * outputs] for r, _ in clauses]
    constants = [k.tolist() if len(k) else [0.0] for r, k in clauses]
    flat_rows = [row for clause in rows for row in clause]
    layers: list[nn.Module] = [_linear(flat_rows, [k for clause in constants for k in clause])]
    groups = [len(r) for r in rows]
    while any(g > 1 for g in groups):
        widen, narrow, groups = _halving(groups)
        layers += [_linear(widen), ReLU(), _linear(narrow)]
    count = len(groups)
    layers.append(_linear([[0.0] * count] + [[-float(i == j) for j in range(count)] for i in range(count)]))
    return layers


Matrix = list[list[float]]


def _halving(groups: list[int]) -> tuple[Matrix, Matrix, list[int]]:
    """One level of the maxima: each group's values paired, ``(u, v) -> [u - v, v, -v]`` and back to
    ``relu(u - v) + relu(v) - relu(-v)``; a value left unpaired passes as ``[v, -v]`` -> ``relu(v) -
    relu(-v)``. Returns the two matrices and the new group sizes."""
    width = sum(groups)
    up: list[dict[int, float]] = []
    down: list[dict[int, float]] = []
    start = 0
    for size in groups:
        members = list(range(start, start + size))
        start += size
        for pair in range(0, size - 1, 2):
            u, v = members[pair], members[pair + 1]
            up += [{u: 1.0, v: -1.0}, {v: 1.0}, {v: -1.0}]
            down.append({len(up) - 3: 1.0, len(up) - 2: 1.0, len(up) - 1: -1.0})
        if size % 2:
            up += [{members[-1]: 1.0}, {members[-1]: -1.0}]
            down.append({len(up) - 2: 1.0, len(up) - 1: -1.0})
    return _dense(up, width), _dense(down, len(up)), [(size + 1) // 2 for size in groups]


def _dense(rows: list[dict[int, float]], width: int) -> Matrix:
    return [[row.get(j, 0.0) for j in range(width)] for row in rows]


def _linear(weight: Matrix, bias: list[float] | None = None) -> Linear:
    layer = Linear(len(weight[0]), len(weight)).double()
    with torch.no_grad():
        # CPU: the layer is made on the host, as its module's parameters are; it moves with the network
        layer.weight.copy_(torch.tensor(weight, dtype=torch.float64))
        layer.bias.copy_(torch.tensor(bias or [0.0] * len(weight), dtype=torch.float64))
    return layer


def certify_region(
    model: nn.Module,
    clauses: Sequence[tuple[Tensor, Tensor]],
    steps: Sequence[Step],
    outer: tuple[Tensor, Tensor],
    inner: tuple[Tensor, Tensor],
    index: int = 0,
    relu: str = "hybrid",
    witnesses: Witnesses | None = None,
) -> Outcome:
    """Whether some point of the box satisfies a clause: `verified` (none does, over the box `outer`,
    which contains the property's), `falsified` (``witness``: a point of `inner`, inside the property's
    box, that `witnesses` admits), or `unknown`/`error`. `model` is the certifying float64 network; the
    boxes have its input's shape (no batch). Without `witnesses`, a point falsifies where the appended
    layers' margin is at most zero exactly and in float32 (`Misclassified`): the property as the clauses'
    tensors state it, whose constants were rounded; a property read from a file checks itself as written."""
    device, dtype = placement(model)
    outputs = _outputs(model, outer[0])
    spec = Sequential(*_children(model), *clause_layers(clauses, outputs)).to(device)
    lower, upper = (t.to(device, dtype).unsqueeze(0) for t in outer)
    inner_lower, inner_upper = (t.to(device, dtype).unsqueeze(0) for t in inner)
    x = torch.minimum(torch.maximum((inner_lower + inner_upper) / 2, inner_lower), inner_upper)
    y = torch.zeros(1, dtype=torch.long, device=device)
    batch = Batch(
        x, y, lower, upper, [Outcome(index, 0)], relu, inner_lower, inner_upper, witnesses=witnesses
    )
    was_training = model.training
    spec.eval()
    try:
        return certify_batch(spec, steps, batch)[0]
    finally:
        model.train(was_training)


def _children(model: nn.Module) -> list[nn.Module]:
    return list(model) if isinstance(model, nn.Sequential) else [model]


def _outputs(model: nn.Module, lower: Tensor) -> int:
    with torch.no_grad():
        return int(model(lower.unsqueeze(0).to(*placement(model))).flatten(1).shape[1])
