"""Bad input to `daic verify` and `daic export`, each a clear message or a right answer: radii that are no
radius, a record an earlier failure left, a network whose output is not a number, and an export of the
network into the folder of its own properties."""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner

from daic.compiler.commands.cli import main
from tests.compiler.commands.test_verify_command import NET, rows, verify, weights  # noqa: F401 - the module's fixture


def changed_checkpoint(weights, tmp_path, change) -> str:  # noqa: F811
    state = torch.load(weights, weights_only=False)
    change(state)
    path = tmp_path / "changed.pt"
    torch.save(state, path)
    return str(path)


@pytest.mark.parametrize("eps", ["nan", "inf"])
def test_a_radius_that_is_no_number_is_refused_and_leaves_nothing(weights, tmp_path, eps):  # noqa: F811
    out = tmp_path / "r.jsonl"
    result = verify(weights, out, "--eps", eps)
    assert result.exit_code == 2
    assert f"daic: --eps {float(eps)!r} is not a radius (a finite number above 0)" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("eps", ["-1", "0", "nan"])
def test_export_refuses_a_radius_in_the_words_verify_uses_and_writes_nothing(weights, tmp_path, eps):  # noqa: F811
    command = [
        "export",
        str(NET),
        "--weights",
        str(weights),
        "--vnnlib",
        str(tmp_path / "props"),
        f"--eps={eps}",
    ]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 2
    assert result.stderr == f"daic: --eps {float(eps)!r} is not a radius (a finite number above 0)\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("recorded", [math.nan, -0.1, math.inf])
def test_a_checkpoint_whose_epsilon_is_no_radius_asks_for_eps(weights, tmp_path, recorded):  # noqa: F811
    broken = changed_checkpoint(weights, tmp_path, lambda state: state.update(epsilon=recorded))
    out = tmp_path / "r.jsonl"
    result = verify(broken, out)
    assert result.exit_code == 2
    assert (
        f"the checkpoint's epsilon, {recorded!r}, is not a radius (a finite number above 0): pass --eps"
        in (result.stderr)
    )
    assert not out.exists() and not out.with_name("r.jsonl.json").exists()
    result = verify(broken, out, "--eps", "0.05")
    assert result.exit_code == 0, result.output


def test_a_record_with_no_image_in_it_does_not_block_the_next_certification(weights, tmp_path):  # noqa: F811
    out = tmp_path / "r.jsonl"
    out.with_name("r.jsonl.json").write_text('{"epsilon": 0.3}\n')  # what a failure before any image left
    result = verify(weights, out)
    assert result.exit_code == 0, result.output
    assert len(rows(out)) == 150


def test_a_network_whose_output_is_nan_is_an_error_not_accurate(weights, tmp_path):  # noqa: F811
    def poison(state):
        bias = next(key for key in state["model"] if key.endswith("bias"))
        state["model"][bias] = torch.full_like(state["model"][bias], math.nan)

    broken = changed_checkpoint(weights, tmp_path, poison)
    out = tmp_path / "r.jsonl"
    result = verify(broken, out, "--domain", "BranchAndBound(timeout=30)", "--format", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["error"] == 150 and summary["verified"] == summary["falsified"] == 0
    assert summary["accuracy_percent"] == 0 and summary["attack_accuracy_percent"] == 0
    # Decided by the network's own output, before the attack and any domain (the search never ran).
    assert {(row["domain"], row["message"]) for row in rows(out)} == {
        ("clean", "the network's output at the image is not a number (NaN): nothing to certify")
    }


def test_export_writes_the_network_into_the_folder_of_its_properties(weights, tmp_path):  # noqa: F811
    folder = tmp_path / "props"
    command = ["export", str(NET), "--weights", str(weights), "--limit", "3"]
    command += ["--onnx", str(folder / "m.onnx"), "--vnnlib", str(folder)]
    for _ in range(2):  # and again, over its own files
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 0, result.output
    assert sorted(p.name for p in folder.iterdir()) == [
        "instances.csv", "m.onnx", "prop_0.vnnlib", "prop_1.vnnlib", "prop_2.vnnlib"
    ]  # fmt: skip
    (folder / "notes.txt").write_text("mine")
    other = ["export", str(NET), "--weights", str(weights), "--limit", "3"]
    result = CliRunner().invoke(main, [*other, "--onnx", str(folder / "n.onnx"), "--vnnlib", str(folder)])
    assert result.exit_code == 2 and "holds files an export did not write (" in result.stderr
    assert "notes.txt" in result.stderr and not (folder / "n.onnx").exists()  # refused before writing
