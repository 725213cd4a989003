"""Golden files: for each diagnostic kind, a small source and the exact text `daic check` prints for it.
Set DAIC_UPDATE_GOLDEN=1 to rewrite the .expected files after a deliberate change (then review the diff)."""

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from daic.compiler.checking.codes import every_code
from daic.compiler.commands.cli import main
from tests.paths import GOLDEN

CASES = sorted(p for p in GOLDEN.iterdir() if p.suffix in (".dai", ".net"))


def refuse_to_read(monkeypatch, name: str) -> None:
    """Make `name` unreadable, as a file without read permission is (which a root user could still read)."""
    read_bytes = Path.read_bytes

    def guarded(self):
        if self.name == name:
            raise PermissionError(13, "Permission denied")
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", guarded)


@pytest.mark.parametrize("source", CASES, ids=lambda p: p.name)
def test_check_output_matches_golden(source, monkeypatch):
    monkeypatch.chdir(GOLDEN)
    if source.name.startswith("E014_"):
        refuse_to_read(monkeypatch, source.name)
    result = CliRunner().invoke(main, ["check", source.name])
    expected_file = source.with_suffix(source.suffix + ".expected")
    if os.environ.get("DAIC_UPDATE_GOLDEN"):
        expected_file.write_text(result.stdout)
    assert result.stdout == expected_file.read_text()
    assert result.exit_code == (1 if "error[" in result.stdout else 0)


def test_every_code_has_a_golden_case():
    covered = {p.name.split("_")[0] for p in CASES}
    assert {c.id for c in every_code()} - covered == set()
