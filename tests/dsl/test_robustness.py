"""Bad input never raises: a corpus of broken files and a mutation test over the paper's listings."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daic.compiler.checking.check import check_source
from daic.compiler.checking.sources import decode
from daic.dsl.format import format_tree
from daic.dsl.parser import parse_dai, parse_net

DATA = Path(__file__).parents[1] / "data"
BAD = sorted((DATA / "bad").iterdir())
LISTINGS = sorted((DATA / "listings").glob("*.net"))
SEEDS = [p.read_text() for p in LISTINGS] + [
    (Path(__file__).parents[2] / "stdlib" / "goals.dai").read_text(),
    "scheme S extends B {\n  goal = Mix(Point, Box, 0.5)\n  epsilon = 8/255\n  test = [Verify(HBox)]\n}\n",
]

# What each corpus file must be reported as: (code, line, column) of a diagnostic, or None if clean.
EXPECTED = {
    "bad_escape.dai": ("E013", 1, 23),
    "bad_indent.net": ("E006", 3, 1),
    "binary.net": ("E001", 3, 1),
    "bom_crlf.net": None,
    "deep_blocks.net": ("E008", 67, 1),
    "empty.dai": None,
    "empty.net": ("W202", 1, 1),
    "huge_numbers.dai": ("E010", 1, 11),
    "latin1.dai": ("E001", 1, 13),
    "long_chain.dai": ("E008", 1, 811),
    "minus_chain.dai": ("E008", 1, 209),
    "mixed_tabs.net": ("E007", 4, 1),
    "nested.dai": ("E008", 1, 73),
    "nested.net": ("E008", 1, 76),
    "several_errors.dai": ("E003", 3, 17),
    "stray_expression.dai": ("E003", 1, 1),
    "truncated.dai": ("E005", 2, 66),
    "truncated.net": ("E005", 1, 35),
    "unknown_chars.net": ("E002", 1, 19),
    "unterminated_string.dai": ("E012", 1, 9),
}


def test_corpus_is_complete():
    assert sorted(EXPECTED) == [p.name for p in BAD]


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_file_gives_a_clean_diagnostic(path):
    report = check_source(decode(path.read_bytes(), str(path), path.suffix[1:]))
    expected = EXPECTED[path.name]
    if expected is None:
        assert report.diagnostics == ()
    else:
        assert expected in [(d.code.id, d.span.line, d.span.column) for d in report.diagnostics]
        assert all(d.path == str(path) for d in report.diagnostics)


@pytest.mark.parametrize(
    "expression",
    [
        "1 + " * 200 + "1",
        "-" * 200 + "1",
        "- - - (" * 50 + "1" + ")" * 50,
        "Mix(Point, Box, 1 - - " * 60 + "1" + ")" * 60,
    ],
    ids=["sum", "negations", "brackets", "calls"],
)
def test_expressions_up_to_the_limits_check_and_format(expression):
    text = f"let x = {expression}\n"
    report = check_source(decode(text.encode(), "deep.dai", "dai"))
    assert [d for d in report.diagnostics if d.code.id == "E008"] == []
    formatted = format_tree(report.parsed.tree)
    assert format_tree(parse_dai(formatted).tree) == formatted


def _assert_sane(result, text):
    for d in result.diagnostics:
        assert 0 <= d.span.start <= d.span.end <= len(text)
        assert d.span.line >= 1 and d.span.column >= 1
        assert d.message


mutation = st.tuples(
    st.sampled_from(["delete", "insert", "truncate", "duplicate"]),
    st.floats(0, 1),
    st.integers(1, 40),
    st.text(st.sampled_from(list("()[]{}=,.#\"'%<>\t \n-+*/0123456789eEaZ_€\x00")), min_size=1, max_size=6),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(SEEDS))), st.lists(mutation, min_size=1, max_size=4))
def test_mutated_sources_never_raise(seed, mutations):
    text = SEEDS[seed]
    for kind, where, length, insert in mutations:
        at = int(where * len(text))
        if kind == "delete":
            text = text[:at] + text[at + length :]
        elif kind == "insert":
            text = text[:at] + insert + text[at:]
        elif kind == "truncate":
            text = text[:at]
        else:
            text = text[:at] + text[at : at + length] * 2 + text[at + length :]
    for parse in (parse_net, parse_dai):
        _assert_sane(parse(text), text)
