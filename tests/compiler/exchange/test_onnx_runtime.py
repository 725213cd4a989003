"""onnxruntime sessions for the checks of import, export and witnesses: a file written by an onnx newer than
the onnxruntime installed (the GPU machine's onnx 1.23 and onnxruntime 1.30, which refused IR version 14 in
22 tests there) is still run and checked, at the least IR version its operator sets need."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from daic.compiler.commands.cli import main
from daic.compiler.exchange.onnx_runtime import onnxruntime_session
from tests.compiler.commands.test_verify_properties import offset_onnx, point_property, two_by_two

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
torch.set_num_threads(1)

OLDEST_READ = 13  # the IR version onnxruntime 1.30 reads up to


def ir_version(model: str | bytes) -> int:
    return (onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(model)).ir_version


@pytest.fixture
def older_runtime(monkeypatch):
    """onnxruntime as 1.30 is: it refuses a file of an IR version above 13, in its own words. Records the
    IR versions of the files it was given."""
    real, given = onnxruntime.InferenceSession, []

    def session(model, *args, **kwargs):
        given.append(ir_version(model))
        if given[-1] > OLDEST_READ:
            raise RuntimeError(
                "[ONNXRuntimeError] : 1 : FAIL : Load model failed: Unsupported model IR version:"
                f" {given[-1]}, max supported IR version: {OLDEST_READ}"
            )
        return real(model, *args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", session)
    return given


def newer_file(path: Path) -> Path:
    """The two-by-two network saved at IR version 14, as onnx 1.23's helpers write it (opset 13: IR 7)."""
    model = onnx.load(str(two_by_two(path)))
    model.ir_version = 14
    onnx.save(model, str(path))
    return path


def test_a_file_of_a_newer_ir_version_runs_at_the_least_one_its_opsets_need(tmp_path, older_runtime):
    path = newer_file(tmp_path / "two.onnx")
    session = onnxruntime_session(path, threads=1)
    assert older_runtime == [14, 7]  # refused as written, then opened at opset 13's least IR version
    x = np.array([[0.25, -0.5], [-3.0, 1.0]], dtype=np.float32)
    (y,) = session.run(None, {"x": x})
    assert np.array_equal(y, np.maximum(x @ np.array([[1, 1], [1, -1]], dtype=np.float32).T + 2, 0))
    assert ir_version(str(path)) == 14  # the file itself is left as it was


def test_a_file_the_runtime_refuses_at_every_version_is_refused_in_its_first_words(tmp_path, monkeypatch):
    path = newer_file(tmp_path / "two.onnx")

    def refuses(model, *args, **kwargs):
        raise RuntimeError(f"refused IR version {ir_version(model)}")

    monkeypatch.setattr(onnxruntime, "InferenceSession", refuses)
    with pytest.raises(RuntimeError, match=r"^refused IR version 14$"):
        onnxruntime_session(path)


def test_without_onnxruntime_there_is_no_session(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    assert onnxruntime_session(two_by_two(tmp_path / "two.onnx")) is None


def test_import_compares_a_newer_file_with_the_older_runtime(tmp_path, older_runtime):
    result = CliRunner().invoke(main, ["import", str(newer_file(tmp_path / "two.onnx"))])
    assert result.exit_code == 0, result.output
    assert re.search(r"onnxruntime matches it within \d", result.output), result.output
    assert older_runtime == [14, 7]


def test_a_witness_of_a_newer_file_is_checked_by_the_older_runtime(tmp_path, older_runtime):
    net = offset_onnx(tmp_path / "offset.onnx", -(2.0**-10))
    model = onnx.load(str(net))
    model.ir_version = 14
    onnx.save(model, str(net))
    result = CliRunner().invoke(
        main, ["verify", str(net), "--vnnlib", str(point_property(tmp_path / "p.vnnlib", "(<= Y_0 0.0)"))]
    )
    assert result.exit_code == 0 and result.stdout.startswith("sat\n"), result.output
    (row,) = [json.loads(line) for line in (tmp_path / "p.verify.jsonl").read_text().splitlines()]
    assert row["witness"] == {"X": [1.0], "Y": [-(2.0**-10)]} and row["checked"] == "onnxruntime float32"
    assert 7 in older_runtime and 14 in older_runtime
