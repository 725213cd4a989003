"""The default thread count and waiting of a command, chosen before PyTorch starts: a thread per core the
load leaves free, waiting passively; the user's choice (OMP_NUM_THREADS, --threads) kept, and shared out
among the workers of --nproc-per-node only when it was daic's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from daic.compiler.commands import threads


@pytest.mark.parametrize(("busy", "free"), [(0.0, 4), (0.4, 4), (1.0, 3), (2.6, 1), (3.9, 1), (9.0, 1)])
def test_the_free_cores_are_those_other_work_leaves(monkeypatch, busy, free):
    monkeypatch.setattr(threads, "cores", lambda: 4)
    assert threads.free_cores(busy) == free


def test_a_busy_process_is_counted():
    """A process that spins for the window is about one busy core (as long as a core is free for it)."""
    quiet = threads.busy_cores(0.3)
    spinning = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # its start is past
        busy = threads.busy_cores(0.3)
    finally:
        spinning.kill()
    assert 0.0 <= quiet <= threads.cores() and busy >= 0.7


def _chosen_in_a_fresh_process(**env: str) -> list[str]:
    """OMP_NUM_THREADS and OMP_WAIT_POLICY after `choose_default` in a process without torch, and torch's
    thread count once it starts there."""
    script = (
        "import os\n"
        "from daic.compiler.commands.threads import choose_default\n"
        "choose_default()\n"
        "import torch\n"
        "e = os.environ\n"
        "print(e.get('OMP_NUM_THREADS'), e.get('OMP_WAIT_POLICY'), torch.get_num_threads())\n"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    done = subprocess.run([sys.executable, "-c", script], env={**base, **env}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_command_takes_the_free_cores_and_waits_passively():
    count, waiting, torch_threads = _chosen_in_a_fresh_process()
    assert 1 <= int(count) <= threads.cores()
    assert waiting == "PASSIVE"
    assert int(torch_threads) == int(count)  # PyTorch took the count it was given before it started


def test_the_users_choice_is_kept():
    assert _chosen_in_a_fresh_process(OMP_NUM_THREADS="1") == ["1", "None", "1"]
    assert _chosen_in_a_fresh_process(OMP_WAIT_POLICY="ACTIVE")[1] == "ACTIVE"


def test_a_process_that_already_runs_torch_keeps_its_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    threads.choose_default()  # pytest's process has torch: nothing changes
    assert "OMP_NUM_THREADS" not in os.environ


def test_workers_share_the_free_cores_unless_the_user_chose(monkeypatch):
    monkeypatch.setattr(threads, "free_cores", lambda busy=None: 4)
    monkeypatch.setattr(threads, "_chosen_here", True)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    threads.share_out(3)
    assert os.environ["OMP_NUM_THREADS"] == "1"
    monkeypatch.setattr(threads, "_chosen_here", False)
    monkeypatch.setenv("OMP_NUM_THREADS", "8")  # the user's: each worker takes it
    threads.share_out(2)
    assert os.environ["OMP_NUM_THREADS"] == "8"


@pytest.mark.slow  # 10-15 s end to end (-m slow runs it); quicker tests of the same parts stay
def test_daic_run_starts_pytorch_with_the_threads_the_busy_machine_leaves(tmp_path):
    """Beside a process that keeps a core busy, `daic run` takes at most the other cores: chosen before
    PyTorch started (after, PyTorch would have taken one thread per core)."""
    from tests.compiler.commands.test_run import DIGITS_SCHEME, STDLIB

    scheme = tmp_path / "tiny.dai"
    scheme.write_text(DIGITS_SCHEME % (STDLIB / "nets" / "digits_ffnn.net"))
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    spinning = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        command = [
            sys.executable,
            "-m",
            "daic",
            "run",
            str(scheme),
            "--out",
            str(tmp_path / "r"),
            "--epochs",
            "1",
        ]
        done = subprocess.run(command, env=base, capture_output=True, text=True, timeout=300)
    finally:
        spinning.kill()
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "r" / "run.json").read_text())
    assert 1 <= record["threads"] <= max(1, threads.cores() - 1)
