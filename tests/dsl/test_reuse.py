"""Parsing again with the pieces of the last parse (what the language server does after an edit) gives
the tree, spans, comments and diagnostics of a parse from scratch."""

import dataclasses
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from daic.dsl import ast as A
from daic.dsl.parser import parse

DATA = Path(__file__).parents[1] / "data"
SEEDS = [
    ((DATA / "listings" / "resnettiny_fewcombo.net").read_text(), "net"),
    ((Path(__file__).parents[2] / "stdlib" / "goals.dai").read_text(), "dai"),
    ("let a = 1  # one\rlet b = Mix(Point, Box, a)\r\n\nscheme S extends B {\n  epochs = 3\n}\n", "dai"),
]
PIECES = [
    "\n",
    "\r",
    "let x = 1\n",
    "ReLU\n",
    "    ",
    "(",
    ")",
    "# c",
    "Linear out=10\n",
    '"',
    "\ufeff",
    "ab",
]


def layout(node) -> list:
    """Every node's kind, span and fields, depth first: what two parses must agree on."""
    found = []
    if isinstance(node, A.Node):
        found.append((type(node).__name__, node.span))
        for f in dataclasses.fields(node):
            found.extend(layout(getattr(node, f.name)))
    elif isinstance(node, tuple):
        for item in node:
            found.extend(layout(item))
    else:
        found.append(node)
    return found


def summary(result) -> tuple:
    return (
        layout(result.tree),
        [(d.code.id, d.span, d.message, d.hint) for d in result.diagnostics],
    )


edits = st.lists(
    st.tuples(st.floats(0, 1), st.integers(0, 6), st.sampled_from(PIECES)), min_size=1, max_size=4
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.sampled_from(range(len(SEEDS))), steps=st.lists(edits, min_size=1, max_size=3))
# A byte-order mark typed at the start, then a line break before it: the same line text, no longer skipped.
@example(seed=0, steps=[[(0.0, 0, "\ufeff")], [(0.0, 0, "\n")]])
def test_a_parse_that_reuses_pieces_equals_a_parse_from_scratch(seed, steps):
    text, language = SEEDS[seed]
    last = parse(text, language)
    for changes in steps:
        for where, cut, insert in changes:
            at = int(where * len(text))
            text = text[:at] + insert + text[at + cut :]
        again = parse(text, language, reuse=last.pieces)
        assert summary(again) == summary(parse(text, language))
        last = again


def test_an_unchanged_piece_is_not_parsed_again():
    first = parse("let a = Mix(Point, Box, 0.5)\nlet b = 1\n", "dai")
    moved = parse("let c = 2\n\nlet a = Mix(Point, Box, 0.5)\nlet b = 1\n", "dai", reuse=first.pieces)
    assert moved.tree.statements[1] is first.tree.statements[0]  # the same node, moved
    assert moved.tree.statements[1].span.line == 3
    assert moved.tree.statements[1].value.args[1].span.start == len("let c = 2\n\nlet a = Mix(Point, ")
