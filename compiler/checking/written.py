"""Checked values written back as `.dai` source: what `daic tune` writes for each trial and for the best
(`trial.dai`, `best.dai`), so that the values a study chose are a scheme a person can read, check and run.

A value is written from its meaning, not from the text it came from: lets are written out, arguments that
equal their defaults are left out, and the required leading arguments are positional. Checking the text
gives back the same value (`tests/compiler/checking/test_written.py` holds every shipped scheme to that).
"""

from __future__ import annotations

from collections.abc import Mapping

from daic.compiler.checking.elaborate import Elaborator
from daic.compiler.checking.spaces import Space
from daic.compiler.checking.values import Built
from daic.compiler.constructors import REGISTRY
from daic.dsl.format import escaped, format_dai
from daic.dsl.parser import parse_dai

_ELABORATOR = Elaborator(REGISTRY, [])


def value_text(value: object) -> str:
    """A checked value (a number, string, bool, list or `Built`) as source text."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return f'"{escaped(value)}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    if isinstance(value, Built):
        return _call_text(value)
    if isinstance(value, Space):
        options = ", ".join(value_text(o) for o in value.options)
        step = f", {value.step}" if value.step != 1 else ""
        return f"{value.decl.name}([{options}])" if value.is_choice else f"{value.decl.name}({options}{step})"
    raise TypeError(f"{value!r} has no source text")


def _call_text(value: Built) -> str:
    decl = value.decl
    # An argument equal to its default is left out. (A default goal, such as SmallBox's `PGD`, is the bare
    # constructor; `PGD(8, 0.5)` written out is a different value to the checker, so it stays.)
    given = [p for p in decl.params if p.name in value.args and value.args[p.name] != _ELABORATOR.default(p)]
    if not given:
        return decl.name
    # The required parameters that lead the declaration go by position where the checker binds them so.
    leading: list[str] = []
    for p in decl.params:
        if not p.required:
            break
        leading.append(p.name)
    while leading and _ELABORATOR.positional_form(decl, len(leading))[: len(leading)] != tuple(leading):
        leading.pop()
    parts = []
    for p in given:
        text = value_text(value.args[p.name])
        parts.append(text if p.name in leading else f"{p.name}={text}")
    return f"{decl.name}({', '.join(parts)})"


def scheme_text(name: str, fields: Mapping[str, object], comment: str = "") -> str:
    """A `scheme` block of the given field values, formatted, after `comment` (lines without `#`)."""
    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    lines.append(f"scheme {name} {{")
    lines.extend(f"    {field} = {value_text(value)}" for field, value in fields.items())
    lines.append("}")
    parsed = parse_dai("\n".join(lines) + "\n")
    if parsed.diagnostics:  # a value the language cannot write: a defect here, not the user's
        raise ValueError(f"scheme {name} written back does not parse: {parsed.diagnostics[0].message}")
    return format_dai(parsed.tree)
