"""`daic init`: a starter network and scheme that check clean and train on the embedded digits, written
without ever overwriting a file."""

import json

import pytest
from click.testing import CliRunner

from daic.compiler.commands.cli import main


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_init_writes_a_starter_that_checks_clean(tmp_path):
    folder = tmp_path / "project"
    result = run("init", folder)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote {folder / 'model.net'}\nwrote {folder / 'train.dai'}\n"
    assert sorted(p.name for p in folder.iterdir()) == ["model.net", "train.dai"]
    checked = run("check", folder)
    assert (checked.exit_code, checked.stdout, checked.stderr) == (0, "", "checked 2 files: no problems\n")
    assert run("fmt", "--check", folder).exit_code == 0  # written in canonical form


def test_init_overwrites_nothing(tmp_path):
    (tmp_path / "train.dai").write_text("let mine = 1\n")
    result = run("init", tmp_path)
    assert result.exit_code == 2
    assert result.stderr == f"daic: {tmp_path / 'train.dai'} already exists; init overwrites nothing\n"
    # Nothing is written, not even the file that was missing.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.dai"]
    assert (tmp_path / "train.dai").read_text() == "let mine = 1\n"
    (tmp_path / "file").write_text("")
    assert run("init", tmp_path / "file").exit_code == 2


@pytest.mark.slow
def test_the_starter_trains_an_epoch_on_the_embedded_digits(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run("init", "project").exit_code == 0
    result = run("run", "project/train.dai", "--epochs", "1", "--device", "cpu", "--out", "out")
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["epochs"] == 1
    assert summary["Acc"] > 50  # one epoch on the digits, from the starter's seed
