"""Golden files: for each diagnostic kind, a small source and the exact text `daic check` prints for it.
Set DAIC_UPDATE_GOLDEN=1 to rewrite the .expected files after a deliberate change (then review the diff)."""

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from daic.compiler.cli import main

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p for p in GOLDEN.iterdir() if p.suffix in (".dai", ".net"))


@pytest.mark.parametrize("source", CASES, ids=lambda p: p.name)
def test_check_output_matches_golden(source, monkeypatch):
    monkeypatch.chdir(GOLDEN)
    result = CliRunner().invoke(main, ["check", source.name])
    expected_file = source.with_suffix(source.suffix + ".expected")
    if os.environ.get("DAIC_UPDATE_GOLDEN"):
        expected_file.write_text(result.stdout)
    assert result.stdout == expected_file.read_text()
    assert result.exit_code == (1 if "error[" in result.stdout else 0)


def test_every_code_has_a_golden_case():
    from daic.compiler import codes

    covered = {p.name.split("_")[0] for p in CASES}
    assert {c.id for c in codes.ALL} - covered == {"W202"}  # W202 (an empty net) is in tests/data/bad
