"""Checking expressions against the registry, and elaborating them into values.

`Elaborator.check(expr, expected)` returns the expression's type and its value: numbers folded, lets and
imports substituted, and every constructor application turned into a `Built` with all its arguments bound
(defaults filled in). The lowering turns `Built` values into runtime objects without looking at syntax again.
Every problem found on the way goes into the shared diagnostics list.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

from daic.compiler.checking import codes as C
from daic.compiler.checking.spaces import Space
from daic.compiler.checking.values import UNKNOWN, Built
from daic.compiler.registry import REQUIRED, Constructor, Param, Registry
from daic.compiler.types import ANY, BOOL, FLOAT, INT, SCHEDULE, STR, ListOf, OneOf, Type, article, is_subtype
from daic.dsl import ast as A
from daic.dsl.diagnostics import Diagnostic, Fix, error
from daic.dsl.format import escaped
from daic.dsl.source import Span

INT_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class Symbol:
    """What a name in scope stands for: a let (its type and value, where it is defined)."""

    name: str
    type: Type
    value: object
    span: Span
    path: str | None = None


# A scope resolves a (possibly dotted) name to a symbol, or None. The .dai checker provides lets and
# imports; in a .net file the scope is empty.
Scope = Callable[[A.Name], Symbol | None]


def no_names(name: A.Name) -> Symbol | None:
    return None


def closest(name: str, candidates: list[str]) -> str | None:
    """The candidate `name` was most likely meant to be, if one is close enough."""
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    if not close:
        lowered = {c.lower(): c for c in candidates}
        close = [lowered[name.lower()]] if name.lower() in lowered else []
    return close[0] if close else None


def did_you_mean(name: str, candidates: list[str]) -> str | None:
    found = closest(name, candidates)
    return f"did you mean `{found}`?" if found else None


def renaming(
    written: str, span: Span, candidates: list[str], matched: str | None = None
) -> tuple[str | None, Fix | None]:
    """The hint and the fix for an unknown name written as `written` at `span`: the closest candidate to
    `matched` (default: `written`), put in its place (keeping a module qualifier the candidate lacks)."""
    found = closest(written if matched is None else matched, candidates)
    if found is None:
        return None, None
    text = written.rsplit(".", 1)[0] + "." + found if "." in written and "." not in found else found
    return f"did you mean `{found}`?", Fix(f"Replace `{written}` by `{text}`", span, text)


def as_written(value: str, node: A.Expr | None = None, limit: int = 80) -> str:
    """A string for a message, as the source writes it between its quotes: the literal's own text when
    `node` is the literal, else the value with its escapes written back. Either way `C:\\nets` keeps its
    `\\n` (and the message its one line). Shortened in the middle when longer than `limit`."""
    text = node.text[1:-1] if isinstance(node, A.String) and node.text else escaped(value)
    if len(text) <= limit:
        return text
    keep = (limit - 3) // 2
    return text[:keep] + "..." + text[-keep:]


def number_text(value: int | float, keeps: Callable[[float], bool] = lambda shown: True) -> str:
    """A number as a person writes it. A float is shown to 12 significant digits, which hides the rounding
    of float arithmetic (0.2 - 0.3 is -0.1, not -0.09999999999999998), unless the value so shown would
    lose what the message is about (`keeps` false: it is no longer out of range): then in full."""
    if not isinstance(value, float):
        return repr(value)
    short = f"{value:.12g}"
    if not keeps(float(short)):
        return repr(value)
    return short if any(c in short for c in ".en") else short + ".0"  # a float stays one: 3.0, not 3


def describe(value: object) -> str:
    if isinstance(value, float):
        return number_text(value)
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, Built | Space):
        return value.decl.name
    if isinstance(value, tuple):
        return "[" + ", ".join(describe(v) for v in value) + "]"
    if isinstance(value, str):
        return f'"{as_written(value)}"'
    return repr(value)


# Why a search space cannot stand where this elaborator checks (None: it may). Spaces stand in the schemes
# and lets of .dai files; the .net checker and the command line give reasons of their own.
NO_SPACES = "a search space stands in a scheme or a let of a .dai file, for `daic tune`"


class Elaborator:
    def __init__(
        self,
        registry: Registry,
        sink: list[Diagnostic],
        scope: Scope = no_names,
        visible_names: Callable[[], list[str]] = list,
        spaces: str | None = NO_SPACES,
    ) -> None:
        self.registry = registry
        self.sink = sink
        self.scope = scope
        self.visible_names = visible_names
        self.spaces = spaces

    def report(self, code, message: str, span: Span, hint: str | None = None, fix: Fix | None = None) -> None:
        self.sink.append(error(code, message, span, hint, fix))

    # --- entry point ----------------------------------------------------------------------------------

    def check(self, expr: A.Expr, expected: Type = ANY) -> tuple[Type, object]:
        if isinstance(expected, OneOf):
            expected = self._pick_option(expr, expected)
        if isinstance(expr, A.Invalid):
            return ANY, UNKNOWN
        if isinstance(expr, A.Number | A.BinOp | A.Neg):
            return self._number(expr, expected)
        if isinstance(expr, A.String):
            return self._expect(STR, expr.value, expected, expr)
        if isinstance(expr, A.Bool):
            return self._expect(BOOL, expr.value, expected, expr)
        if isinstance(expr, A.ListExpr):
            return self._list(expr, expected)
        if isinstance(expr, A.Name):
            return self._name(expr, expected)
        if isinstance(expr, A.Call):
            return self._call(expr, expected)
        raise TypeError(f"not an expression: {expr!r}")

    @staticmethod
    def _pick_option(expr: A.Expr, expected: OneOf) -> Type:
        lists = [o for o in expected.options if isinstance(o, ListOf)]
        others = [o for o in expected.options if not isinstance(o, ListOf)]
        if isinstance(expr, A.ListExpr) and lists:
            return lists[0]
        return others[0] if others else expected

    def _expect(self, actual: Type, value: object, expected: Type, expr: A.Expr) -> tuple[Type, object]:
        if not is_subtype(actual, expected):
            self.report(
                C.TYPE_MISMATCH,
                f"expected {article(expected)}, found {article(actual)} `{describe(value)}`",
                expr.span,
            )
            return ANY, UNKNOWN
        return actual, value

    # --- numbers --------------------------------------------------------------------------------------

    def _fold(self, expr: A.Expr) -> int | float | None:
        """The constant value of an arithmetic expression, or None (reported) when it has none."""
        if isinstance(expr, A.Number):
            return expr.value
        if isinstance(expr, A.Neg):
            inner = self._fold(expr.operand)
            return None if inner is None else -inner
        if isinstance(expr, A.BinOp):
            left, right = self._fold(expr.left), self._fold(expr.right)
            if left is None or right is None:
                return None
            if expr.op == "/":
                if right == 0:
                    self.report(C.OUT_OF_RANGE, "division by zero", expr.right.span)
                    return None
                result = left / right
            else:
                result = {"+": left + right, "-": left - right, "*": left * right}[expr.op]
            if isinstance(result, float) and not math.isfinite(result):
                self.report(C.OUT_OF_RANGE, "the result is too large for a number", expr.span)
                return None
            return result
        if isinstance(expr, A.Invalid):
            return None
        kind, value = self.check(expr)
        if kind in (INT, FLOAT) and isinstance(value, int | float) and not isinstance(value, bool):
            return value  # a let that names a number: `let b = a * 2`
        if isinstance(value, Space):
            self.report(
                C.SPACE_NOT_ALLOWED,
                f"arithmetic takes single numbers, and `{value.decl.name}` is a search space",
                expr.span,
                hint="write the arithmetic into the space's ends: `Range(2 * a, 2 * b)`",
            )
            return None
        if kind != ANY:
            self.report(C.TYPE_MISMATCH, f"arithmetic takes numbers, not {article(kind)}", expr.span)
        return None

    def _number(self, expr: A.Expr, expected: Type) -> tuple[Type, object]:
        value = self._fold(expr)
        if value is None:
            return ANY, UNKNOWN
        actual = INT if isinstance(value, int) else FLOAT
        return self._expect(actual, value, expected, expr)

    # --- lists ----------------------------------------------------------------------------------------

    def _list(self, expr: A.ListExpr, expected: Type) -> tuple[Type, object]:
        if expected != ANY and not isinstance(expected, ListOf):
            self.report(C.TYPE_MISMATCH, f"expected {article(expected)}, found a list", expr.span)
            return ANY, UNKNOWN
        item_type = expected.item if isinstance(expected, ListOf) else ANY
        values, types = [], []
        for item in expr.items:
            kind, value = self.check(item, item_type)
            values.append(value)
            types.append(kind)
        known = [t for t in types if t != ANY]
        result = ListOf(item_type if item_type != ANY else (known[0] if known else ANY))
        return result, tuple(values)

    # --- names and calls ------------------------------------------------------------------------------

    def _constructors(self, name: str, expected: Type) -> tuple[list[Constructor], list[Constructor]]:
        """All declarations of `name`, and those that build the expected type."""
        found = self.registry.lookup(name)
        fitting = [d for d in found if is_subtype(d.returns, expected)]
        return found, fitting

    def _name(self, expr: A.Name, expected: Type) -> tuple[Type, object]:
        symbol = self.scope(expr)
        if symbol is not None:
            return (
                self._expect(symbol.type, symbol.value, expected, expr)
                if symbol.type != ANY
                else (ANY, symbol.value)
            )
        if len(expr.parts) == 1:
            found, fitting = self._constructors(expr.dotted, expected)
            if found:
                decl = (fitting or found)[0]
                if not fitting:
                    return self._expect(decl.returns, Built(decl), expected, expr)
                return decl.returns, self._apply(decl, expr, (), (), expr.span)
            subscripted = self._subscript(expr, expected)
            if subscripted is not None:
                return subscripted
        hint, fix = renaming(expr.dotted, expr.span, self.visible_names() + self.registry.names())
        self.report(C.UNKNOWN_NAME, f"unknown name `{expr.dotted}`", expr.span, hint, fix)
        return ANY, UNKNOWN

    def _subscript(self, expr: A.Name, expected: Type) -> tuple[Type, object] | None:
        """`IFGSM_3` is `IFGSM(3)`: the paper's subscript, for constructors whose first parameter is one."""
        match = re.fullmatch(r"([A-Za-z]\w*?)_(\d+)", expr.parts[0])
        if not match:
            return None
        found, fitting = self._constructors(match.group(1), expected)
        decl = next((d for d in fitting or found if d.params and d.params[0].subscript), None)
        if decl is None:
            return None
        number = A.Number(int(match.group(2)), match.group(2), span=expr.span)
        return self._call(
            A.Call(A.Name((decl.name,), span=expr.span), (number,), (), span=expr.span), expected
        )

    def _call(self, expr: A.Call, expected: Type) -> tuple[Type, object]:
        symbol = self.scope(expr.func)
        if symbol is not None:
            self.report(
                C.NOT_CALLABLE,
                f"`{expr.func.dotted}` is a let, not a constructor; it cannot be called",
                expr.func.span,
                hint=f"use it without arguments: `{expr.func.dotted}`",
            )
            return ANY, UNKNOWN
        found, fitting = self._constructors(expr.func.dotted, expected)
        space = next((d for d in found if d.space is not None), None)
        if space is not None:
            return self._space(space, expr, expected)
        if not found:
            hint, fix = renaming(expr.func.dotted, expr.func.span, self.registry.names())
            message = f"unknown constructor `{expr.func.dotted}`"
            self.report(C.UNKNOWN_NAME, message, expr.func.span, hint, fix)
            return self._unbound(expr)
        if _misordered(expr):
            # The parser reported the positional arguments after a keyword; binding them anyway would
            # report the same mistake again as repeated, missing and mistyped arguments.
            return self._unbound(expr)
        decl = (fitting or found)[0]
        value = self._apply(decl, expr, expr.args, expr.kwargs, expr.span)
        if not fitting:
            return self._expect(decl.returns, value, expected, expr)
        return decl.returns, value

    def _unbound(self, call: A.Call) -> tuple[Type, object]:
        """A call whose arguments cannot be bound: each is still checked alone, for mistakes of its own."""
        for arg in (*call.args, *(k.value for k in call.kwargs)):
            self.check(arg)
        return ANY, UNKNOWN

    # --- search spaces --------------------------------------------------------------------------------

    def _space(self, decl: Constructor, expr: A.Call, expected: Type) -> tuple[Type, object]:
        """A search space: typed by what it ranges over, which must fit where it stands."""
        if self.spaces is not None:
            self.report(
                C.SPACE_NOT_ALLOWED,
                f"`{decl.name}` is a search space, which cannot stand here: {self.spaces}",
                expr.func.span,
            )
            return self._unbound(expr)
        if _misordered(expr):
            return self._unbound(expr)
        bound = self.bind(decl, expr, expr.args, expr.kwargs)
        if decl.space.choice:
            return self._choice(decl, expr, bound, expected)
        return self._range(decl, expr, bound, expected)

    def _range(self, decl: Constructor, expr: A.Call, bound: dict[str, A.Expr], expected: Type):
        element = decl.returns
        if not is_subtype(element, expected):
            hint = (
                "`IntRange(low, high)` ranges over Ints"
                if is_subtype(INT, expected)
                else "`Choice([...])` chooses among values of any type"
            )
            self.report(
                C.TYPE_MISMATCH,
                f"expected {article(expected)}, found `{decl.name}`, which ranges over {element}s",
                expr.func.span,
                hint,
            )
            return self._unbound(expr)
        built = self.build(decl, bound, expr.span, expr)
        ends = [built.args[p.name] for p in decl.params]
        if UNKNOWN in ends:
            return ANY, UNKNOWN
        low, high, *step = ends
        if not low < high:
            self.report(
                C.OUT_OF_RANGE,
                f"`{decl.name}`'s high end must be above its low end, got {describe(low)} to "
                f"{describe(high)}",
                expr.span,
            )
            return ANY, UNKNOWN
        if step and (high - low) % step[0]:
            self.report(
                C.OUT_OF_RANGE,
                f"`{decl.name}`'s range {low} to {high} is no whole number of steps of {step[0]}",
                expr.span,
                hint="make high - low a multiple of step",
            )
            return ANY, UNKNOWN
        parts = tuple(bound[p.name] for p in decl.params[:2])  # where the low and high ends are written
        return element, Space(decl, (low, high), element, step[0] if step else 1, expr.span, parts)

    def _choice(self, decl: Constructor, expr: A.Call, bound: dict[str, A.Expr], expected: Type):
        written = bound.get(decl.params[0].name)
        if written is None:
            self.missing(decl, decl.params[0], expr.span, "argument")
            return ANY, UNKNOWN
        if not isinstance(written, A.ListExpr) or not written.items:
            self.report(
                C.TYPE_MISMATCH,
                f"`{decl.name}` takes a list of at least one option",
                written.span,
                hint=f"`{decl.name}([a, b])`",
            )
            return ANY, UNKNOWN
        checked = [(item, *self.check(item, expected)) for item in written.items]
        if any(value is UNKNOWN for _, _, value in checked):
            return ANY, UNKNOWN
        kinds = [kind for _, kind, _ in checked if kind != ANY]
        widest = next((k for k in kinds if all(is_subtype(other, k) for other in kinds)), ANY)
        if kinds and widest == ANY:
            first = checked[0]
            item, kind, value = next(
                c for c in checked if not (is_subtype(c[1], first[1]) or is_subtype(first[1], c[1]))
            )
            self.report(
                C.TYPE_MISMATCH,
                f"the options of a `{decl.name}` have one type: `{describe(first[2])}` is "
                f"{article(first[1])}, `{describe(value)}` {article(kind)}",
                item.span,
            )
            return ANY, UNKNOWN
        options = tuple(value for _, _, value in checked)
        return widest, Space(decl, options, widest, 1, expr.span, written.items)

    # --- binding arguments ----------------------------------------------------------------------------

    def positional_form(self, decl: Constructor, count: int) -> tuple[str, ...]:
        """The parameter names that `count` positional arguments bind, in order."""
        forms = decl.forms or (tuple(p.name for p in decl.params),)
        fitting = [f for f in forms if len(f) >= count]
        return min(fitting, key=len) if fitting else max(forms, key=len)

    def bind(
        self,
        decl: Constructor,
        owner: A.Node,
        args: tuple[A.Expr, ...],
        kwargs: tuple[A.Keyword | A.Param | A.Field, ...],
        what: str = "argument",
        label: str | None = None,
    ) -> dict[str, A.Expr]:
        """Match positional and keyword arguments to parameters, reporting every mismatch. `label` names
        the owner in messages (a constructor by default; "a scheme" for fields)."""
        label = label or f"`{decl.name}`"
        form = self.positional_form(decl, len(args))
        bound: dict[str, A.Expr] = {}
        for name, arg in zip(form, args, strict=False):
            bound[name] = arg
        if len(args) > len(form):
            extra = args[len(form)]
            self.report(
                C.ARITY,
                f"`{decl.name}` takes at most {len(form)} positional arguments "
                f"({', '.join(form)}), got {len(args)}",
                extra.span.cover(args[-1].span),
            )
        names = [p.name for p in decl.params]
        for kw in kwargs:
            if decl.param(kw.name) is None:
                hint, fix = renaming(kw.name, kw.name_span, names)
                takes = f"{label} takes " + ", ".join(names) if names else f"{label} takes no {what}s"
                hint = hint or takes
                self.report(C.UNKNOWN_KEYWORD, f"{label} has no {what} `{kw.name}`", kw.name_span, hint, fix)
            elif kw.name in bound:
                self.report(C.REPEATED, f"{what} `{kw.name}` is given twice", kw.name_span)
            else:
                bound[kw.name] = kw.value
        return bound

    def _apply(self, decl: Constructor, owner: A.Node, args, kwargs, span: Span) -> Built:
        bound = self.bind(decl, owner, args, kwargs)
        return self.build(decl, bound, span, owner)

    def build(
        self,
        decl: Constructor,
        bound: dict[str, A.Expr],
        span: Span,
        owner: A.Node,
        what: str = "argument",
        missing_hint: Callable[[Param], str | None] | None = None,
    ) -> Built:
        values: dict[str, object] = {}
        for param in decl.params:
            expr = bound.get(param.name)
            if expr is not None:
                values[param.name] = self.argument(param, expr)
            elif param.required:
                self.missing(decl, param, span, what, missing_hint(param) if missing_hint else None)
                values[param.name] = UNKNOWN
            else:
                values[param.name] = self.default(param)
        return Built(decl, MappingProxyType(values), span)

    def argument(self, param: Param, expr: A.Expr) -> object:
        """One argument's value, checked against its parameter's type and range (UNKNOWN when out of
        range, so that nothing downstream, such as shape inference, computes with it)."""
        kind, value = self.check(expr, param.type)
        if kind != ANY and not self.check_range(param, value, expr):
            return UNKNOWN
        several = _several_abstractions(value) if param.abstractions == "one" else None
        if several is not None:
            found = describe(value)
            trains = "several" if found == several else f"the several of the `{several}` inside it"
            self.report(
                C.TYPE_MISMATCH,
                f"`{param.name}` takes a goal of one abstraction; `{found}` trains on {trains}",
                expr.span,
                hint=f"give `{param.name}` one of the `{several}`'s goals, or put the `{several}` outside",
            )
            return UNKNOWN
        return value

    def missing(
        self,
        decl: Constructor,
        param: Param,
        span: Span,
        what: str,
        hint: str | None = None,
        label: str | None = None,
    ) -> None:
        label = label or f"`{decl.name}`"
        self.report(C.MISSING, f"{label} is missing {what} `{param.name}` ({param.type})", span, hint)

    def default(self, param: Param) -> object:
        """A parameter's default as a value: names of bare constructors become `Built` values."""
        return None if param.default is REQUIRED else self._default_value(param.default, param.type)

    def _default_value(self, value: object, expected: Type) -> object:
        if isinstance(value, tuple):
            item = expected.item if isinstance(expected, ListOf) else ANY
            return tuple(self._default_value(v, item) for v in value)
        if isinstance(value, str) and expected not in (STR, ANY):
            # A default names a constructor (`Adam`, `PGD`): its value is that constructor applied to its
            # own defaults, as the bare name written in a source is, so that the two compare equal.
            _, fitting = self._constructors(value, expected)
            if not fitting:
                return value
            decl = fitting[0]
            return Built(decl, MappingProxyType({p.name: self.default(p) for p in decl.params}))
        return value

    def check_range(self, param: Param, value: object, expr: A.Expr) -> bool:
        """Whether `value` is in the parameter's range; reports it when not. A search space is in range
        when both ends of its range, or each of its options, are: each reported where it is written, if
        that is here (a space from a let is reported at its use)."""
        if isinstance(value, Space):
            places = zip(value.options, value.places(expr), strict=True)
            return all([self.check_range(param, option, place) for option, place in places])
        if isinstance(value, tuple):
            items = expr.items if isinstance(expr, A.ListExpr) else [expr] * len(value)
            fits = [
                self.check_range(param, item, item_expr)
                for item, item_expr in zip(value, items, strict=False)
            ]
            return all(fits)
        if param.choices is not None and isinstance(value, str) and value not in param.choices:
            allowed = ", ".join(f'"{c}"' for c in param.choices)
            self.report(
                C.OUT_OF_RANGE, f"`{param.name}` must be one of {allowed}, got {describe(value)}", expr.span
            )
            return False
        if isinstance(value, Built) and value.decl.returns == SCHEDULE:
            return self._check_schedule_range(param, value, expr)
        if not isinstance(value, int | float) or isinstance(value, bool):
            return True
        outside = _outside(param, value, low_open=param.low_open)
        too_big = param.type == INT and abs(value) > INT_LIMIT
        if outside:
            shown = number_text(value, lambda v: _outside(param, v, low_open=param.low_open))
            self.report(
                C.OUT_OF_RANGE, f"`{param.name}` must be {param.range_text()}, got {shown}", expr.span
            )
        elif too_big:
            self.report(C.OUT_OF_RANGE, f"`{param.name}` is too large ({describe(value)})", expr.span)
        return not (outside or too_big)

    def _check_schedule_range(self, param: Param, schedule: Built, expr: A.Expr) -> bool:
        """A schedule given to a ranged field must stay in the range at every epoch. Its values lie between
        the ones it is built from (a ramp moves between its ends), so those are checked. A strict lower
        bound (`epsilon > 0`) still lets a schedule start at the bound: a ramp up from 0 is the norm."""
        for value in _reached(schedule):
            if _outside(param, value, low_open=False):
                below = param.low is not None and value < param.low
                bound = f">= {describe(param.low)}" if below else f"<= {describe(param.high)}"
                shown = number_text(value, lambda v: _outside(param, v, low_open=False))
                self.report(
                    C.OUT_OF_RANGE,
                    f"`{param.name}` must be {bound} at every epoch; this schedule reaches {shown}",
                    expr.span,
                )
                return False
        return True


