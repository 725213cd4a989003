"""Checking a document again with its last report, as the language server does after each edit, gives
what a check from scratch gives, and takes from the last report what the edit did not change."""

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daic.compiler.checking.check import FileReport, check_source
from daic.compiler.checking.elaborate import describe
from daic.compiler.checking.program import Module, Program
from daic.compiler.checking.sources import Source

SEED = """import stdlib.goals as g
let a = 0.5
let b = Mix(Point, Box, a)
let c = Sub(Lin(0, 1, 10, 2), b)
let d = g.Baseline

scheme S {
    data = Digits
    epsilon = 0.1
    goal = c
    epochs = 12
}
"""


IMPORTED: dict[str, Module] = {}  # imported modules, kept between checks as the language server keeps them


def check(text: str, previous: FileReport | None = None) -> FileReport:
    program = Program()
    program.modules.update(IMPORTED)
    report = check_source(Source("mine.dai", "dai", text), program, previous)
    IMPORTED.update({key: m for key, m in program.modules.items() if m is not report.module})
    return report


def outcome(report: FileReport) -> tuple:
    """What a check says: its diagnostics with their places, and each let's type and value."""
    diagnostics = [(d.code.id, d.span, d.message, d.hint) for d in report.diagnostics]
    symbols = {name: (str(s.type), describe(s.value), s.span) for name, s in report.module.symbols.items()}
    return diagnostics, symbols


def test_an_edit_rechecks_the_lets_that_use_what_it_changed():
    first = check(SEED)
    second = check(SEED.replace("let a = 0.5", "let a = 1.5"), previous=first)
    assert outcome(second) == outcome(check(SEED.replace("let a = 0.5", "let a = 1.5")))
    assert [d.message for d in second.diagnostics] == ["`weight` must be in [0, 1], got 1.5"]
    assert second.module.symbols["c"] is not first.module.symbols["c"]  # it uses b, which uses a
    assert second.module.symbols["d"] is first.module.symbols["d"]  # it uses none of them


def test_lets_an_edit_does_not_touch_are_taken_as_they_were_and_moved():
    first = check(SEED)
    symbols = dict(first.module.symbols)
    second = check("let z = 1\n" + SEED, previous=first)
    assert all(second.module.symbols[name] is symbol for name, symbol in symbols.items())
    assert second.module.symbols["b"].span.line == 4  # was 3: the same node, moved with its piece
    assert outcome(second) == outcome(check("let z = 1\n" + SEED))


def test_a_let_that_goes_away_leaves_its_users_unknown():
    first = check(SEED)
    edited = SEED.replace("let a = 0.5", "let q = 0.5")
    second = check(edited, previous=first)
    assert outcome(second) == outcome(check(edited))
    assert "unknown name `a`" in [d.message for d in second.diagnostics]


def references(report: FileReport) -> list[tuple[str, int, str, str]]:
    """What the checker resolved each name to: (the name, where it is written, what it names, its file)."""
    found = []
    for ref in report.module.references:
        target = ref.scheme.node.name if ref.scheme is not None else ref.let.name
        found.append((ref.name.dotted, ref.name.span.start, target, Path(ref.module.path or "").name))
    return sorted(found, key=lambda r: r[1])


def test_the_names_resolved_are_kept_for_the_editor_also_when_lets_are_reused():
    """Hover and go-to-definition read what the checker resolved, not a second resolution: every name
    that stands for a let or a scheme is a reference of the module, and a recheck that reuses lets (moved by
    an edit above them) still has them, at their new places."""
    text = SEED + "\nscheme T extends S {\n    epochs = 1\n}\n"
    first = references(check(text))
    assert [(name, target, where) for name, _, target, where in first] == [
        ("a", "a", "mine.dai"), ("b", "b", "mine.dai"), ("g.Baseline", "Baseline", "goals.dai"),
        ("c", "c", "mine.dai"), ("S", "S", "mine.dai"),
    ]  # fmt: skip
    assert all(text[start : start + len(name)] == name for name, start, _, _ in first)
    moved = references(check("let z = 1\n" + text, previous=check(text)))
    assert moved == [
        (name, start + len("let z = 1\n"), target, where) for name, start, target, where in first
    ]


PIECES = [
    "let a = 2\n",
    "let a = c\n",
    "let e = b\n",
    "x",
    "Boxx",
    "1.5",
    "\n",
    "let b = Box\n",
    "import stdlib.goals\n",
    "g.",
    "(",
    "# a comment\n",
]
edits = st.lists(
    st.tuples(st.floats(0, 1), st.integers(0, 5), st.sampled_from(PIECES)), min_size=1, max_size=3
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(edits, min_size=1, max_size=4))
def test_a_recheck_says_what_a_check_from_scratch_says(steps):
    text = SEED
    last = check(text)
    for changes in steps:
        for where, cut, insert in changes:
            at = int(where * len(text))
            text = text[:at] + insert + text[at + cut :]
        again = check(text, previous=last)
        assert outcome(again) == outcome(check(text))
        last = again
