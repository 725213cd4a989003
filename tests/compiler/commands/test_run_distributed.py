"""Distributed training end to end, with two CPU processes (gloo): `daic run --nproc-per-node 2` trains the
network that one process trains with the same global batch and seed (sampled goals and augmentation
included), writes one run folder, resumes runs of another number of processes, and reports errors once."""

import json
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from daic.compiler.commands.cli import main
from daic.compiler.jobs.run import execute, plan_run
from daic.compiler.jobs.run.display import Silent

STDLIB = Path(str(resources.files("daic.stdlib")))

# Every kind of randomness a process draws per example: augmentation, Normal inside Sample; and IFGSM,
# whose input gradients are taken inside the data-parallel forward.
SCHEME = """scheme Tiny {
    net = "%s"
    data = Digits(subset=240, augment=[RandomCrop(8, padding=1), HorizontalFlip])
    epsilon = 0.05
    goal = Mix(Mix(Point, IFGSM(2), 0.5), Sub(Lin(0, 1, 2, 0), Sample(1, 0.5, Normal, Box)), 0.3)
    epochs = 3
    batch = 40
    optimizer = Adam(lr=0.01)
    test = [Accuracy, Verify(Box)]
    test_every = 1
}
"""


def alone(scheme: Path, out: Path, epochs: int, resume: bool = False) -> dict:
    plan = plan_run(str(scheme), None, None)
    return execute(
        plan,
        out,
        epochs=epochs,
        data_root=None,
        download=False,
        device="cpu",
        resume=resume,
        display=Silent(),
    )


def two_processes(scheme: Path, out: Path, *options: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "daic", "run", str(scheme), "--out", str(out), "--device", "cpu"]
    return subprocess.run(
        [*command, "--nproc-per-node", "2", *options],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return torch.load(folder / "checkpoint.pt", weights_only=True)["model"]


def rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def assert_same_training(a: Path, b: Path) -> None:
    """Equal up to float rounding: the gradient of a mean over 40 examples against the average of two means
    over 20. (Without per-example draws shared between processes the weights differ by about 3e-2.)"""
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-4
    for ra, rb in zip(rows(a), rows(b), strict=True):
        assert ra["epoch"] == rb["epoch"] and ra["loss"] == pytest.approx(rb["loss"], rel=1e-5)
        # 48 test images: percentages equal, or one image apart at most.
        assert abs(ra["Acc"] - rb["Acc"]) <= 2.1 and abs(ra["Ver Box"] - rb["Ver Box"]) <= 2.1


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One process for 2 and 3 epochs; two processes for 2."""
    root = tmp_path_factory.mktemp("distributed")
    scheme = root / "tiny.dai"
    scheme.write_text(SCHEME % (STDLIB / "nets" / "digits_conv.net"))
    alone(scheme, root / "one2", 2)
    alone(scheme, root / "one3", 3)
    launched = two_processes(scheme, root / "two2", "--epochs", "2")
    assert launched.returncode == 0, launched.stderr
    return root, scheme, launched


def test_two_processes_train_the_network_one_process_trains(runs):
    root, _, launched = runs
    assert_same_training(root / "one2", root / "two2")
    # Rank 0 alone writes and shows: one folder like a single process's, one summary on stdout.
    names = [sorted(p.name for p in (root / run).iterdir()) for run in ("one2", "two2")]
    assert names[0] == names[1]
    assert launched.stdout.count("s/epoch") == 1
    assert "2 processes, each 20 of every batch of 40" in launched.stdout
    run = json.loads((root / "two2" / "run.json").read_text())
    assert run["processes"] == 2 and run["epochs"] == 2


def test_a_run_of_two_processes_resumes_in_one(runs):
    root, scheme, _ = runs
    shutil.copytree(root / "two2", root / "two_then_one")
    summary = alone(scheme, root / "two_then_one", 3, resume=True)
    assert summary["epochs"] == 3
    assert_same_training(root / "one3", root / "two_then_one")


@pytest.mark.slow
def test_a_run_of_one_process_resumes_in_two(runs):
    root, scheme, _ = runs
    shutil.copytree(root / "one2", root / "one_then_two")
    launched = two_processes(scheme, root / "one_then_two", "--epochs", "3", "--resume")
    assert launched.returncode == 0, launched.stderr
    assert "resuming after epoch 2 of 3" in launched.stdout
    assert_same_training(root / "one3", root / "one_then_two")


@pytest.mark.slow  # 10-15 s end to end (-m slow runs it); quicker tests of the same parts stay
def test_a_failure_is_reported_once_with_its_exit_status(runs):
    root, scheme, _ = runs
    launched = two_processes(scheme, root / "two2", "--epochs", "2")  # the folder holds a run already
    assert launched.returncode == 2
    assert launched.stderr.count("already holds a finished run") == 1 and "Traceback" not in launched.stderr


def test_what_can_be_checked_is_checked_before_launching(tmp_path, monkeypatch):
    scheme = tmp_path / "tiny.dai"
    scheme.write_text(SCHEME % (STDLIB / "nets" / "digits_conv.net"))
    runner = CliRunner()
    result = runner.invoke(main, ["run", str(scheme), "--nproc-per-node", "3", "--device", "cpu"])
    assert result.exit_code == 2 and "batch (40) is the global batch" in result.stderr
    result = runner.invoke(main, ["run", str(scheme), "--nproc-per-node", "2", "--device", "cuda:1"])
    assert result.exit_code == 2 and "each process uses cuda:LOCAL_RANK" in result.stderr
    bad = tmp_path / "bad.dai"
    bad.write_text("scheme A { goal = Box }\n")
    result = runner.invoke(main, ["run", str(bad), "--nproc-per-node", "2"])
    assert result.exit_code == 1 and result.stderr.count("has errors") == 1 and "error[E106]" in result.stderr
    monkeypatch.setenv("WORLD_SIZE", "2")
    result = runner.invoke(main, ["run", str(scheme), "--nproc-per-node", "2"])
    assert result.exit_code == 2 and "already started by torchrun" in result.stderr
    assert not any(p.name == "runs" for p in tmp_path.iterdir())


def test_workers_get_the_same_command_line_without_the_process_count(tmp_path, monkeypatch):
    launched = []
    monkeypatch.setattr("torch.distributed.run.run", launched.append)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the launcher sets it when unset; restored afterwards
    scheme = tmp_path / "tiny.dai"
    scheme.write_text(SCHEME % (STDLIB / "nets" / "digits_conv.net"))
    result = CliRunner().invoke(
        main,
        ["run", str(scheme), "--epochs", "2", "--nproc-per-node=4", "--device", "cpu", "--amp", "--resume"],
    )
    assert result.exit_code == 0, result.output
    (args,) = launched
    assert args.nproc_per_node == "4" and args.standalone and args.module and args.training_script == "daic"
    assert args.training_script_args == [
        "run", str(scheme), "--epochs", "2", "--device", "cpu", "--resume", "--amp", "bf16",
    ]  # fmt: skip
