"""VNN-LIB 1.0 properties read (`daic verify --vnnlib`): where a counterexample would lie, as input boxes and,
in each, a disjunction of conjunctions of linear constraints on the outputs.

A property declares inputs ``X_i`` (the network input's values in row-major order, channels first) and
outputs ``Y_j`` and asserts formulas (comparisons ``<= >= < >`` of linear terms built with ``+ - *``,
joined by ``and`` and ``or``); it holds where all its assertions do. It is brought to a disjunction of
cases, each an input box (bounds on single inputs) with constraints on the outputs (`Region`, `Clause`);
the property is satisfiable exactly when, for some case, some point of the box makes the network's outputs
satisfy every constraint of a clause. Numbers are kept as exact rationals (`Fraction`): the boxes daic
certifies contain each written box (rounded outward), and a counterexample is checked against the property
as written (`satisfies`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from itertools import product
from pathlib import Path

from daic.errors import DaicError

MAX_CASES = 10_000
"""The most cases a property's disjunctions may multiply out to."""
_TOKEN = re.compile(r"\s*(?:(;[^\n]*)|(\()|(\))|([^\s()]+))")
_VARIABLE = re.compile(r"^([XY])_(\d+)$")


class PropertyError(DaicError):
    """A VNN-LIB file daic cannot read; the message says where (line) and what."""


@dataclass(frozen=True)
class Atom:
    """``sum coefficients[v] * v + constant <= 0`` (``strict``: ``< 0``); variables are ``X_i``, ``Y_j``."""

    coefficients: tuple[tuple[str, Fraction], ...]
    constant: Fraction
    strict: bool
    line: int

    def value(self, values: dict[str, Fraction]) -> Fraction:
        return sum((c * values[v] for v, c in self.coefficients), self.constant)

    def holds(self, values: dict[str, Fraction]) -> bool:
        total = self.value(values)
        return total < 0 if self.strict else total <= 0

    def holds_throughout(self, lower: dict[str, Fraction], upper: dict[str, Fraction]) -> bool:
        """Whether it holds for every value of the variables between `lower` and `upper`: at the corner
        where the sum is largest."""
        total = sum((c * (upper[v] if c > 0 else lower[v]) for v, c in self.coefficients), self.constant)
        return total < 0 if self.strict else total <= 0


@dataclass(frozen=True)
class Clause:
    """Constraints on the outputs that a counterexample satisfies all of: ``rows @ y + constants <= 0``."""

    atoms: tuple[Atom, ...]


@dataclass
class Region:
    """A case of the property: the input box (exact ends per input) and the clauses, any of which a point
    of the box whose outputs satisfy it makes the property true."""

    lower: list[Fraction]
    upper: list[Fraction]
    clauses: list[Clause]


@dataclass
class Property:
    """A VNN-LIB property: its inputs' and outputs' counts and its cases (input box and output clauses)."""

    path: str
    inputs: int
    outputs: int
    regions: list[Region]
    atoms: list[list[Atom]]  # the assertions as written, each a disjunction of conjunctions

    def satisfied_by(self, x: list[Fraction], y: list[Fraction]) -> bool:
        """Whether the point (inputs `x`, outputs `y`) satisfies every assertion, exactly."""
        return self.satisfied_throughout(x, y, y)

    def satisfied_throughout(
        self, x: list[Fraction], y_lower: list[Fraction], y_upper: list[Fraction]
    ) -> bool:
        """Whether the inputs `x` with any outputs between `y_lower` and `y_upper` satisfy every
        assertion, exactly."""
        lower = {f"X_{i}": v for i, v in enumerate(x)} | {f"Y_{j}": v for j, v in enumerate(y_lower)}
        upper = {f"X_{i}": v for i, v in enumerate(x)} | {f"Y_{j}": v for j, v in enumerate(y_upper)}
        return all(
            any(all(a.holds_throughout(lower, upper) for a in case) for case in dnf) for dnf in self.atoms
        )