def _several_abstractions(value: object) -> str | None:
    """The name of the goal that makes `value` train on several abstractions (a `Mix`, or a goal that hands
    one's parts on, such as `Sub`), or None when it has one."""
    if isinstance(value, Space):  # any option the study may choose
        return next((found for found in map(_several_abstractions, value.options) if found), None)
    if not isinstance(value, Built):
        return None
    if value.decl.several:
        return value.decl.name
    passed = (value.args.get(p.name) for p in value.decl.params if p.abstractions == "passed")
    return next((found for found in map(_several_abstractions, passed) if found), None)


def _misordered(call: A.Call) -> bool:
    """Whether a positional argument follows a keyword argument in the source."""
    first_keyword = min((k.span.start for k in call.kwargs), default=None)
    return first_keyword is not None and any(a.span.start > first_keyword for a in call.args)


def _outside(param: Param, value: float, *, low_open: bool) -> bool:
    """Whether `value` lies outside the parameter's range (`low_open`: the low bound itself is outside)."""
    below = param.low is not None and (value <= param.low if low_open else value < param.low)
    above = param.high is not None and (value >= param.high if param.high_open else value > param.high)
    return below or above


def _reached(value: object) -> list[float]:
    """The numbers a schedule is built from (its `reached` arguments, through nested schedules)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [value]
    if isinstance(value, Space):
        return [v for option in value.options for v in _reached(option)]
    if not isinstance(value, Built) or value.decl.returns != SCHEDULE:
        return []
    found: list[float] = []
    for param in value.decl.params:
        if param.reached or param.type == SCHEDULE:
            found.extend(_reached(value.args.get(param.name)))
    return found
