"""A run killed at any point of its start-up or of an epoch (SIGKILL or SIGTERM, in a real process) leaves a
folder that the same command, or --resume, continues to the numbers of an uninterrupted run.

The run stops itself at a named point (`DAIC_STOP_AT`, compiler/jobs/run/stops.py), so that every gap
between two writes is hit exactly; then the folder is continued both ways, from two copies of it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from daic.compiler.commands.cli import main
from daic.compiler.jobs.run.stops import STOP_POINTS, STOP_VARIABLE
from tests.compiler.commands.test_run import DIGITS_SCHEME, STDLIB

# Where a kill leaves a folder whose first epoch is saved: only --resume continues it. (SIGTERM while a
# checkpoint is written waits until it is in place, so there it leaves a saved epoch too.)
CHECKPOINTED = {"epoch-saved", "reported", "resumed"}
FAST = {("recorded", "SIGKILL")}  # the gap the first report of this fell into; the others are slow


@pytest.fixture(scope="module")
def scheme(tmp_path_factory):
    path = tmp_path_factory.mktemp("sources") / "tiny.dai"
    path.write_text(DIGITS_SCHEME % (STDLIB / "nets" / "digits_ffnn.net"))
    return path


@pytest.fixture(scope="module")
def uninterrupted(scheme, tmp_path_factory):
    out = tmp_path_factory.mktemp("whole") / "run"
    result = CliRunner().invoke(main, ["run", str(scheme), "--out", str(out), "--epochs", "2"])
    assert result.exit_code == 0, result.output
    return out


def daic_run(scheme: Path, out: Path, *options: str, stop: str | None = None):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop(STOP_VARIABLE, None)
    if stop is not None:
        env[STOP_VARIABLE] = stop
    command = [sys.executable, "-m", "daic", "run", str(scheme), "--out", str(out), "--epochs", "2", *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


def continue_run(scheme: Path, out: Path, *options: str):
    return CliRunner().invoke(main, ["run", str(scheme), "--out", str(out), "--epochs", "2", *options])


def assert_finished_like(out: Path, whole: Path) -> None:
    assert [json.loads(r)["epoch"] for r in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert "finished" in json.loads((out / "run.json").read_text())
    assert json.loads((out / "summary.json").read_text())["epochs"] == 2
    assert (out / "tiny.dai").is_file() and (out / "digits_ffnn.net").is_file()
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    a = torch.load(out / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(whole / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


CASES = [
    pytest.param(point, signal, marks=[] if (point, signal) in FAST else [pytest.mark.slow])
    for point in STOP_POINTS
    for signal in ("SIGKILL", "SIGTERM")
]


@pytest.mark.parametrize(("point", "signal"), CASES)
def test_a_kill_at_any_point_leaves_a_folder_that_continues(scheme, uninterrupted, tmp_path, point, signal):
    out = tmp_path / "run"
    if point == "resumed":
        assert daic_run(scheme, out, "--epochs", "1").returncode == 0  # the last --epochs counts
        killed = daic_run(scheme, out, "--resume", stop=f"{point}:{signal}")
    else:
        killed = daic_run(scheme, out, stop=f"{point}:{signal}")
    saved = point in CHECKPOINTED or (point, signal) == ("checkpoint-written", "SIGTERM")
    if signal == "SIGKILL":
        assert killed.returncode == -9, killed.stderr
    else:
        assert killed.returncode == 130, killed.stderr
        next_step = "resume with --resume" if saved else "run the same command again"
        assert next_step in killed.stderr and "Traceback" not in killed.stderr

    again, resumed = tmp_path / "again", tmp_path / "resumed"
    if out.exists():
        shutil.copytree(out, again)
        shutil.copytree(out, resumed)

    result = continue_run(scheme, resumed, "--resume")
    assert result.exit_code == 0, result.output
    assert_finished_like(resumed, uninterrupted)

    result = continue_run(scheme, again)
    if saved:
        assert result.exit_code == 2
        assert "already holds a run: pass --resume to continue it" in result.stderr
    else:
        assert result.exit_code == 0, result.output
        assert_finished_like(again, uninterrupted)
