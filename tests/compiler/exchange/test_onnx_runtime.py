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
from tests.paths import ROOT

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


def test_a_newer_file_with_its_weights_beside_it_finds_them_when_opened_again(tmp_path, older_runtime):
    model = onnx.load(str(two_by_two(tmp_path / "plain.onnx")))
    model.ir_version = 14
    path = tmp_path / "outside.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").stat().st_size == 6 * 4  # W and b, float32
    (y,) = onnxruntime_session(path).run(None, {"x": np.array([[1.0, 0.5]], dtype=np.float32)})
    assert older_runtime == [14, 7] and np.array_equal(y, np.array([[3.5, 2.5]], dtype=np.float32))


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


REFUSAL = (
    "[ONNXRuntimeError] : 1 : FAIL : Load model from {path} failed:/onnxruntime_src/onnxruntime/core/graph/"
    "model.cc:202 onnxruntime::Model::Model(onnx::ModelProto&&, const onnxruntime::PathString&, const "
    "onnxruntime::logging::Logger&, const onnxruntime::ModelOptions&) Unsupported model IR version: 14, max "
    "supported IR version: 13"
)


@pytest.fixture
def refusing_runtime(monkeypatch):
    """onnxruntime refusing every file in its own words (the path and the C++ function first)."""

    def refuses(model, *args, **kwargs):
        raise RuntimeError(REFUSAL.format(path=model if isinstance(model, str) else "<bytes>"))

    monkeypatch.setattr(onnxruntime, "InferenceSession", refuses)


def test_import_of_a_file_the_runtime_cannot_run_says_the_runtimes_reason(tmp_path, refusing_runtime):
    result = CliRunner().invoke(main, ["import", str(newer_file(tmp_path / "two.onnx"))])
    assert result.exit_code == 2 and not (tmp_path / "two.net").exists()
    assert "onnxruntime cannot run it (Unsupported model IR version: 14, max supported IR version: 13)" in (
        result.output
    )


def test_a_witness_the_runtime_cannot_check_is_checked_by_the_torch_copy_and_says_so(
    tmp_path, refusing_runtime
):
    net = offset_onnx(tmp_path / "offset.onnx", -(2.0**-10))
    result = CliRunner().invoke(
        main, ["verify", str(net), "--vnnlib", str(point_property(tmp_path / "p.vnnlib", "(<= Y_0 0.0)"))]
    )
    assert result.exit_code == 0 and result.stdout.startswith("sat\n"), result.output
    (row,) = [json.loads(line) for line in (tmp_path / "p.verify.jsonl").read_text().splitlines()]
    assert row["witness"] == {"X": [1.0], "Y": [-(2.0**-10)]} and row["checked"] == "torch float32"


def test_an_export_the_runtime_cannot_run_is_a_message_and_writes_nothing(tmp_path, refusing_runtime):
    import daic

    model = daic.load_network(ROOT / "stdlib" / "nets" / "digits_ffnn.net")
    with pytest.raises(
        daic.DaicError, match=r"onnxruntime cannot run the exported network \(Unsupported model IR"
    ):
        daic.export_onnx(model, (1, 8, 8), tmp_path / "m.onnx")
    assert list(tmp_path.iterdir()) == []  # neither the file nor its staging folder


def test_the_reason_is_what_follows_the_refusing_function_parentheses_and_all():
    from daic.compiler.exchange.onnx_runtime import refusal_reason

    assert refusal_reason(RuntimeError(REFUSAL.format(path="m.onnx"))) == (
        "Unsupported model IR version: 14, max supported IR version: 13"
    )
    graph = (
        "[ONNXRuntimeError] : 1 : FAIL : Load model from m.onnx failed:/src/graph.cc:1 "
        "onnxruntime::Graph::Resolve(const onnxruntime::Graph::ResolveOptions&) "
        "Node (fc) Op (Gemm) [ShapeInferenceError] rank (3) != 2\nmore"
    )
    assert refusal_reason(RuntimeError(graph)) == "Node (fc) Op (Gemm) [ShapeInferenceError] rank (3) != 2"
    assert refusal_reason(ValueError("plain words (kept)")) == "plain words (kept)"
