"""The GPU run's script, tried on the CPU end to end (`bench/gpu.sh --device cpu --tiny`): its install step,
every section within the budget, and its files, so that the first GPU run meets no Python error."""

from __future__ import annotations

import gzip
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("cli", "tests", "search", "profile", "bench", "paper", "cnn7")  # every section of bench/gpu.py


def mnist_files(root: Path, counts=(64, 16)) -> None:
    rng = np.random.default_rng(0)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split, n in zip(("train", "t10k"), counts, strict=True):
        for kind, array in (
            ("images-idx3", rng.integers(0, 256, (n, 28, 28))),
            ("labels-idx1", rng.integers(0, 10, n)),
        ):
            header = struct.pack(">I", 0x800 + array.ndim) + b"".join(
                struct.pack(">I", d) for d in array.shape
            )
            with gzip.open(raw / f"{split}-{kind}-ubyte.gz", "wb") as handle:
                handle.write(header + array.astype(np.uint8).tobytes())


@pytest.mark.slow
def test_the_gpu_script_runs_every_section_on_the_cpu(tmp_path):
    mnist_files(tmp_path / "data")
    searched = tmp_path / "searched"  # the search section's ConvSmall, one epoch on the random images
    train = [sys.executable, "-m", "daic", "run", "examples/mnist_methods.dai", "--scheme", "IBP_01"]
    train += ["--net", "examples/mnist_convsmall.net", "--data", str(tmp_path / "data"), "--epochs", "1"]
    train += ["--out", str(searched), "--device", "cpu", "--threads", "1"]
    trained = subprocess.run(train, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    out = tmp_path / "out"
    command = ["bash", "bench/gpu.sh", "--python", sys.executable, "--site", str(tmp_path / "site"), "--"]
    command += ["--device", "cpu", "--tiny", "--budget", "1500", "--threads", "1", "--bab", "1"]
    command += ["--sections", ",".join(SECTIONS), "--data", str(tmp_path / "data")]
    command += ["--runs", str(tmp_path / "runs"), "--search-weights", str(searched / "checkpoint.pt")]
    environment = {**os.environ, "OUT": str(out)}  # where the script's files go, as on the GPU machine
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800, env=environment)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = (out / "summary.md").read_text()
    for section in SECTIONS:
        assert f"| {section} | done |" in summary, summary
    assert "run {" in summary and re.search(r'verify \{"images": 60, "verified": \d+', summary), summary
    assert re.search(r"alone [\d.]+ /s \(\d+; rounds [\d.None]+ /s\); together", summary), summary
    assert done.stdout.rstrip().endswith(summary.rstrip().splitlines()[-1])  # the table is printed last
    assert "### Training step" in (out / "bench.md").read_text()
    assert re.search(r"resnettiny_baseline \(50 a batch, 1 steps, [\d.]+ ms a step", summary), summary
    assert "passed" in (out / "tests.log").read_text()
    runs = json.loads((out / "cnn7.json").read_text())
    assert [r["scheme"] for r in runs] == ["IBP_01"]
    assert sum(runs[0]["verify"][k] for k in ("verified", "falsified", "unknown", "error")) == 2
    assert "ResNet-Tiny Baseline" in summary and "HBox" in summary
    assert (out / "gpu.log").read_text().count("gpu run: torch") == 1


def test_every_cnn7_run_of_the_gpu_script_checks_with_its_network():
    """The cnn7 section's scheme and network pairs, planned as `daic run --scheme S --net N` plans them:
    a missing network or a scheme that does not fit it would cost a GPU period to find."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from gpu import CNN7_SCHEMES
    finally:
        sys.path.remove(str(ROOT / "bench"))
    from daic.compiler.jobs.run import plan_run

    assert len(CNN7_SCHEMES) == 16
    for scheme, net in CNN7_SCHEMES.items():
        plan = plan_run(str(ROOT / "examples" / "mnist_methods.dai"), scheme, str(ROOT / net))
        assert plan.network.params == 13_259_338, (scheme, plan.network.params)  # CNN7, TAPS adds none