def read_property(path: str | Path) -> Property:
    """The property of the VNN-LIB file at `path`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PropertyError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise PropertyError(f"{path}: not a text file") from None
    return parse_property(text, str(path))


def parse_property(text: str, path: str = "<property>") -> Property:
    """The property of the VNN-LIB source `text` (`path` names it in messages)."""
    declared: dict[str, str] = {}
    assertions: list[list[list[Atom]]] = []
    for expression, line in _expressions(text, path):
        head = expression[0] if expression else None
        if head == "declare-const":
            _declare(expression, line, declared, path)
        elif head == "assert" and len(expression) == 2:
            assertions.append(_formula(expression[1], line, declared, path))
        else:
            raise PropertyError(f"{path}:{line}: expected (declare-const NAME Real) or (assert FORMULA)")
    inputs = _count(declared, "X", path)
    outputs = _count(declared, "Y", path)
    regions = _regions(assertions, inputs, path)
    return Property(path, inputs, outputs, regions, assertions)


def _expressions(text: str, path: str) -> Iterator[tuple[list, int]]:
    """The top-level S-expressions of `text` with the line each starts on (atoms are strings)."""
    stack: list[list] = []
    start = 1
    position = counted = 0
    line = 1
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            break
        # Lines counted from the last token on: counting from the top each time took a property of
        # 784 inputs seconds to read.
        token = match.start(match.lastindex or 0)
        line += text.count("\n", counted, token)
        position, counted = match.end(), token
        comment, opening, closing, word = match.groups()
        if comment or (opening is closing is word is None):
            continue
        if opening:
            if not stack:
                start = line
            stack.append([])
        elif closing:
            if not stack:
                raise PropertyError(f"{path}:{line}: a `)` closes nothing")
            done = stack.pop()
            if stack:
                stack[-1].append(done)
            else:
                yield done, start
        elif not stack:
            raise PropertyError(f"{path}:{line}: `{word}` outside an expression")
        else:
            stack[-1].append(word)
    if stack:
        raise PropertyError(f"{path}:{start}: an expression is never closed (a `)` is missing)")


def _declare(expression: list, line: int, declared: dict[str, str], path: str) -> None:
    if len(expression) != 3 or not isinstance(expression[1], str) or expression[2] != "Real":
        raise PropertyError(f"{path}:{line}: expected (declare-const NAME Real)")
    name = expression[1]
    if not _VARIABLE.match(name):
        raise PropertyError(f"{path}:{line}: `{name}`: inputs are X_0, X_1, ... and outputs Y_0, Y_1, ...")
    if name in declared:
        raise PropertyError(f"{path}:{line}: `{name}` is declared twice")
    declared[name] = name[0]


def _count(declared: dict[str, str], kind: str, path: str) -> int:
    numbers = sorted(int(name[2:]) for name, k in declared.items() if k == kind)
    if numbers != list(range(len(numbers))):
        missing = sorted(set(range(max(numbers, default=-1) + 1)) - set(numbers))
        raise PropertyError(f"{path}: {kind}_{missing[0]} is not declared, but {kind}_{numbers[-1]} is")
    if not numbers:
        raise PropertyError(
            f"{path}: it declares no {'inputs (X_0, ...)' if kind == 'X' else 'outputs (Y_0, ...)'}"
        )
    return len(numbers)


def _formula(expression, line: int, declared: dict[str, str], path: str) -> list[list[Atom]]:
    """A formula as a disjunction of conjunctions of atoms."""
    if not isinstance(expression, list) or not expression:
        raise PropertyError(f"{path}:{line}: expected a formula: (<= a b), (and ...), (or ...)")
    head, *rest = expression
    if head in ("and", "or"):
        parts = [_formula(part, line, declared, path) for part in rest]
        if head == "or":
            return [case for part in parts for case in part]
        cases = [[atom for case in chosen for atom in case] for chosen in product(*parts)]
        return _bounded(cases, line, path)
    if head in ("<=", ">=", "<", ">") and len(rest) == 2:
        left, right = (_term(r, line, declared, path) for r in rest)
        small, large = (left, right) if head in ("<=", "<") else (right, left)
        coefficients = {v: small[0].get(v, 0) - large[0].get(v, 0) for v in {**small[0], **large[0]}}
        terms = tuple(sorted((v, c) for v, c in coefficients.items() if c != 0))
        return [[Atom(terms, small[1] - large[1], head in ("<", ">"), line)]]
    if head in ("<=", ">=", "<", ">"):
        raise PropertyError(
            f"{path}:{line}: `({head} ...)` compares {len(rest)} terms: daic reads a comparison of two, "
            f"({head} a b)"
        )
    raise PropertyError(f"{path}:{line}: `{head}`: daic reads and, or, <=, >=, < and > of linear terms")


def _bounded(cases: list[list[Atom]], line: int | None, path: str) -> list[list[Atom]]:
    if len(cases) > MAX_CASES:
        where = path if line is None else f"{path}:{line}"
        raise PropertyError(f"{where}: the formula multiplies out to over {MAX_CASES:,} cases")
    return cases


def _term(expression, line: int, declared: dict[str, str], path: str) -> tuple[dict[str, Fraction], Fraction]:
    """A linear term: its coefficient per variable and its constant."""
    if isinstance(expression, str):
        if expression in declared:
            return {expression: Fraction(1)}, Fraction(0)
        try:
            return {}, Fraction(expression)
        except ValueError:
            raise PropertyError(
                f"{path}:{line}: `{expression}` is neither a declared variable nor a number"
            ) from None
    head, *rest = expression if expression else [None]
    parts = [_term(r, line, declared, path) for r in rest]
    if head == "+" and parts:
        return _sum(parts, [1] * len(parts))
    if head == "-" and len(parts) in (1, 2):
        return _sum(parts, [-1] if len(parts) == 1 else [1, -1])
    if head == "*" and len(parts) == 2 and any(not p[0] for p in parts):
        scale, other = (parts[0], parts[1]) if not parts[0][0] else (parts[1], parts[0])
        return {v: scale[1] * c for v, c in other[0].items()}, scale[1] * other[1]
    raise PropertyError(f"{path}:{line}: `{head}`: a linear term is built with +, - and * by a number")


def _sum(parts, signs) -> tuple[dict[str, Fraction], Fraction]:
    coefficients: dict[str, Fraction] = {}
    constant = Fraction(0)
    for (terms, value), sign in zip(parts, signs, strict=True):
        for v, c in terms.items():
            coefficients[v] = coefficients.get(v, Fraction(0)) + sign * c
        constant += sign * value
    return coefficients, constant


def _regions(assertions: list[list[list[Atom]]], inputs: int, path: str) -> list[Region]:
    """The cases of the whole property (every assertion holds), each split into its input box and its
    output constraints; cases with the same box share one region. The assertions of one case (an input
    box's bounds, as a rule) are read once, not once per case of the others."""
    fixed = [atom for assertion in assertions if len(assertion) == 1 for atom in assertion[0]]
    varying = [assertion for assertion in assertions if len(assertion) != 1]
    base = _case(fixed, ([None] * inputs, [None] * inputs, []), path)
    if base is None:
        return []
    regions: dict[tuple, Region] = {}
    cases = _bounded([[a for case in chosen for a in case] for chosen in product(*varying)], None, path)
    for chosen in cases:
        found = _case(chosen, (list(base[0]), list(base[1]), list(base[2])), path)
        if found is None:
            continue
        lower, upper, outputs = found
        if any(lo is not None and hi is not None and lo > hi for lo, hi in zip(lower, upper, strict=True)):
            continue
        unbounded = [i for i in range(inputs) if lower[i] is None or upper[i] is None]
        if unbounded:
            raise PropertyError(f"{path}: X_{unbounded[0]} has no lower or no upper bound in some case: daic "
                                "certifies over input boxes")  # fmt: skip
        region = regions.setdefault((tuple(lower), tuple(upper)), Region(lower, upper, []))
        region.clauses.append(Clause(tuple(outputs)))
    return list(regions.values())


def _case(atoms: list[Atom], start: tuple[list, list, list], path: str) -> tuple[list, list, list] | None:
    """`start` (an input box's lower and upper ends and output constraints) with `atoms` added; None where
    one of them is a false constant (the case holds nowhere)."""
    lower, upper, outputs = start
    for atom in atoms:
        kinds = {v[0] for v, _ in atom.coefficients}
        if kinds == {"X"}:
            _bound(atom, (lower, upper), path)
        elif kinds == {"Y"}:
            outputs.append(atom)
        elif kinds:
            raise PropertyError(f"{path}:{atom.line}: a constraint on inputs and outputs together: daic "
                                "reads bounds on inputs and linear constraints on outputs")  # fmt: skip
        elif not (atom.constant < 0 or (atom.constant == 0 and not atom.strict)):
            return None
    return lower, upper, outputs


def _bound(atom: Atom, box: tuple[list, list], path: str) -> None:
    """``c * X_i + k <= 0`` as a bound on X_i, tightening the box."""
    if len(atom.coefficients) != 1:
        raise PropertyError(
            f"{path}:{atom.line}: a constraint on several inputs: daic reads bounds of single inputs (an "
            "input box)"
        )
    ((name, c),) = atom.coefficients
    i, end = int(name[2:]), -atom.constant / c
    if c > 0:  # X_i <= end
        box[1][i] = end if box[1][i] is None else min(box[1][i], end)
    else:
        box[0][i] = end if box[0][i] is None else max(box[0][i], end)
