"""Expressions of the `.dai` language given outside a file: command-line options such as
`daic verify --domain "AlphaCROWN(steps=50)"`, checked like any expression against the type expected."""

from __future__ import annotations

import re

from daic.compiler.checking.elaborate import Elaborator
from daic.compiler.checking.values import UNKNOWN
from daic.compiler.constructors import REGISTRY
from daic.compiler.types import Type
from daic.dsl import ast as A
from daic.dsl.diagnostics import Diagnostic
from daic.dsl.parser import parse_dai


class ExpressionError(Exception):
    """The text is not an expression of the expected type; the message says why, one problem a line."""


def check_expression(text: str, expected: Type) -> object:
    """The checked value of ``text`` (a `Built` constructor application, a number, ...). A bare name is
    matched to the registry's constructors of the expected type without regard to case (``hbox`` is
    ``HBox``)."""
    text = _canonical_name(text.strip(), expected)
    # The expression on a line of its own: its columns are the text's own.
    parsed = parse_dai(f"let value =\n{text}\n")
    problems: list[Diagnostic] = list(parsed.diagnostics)
    statements = parsed.tree.statements if parsed.tree is not None else ()
    if problems or len(statements) != 1 or not isinstance(statements[0], A.Let):
        raise ExpressionError(_describe(problems) or f"{text!r} is not one expression")
    _, value = Elaborator(REGISTRY, problems).check(statements[0].value, expected)
    if problems or value is UNKNOWN:
        raise ExpressionError(_describe(problems) or f"{text!r} is not {expected}")
    return value


def _canonical_name(text: str, expected: Type) -> str:
    """The text with its leading name (a bare name, or a call's) spelled as the registry declares it."""
    match = re.match(r"([A-Za-z_]\w*)(.*)", text, re.DOTALL)
    if match is None:
        return text
    declared = [d for d in REGISTRY.declarations if d.returns == expected]
    names = {n.lower(): n for d in declared for n in (d.name, *d.aliases)}
    return names.get(match.group(1).lower(), match.group(1)) + match.group(2)


def _describe(problems: list[Diagnostic]) -> str:
    """The problems as one line, positions given as columns of the text (it sits on line 2)."""

    def line(d: Diagnostic) -> str:
        text = f"column {d.span.column}: {d.message}" + (f" ({d.hint})" if d.hint else "")
        return re.sub(r"\b2:(\d+)\b", r"column \1", text.replace("end of the file", "end of the text"))

    return "; ".join(line(d) for d in problems)
