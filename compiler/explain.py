"""`daic explain CODE`: what a diagnostic code means, why daic reports it, and an example.

The why and the examples come from the golden files of `tests/compiler/golden/` (a golden source's
leading comment says why; its code and what `daic check` prints for it are the example), through the
generated module `explanations`. A generated module rather than the golden files themselves: an installed
daic has no tests folder, and a module ships and imports with the compiler, with no data files to declare.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from daic.compiler.explanations import EXPLANATIONS
from daic.dsl.diagnostics import Code


@dataclass(frozen=True)
class Example:
    """One golden case of a code: why the code is reported there, its source, and daic's output."""

    why: str
    name: str  # the golden source's file name
    first_line: int  # where its code begins, after the comment that says why
    source: str  # its text from that line on
    output: str  # what `daic check NAME` prints for it


def examples(code: Code) -> list[Example]:
    return [Example(*example) for example in EXPLANATIONS.get(code.id, ())]


def explain(code: Code) -> str:
    """The code and its summary; then for each example, why the code is reported, the example's source,
    and what `daic check` prints for it."""
    lines = [f"{code.id}: {code.summary}"]
    for example in examples(code):
        source = example.source.rstrip("\n").split("\n")
        width = len(str(example.first_line + len(source) - 1))
        lines += ["", *textwrap.wrap(example.why, 100), "", f"For example, {example.name}:", ""]
        lines += [f"  {n:>{width}} | {line}".rstrip() for n, line in enumerate(source, example.first_line)]
        lines += ["", f"daic check {example.name} prints:", ""]
        lines += [f"  {line}".rstrip() for line in example.output.rstrip("\n").split("\n")]
    return "\n".join(lines)
