"""Checked values written back as source: every scheme the project ships, written from its values, checks
to the same values (the guarantee behind each trial's `trial-NNN.dai` and a study's `best.dai`)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from daic.compiler.checking.program import Program
from daic.compiler.checking.written import scheme_text, value_text
from tests.paths import ROOT

SOURCES = sorted(
    [*Path(str(resources.files("daic.stdlib"))).glob("*.dai"), *(ROOT / "examples").glob("*.dai")]
)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_every_shipped_scheme_written_back_checks_to_the_same_values(path):
    module = Program(check_nets=False).load(path)
    for name, info in module.schemes.items():
        fields = {k: v for k, v in info.built.args.items() if k in info.explicit}
        again = Program(check_nets=False).check_text(scheme_text(name, fields), None)
        assert [d.message for d in again.diagnostics if d.is_error] == [], name
        assert {k: repr(again.schemes[name].built.args[k]) for k in fields} == {
            k: repr(v) for k, v in fields.items()
        }


def test_values_are_written_as_a_person_would():
    module = Program(check_nets=False).check_text(
        'let g = Mix(Point, SmallBox(0.4, PGD(8, 0.5)), Lin(0, 0.7, 20, 1))\nlet s = "a\\\\b"\n', None
    )
    # Required leading arguments by position; arguments equal to their defaults left out.
    assert value_text(module.symbols["g"].value) == "Mix(Point, SmallBox(0.4), Lin(0, 0.7, 20, hold=1))"
    assert value_text(module.symbols["s"].value) == '"a\\\\b"'
