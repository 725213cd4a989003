"""How a round's subdomains are cut into bounding passes: as many children a pass as its memory holds, and
groups of children with different numbers of open margins bounded together where a pass's fixed cost
outweighs the margins the smaller ones would pad.

A pass of children costs a fixed part (its Adam steps' Python and kernel launches, whatever its size) and a
part in proportion to its rows (children times margins). On an MNIST ConvSmall on one thread, a pass of 2
to 4 children took 0.12-0.2 s and each row about 3 ms more: six images searched together with 1 to 9
margins open bounded five passes a round, the smallest of 2 children. On a GPU the rows cost next to
nothing, and every pass saved is worth its launches."""

from __future__ import annotations

import itertools
import math
import statistics
from collections import deque

import torch

from daic.runtime.certification.certify import memory_budget

MAX_CHILDREN = 1024
"""The most children bounded in one pass (a round with more bounds them in several)."""
PASS_BYTES = 2**30
"""What one bounding pass of children may hold on the CPU (a share of the free memory on a GPU)."""
BYTES_PER_ROW_NEURON = 360
"""What a bounding pass holds per child, margin and splittable neuron (its CROWN pass, the float32 copy
and what 20 Adam steps' autograd keeps): 41 float64 numbers measured on an MNIST ConvSmall (1,024
children on one margin: 1,220 MiB) and 44 on a ConvBig (64 children: 1,071 MiB), rounded up."""
REMEMBERED = 32
"""How many of the last passes `PassCost` fits (a search's cost a row moves as its subdomains deepen)."""


def children_per_pass(neurons: int, rows: int, device: torch.device) -> int:
    """How many children one bounding pass takes (`MAX_CHILDREN` at most): as many as hold `rows` margins
    each over `neurons` splittable neurons within `PASS_BYTES` (`certify.memory_budget` on a GPU)."""
    per_child = max(1, rows * neurons * BYTES_PER_ROW_NEURON)
    return max(1, min(MAX_CHILDREN, memory_budget(device, PASS_BYTES) // per_child))


def passes(count: int, each: int) -> list[slice]:
    """`count` subdomains cut, in order, into as few passes of at most `each` (`children_per_pass`) as hold
    them, of equal sizes (within one): a remainder bounded alone would cost a pass for a few children."""
    many = -(-count // each)  # none for no subdomain
    ends = [count * k // many for k in range(many + 1)] if many else []
    return [slice(start, end) for start, end in itertools.pairwise(ends)]


class PassCost:
    """What a search's bounding passes cost, learnt from its last `REMEMBERED`: seconds = fixed + per_row
    times rows, fitted by least squares."""

    def __init__(self) -> None:
        self._seen: deque[tuple[int, float]] = deque(maxlen=REMEMBERED)

    def add(self, rows: int, seconds: float) -> None:
        """A pass of `rows` rows (children times margins) took `seconds`."""
        self._seen.append((rows, seconds))

    def fixed_rows(self) -> float:
        """A pass's fixed cost in rows' worth: 0 (nothing merged) until three passes with sizes at least
        2x apart have been seen; infinite where more rows cost no more (a GPU's launches dominate). Host
        numbers: the fit runs on the CPU whatever the device."""
        rows = [float(r) for r, _ in self._seen]
        if len(rows) < 3 or max(rows) < 2 * min(rows):
            return 0.0
        per_row, fixed = statistics.linear_regression(rows, [s for _, s in self._seen])
        if per_row <= 0:
            return math.inf
        return max(fixed / per_row, 0.0)


def merged(groups: list[tuple[int, int]], fixed_rows: float, per_pass: dict[int, int]) -> list[int]:
    """The margins each group is bounded on, given the groups as (margins, children) in increasing margins:
    consecutive groups bounded as one on the most margins among them where the passes that saves (at
    `fixed_rows` rows' worth each) cost more than the rows padded; `per_pass[k]`: the children a pass on
    k margins holds. The least cost over every way of cutting the groups into runs (there are few); at an
    infinite `fixed_rows` (rows cost nothing), the fewest passes, then the fewest rows: merging groups
    whose padded children no longer fit one pass's memory can take more passes, not fewer."""
    ends = list(itertools.accumulate((n for _, n in groups), initial=0))  # children before each group

    def cost(start: int, end: int) -> tuple[float, float]:
        margins, children = groups[end - 1][0], ends[end] - ends[start]
        many = -(-children // per_pass[margins])
        if math.isinf(fixed_rows):
            return float(many), float(children * margins)
        return 0.0, fixed_rows * many + children * margins

    best: list[tuple[float, float]] = [(0.0, 0.0)]  # best[j]: the least cost of the first j groups
    cut = [0]
    for end in range(1, len(groups) + 1):
        options = [(_plus(best[start], cost(start, end)), start) for start in range(end)]
        least, start = min(options, key=lambda option: option[0])  # ties: the first, the longest run
        best.append(least)
        cut.append(start)
    bounded_on, end = [0] * len(groups), len(groups)
    while end:
        start = cut[end]
        bounded_on[start:end] = [groups[end - 1][0]] * (end - start)
        end = start
    return bounded_on


def _plus(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return a[0] + b[0], a[1] + b[1]
