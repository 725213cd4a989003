"""vnncomp/: the competition's tool interface, run on a small benchmark folder as its scripts run it:
prepare_instance.sh, then run_instance.sh with the version, benchmark, network, property, result file and
timeout; the result file holds the answer, and a `sat` answer's witness satisfies the property in
onnxruntime."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.compiler.commands.test_verify_properties import prop, two_by_two
from tests.paths import ROOT

SCRIPTS = ROOT / "vnncomp"


def script(name: str, *arguments: object) -> subprocess.CompletedProcess:
    env = os.environ | {"DAIC_PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", str(SCRIPTS / name), *map(str, arguments)], capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip


@pytest.fixture
def instances(tmp_path):  # not `benchmark`: pytest-benchmark, where installed, owns that fixture's name
    two_by_two(tmp_path / "two.onnx")
    (tmp_path / "broken.onnx").write_bytes(b"not a network")
    prop(tmp_path / "p1.vnnlib", "1.5")  # unsat
    prop(tmp_path / "p2.vnnlib", "0.5")  # sat
    return tmp_path


def run(instances: Path, onnx: str, vnnlib: str) -> str:
    prepared = script("prepare_instance.sh", "v1", "test", instances / onnx, instances / vnnlib)
    assert prepared.returncode == 0, prepared.stderr
    result = instances / f"{Path(vnnlib).stem}-{Path(onnx).stem}.txt"
    ran = script("run_instance.sh", "v1", "test", instances / onnx, instances / vnnlib, result, 30)
    assert ran.returncode == 0, ran.stderr
    return result.read_text()


def test_run_instance_writes_each_answer_as_the_competition_reads_it(instances):
    from daic.compiler.exchange.onnx_runtime import onnxruntime_session

    assert run(instances, "two.onnx", "p1.vnnlib") == "unsat\n"
    answer = run(instances, "two.onnx", "p2.vnnlib")
    assert answer.startswith("sat\n((X_0 ")
    values = dict(re.findall(r"\((\w+) (\S+?)\)", answer))
    x = np.array([[float(values["X_0"]), float(values["X_1"])]], dtype=np.float32)
    assert x.astype(np.float64).tolist() == [[float(values["X_0"]), float(values["X_1"])]]  # float32 numbers
    assert np.all(x >= -0.5) and np.all(x <= 0.5)
    (y,) = onnxruntime_session(instances / "two.onnx").run(None, {"x": x})[0]
    assert float(y[1]) - float(y[0]) >= 0.5  # exactly as onnxruntime computes it, no tolerance
    assert run(instances, "broken.onnx", "p1.vnnlib") == "error\n"


def test_a_missing_file_is_skipped_by_prepare_and_wrong_arguments_are_refused(instances):
    missing = script("prepare_instance.sh", "v1", "test", instances / "none.onnx", instances / "p1.vnnlib")
    assert missing.returncode == 1 and "none.onnx does not exist" in missing.stderr
    for name in ("install_tool.sh", "prepare_instance.sh", "run_instance.sh"):
        wrong = script(name)
        assert wrong.returncode == 2 and wrong.stderr.startswith("usage:"), name
