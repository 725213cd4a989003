"""Training end to end: every paper scheme trains on a reduced network and data, `daic run` writes its
run folder, and an interrupted run resumes to exactly the numbers of an uninterrupted one."""

import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from importlib import resources
from importlib.metadata import version
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from daic.compiler.checking.network import analyze_net
from daic.compiler.checking.program import Program
from daic.compiler.commands.cli import main
from daic.compiler.jobs.run import execute, plan_run
from daic.compiler.lower import lower_network, lower_value
from daic.dsl.parser import parse_net
from daic.errors import DaicError
from daic.runtime import ibp_init_
from daic.runtime.data.tensors import TensorData
from daic.runtime.training.trainer import Trainer
from tests.compiler.commands.test_cli import git_head
from tests.compiler.narrow import narrowed
from tests.paths import EXAMPLES

STDLIB = Path(str(resources.files("daic.stdlib")))
SCHEMES = Program().check_text((STDLIB / "schemes.dai").read_text(), str(STDLIB / "schemes.dai"))
TABLE3 = [
    name for name, info in SCHEMES.schemes.items() if info.node.base is not None or name.startswith("Adv5")
]


def tiny_cifar(n_train=8, n_test=4):
    g = torch.Generator().manual_seed(0)
    return TensorData(
        torch.rand(n_train, 3, 32, 32, generator=g),
        torch.randint(0, 10, (n_train,), generator=g),
        torch.rand(n_test, 3, 32, 32, generator=g),
        torch.randint(0, 10, (n_test,), generator=g),
        10,
    )


def test_table3_schemes_are_all_there():
    assert sorted(TABLE3) == sorted([
        "Baseline", "InSamp", "InSampLPA", "Adv1IS", "Adv1ISLPA", "Adv3ISLPA", "Adv1ISLPAUS", "Baseline_S18",
        "InSamp_S18", "Adv5IS_S18", "Adv5ISLPA_R18", "InSampLPA_R34", "Adv5ISLPA_D100", "BiAdv_L",
    ])  # fmt: skip


@pytest.mark.parametrize("name", TABLE3)
def test_every_paper_scheme_trains_one_short_epoch(name):
    info = SCHEMES.schemes[name]
    tree = parse_net(Path(info.net_path).read_text()).tree
    network = analyze_net(narrowed(tree), (3, 32, 32), 10)
    assert network.diagnostics == []
    scheme = lower_value(info.built)
    scheme.batch, scheme.data.augment = 4, scheme.data.augment  # two batches of the tiny data
    model = lower_network(network)
    ibp_init_(model, seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = Trainer(model, scheme, tiny_cifar())
    # Late enough that every ramp (Lin) of the paper's schedules has started: all parts of the goal run.
    row = trainer.train_epoch(60)
    assert math.isfinite(row["loss"]) and row["loss"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert row["train_epsilon"] == pytest.approx(8 / 255)


DIGITS_SCHEME = """scheme Tiny {
    net = "%s"
    data = Digits(subset=200)
    epsilon = 0.05
    goal = Mix(Point, Sub(Lin(0, 1, 2, 0), Box), Lin(0, 0.5, 2, 0))
    epochs = 4
    batch = 50
    optimizer = Adam(lr=0.003)
    test = [Accuracy, Verify(Box)]
    test_every = 2
}
"""


@pytest.fixture
def tiny_scheme(tmp_path):
    path = tmp_path / "tiny.dai"
    path.write_text(DIGITS_SCHEME % (STDLIB / "nets" / "digits_ffnn.net"))
    return path


class Quiet:
    """A display that shows nothing, and can interrupt the run like Ctrl-C in a chosen epoch."""

    def __init__(self, stop_in_epoch=None):
        self.stop_in_epoch = stop_in_epoch

    def start(self, *args):
        pass

    def progress(self, epoch, epochs):
        def update(p):
            if epoch == self.stop_in_epoch and p.batch >= 2:
                raise KeyboardInterrupt

        return update

    def evaluation(self, *args):
        pass

    def evaluating(self, *args):
        pass

    def epoch_done(self, row):
        pass

    def interrupted(self, out):
        pass

    def finish(self):
        pass


def run_plan(scheme, out, display, resume=False):
    plan = plan_run(str(scheme), None, None)
    return execute(
        plan, out, epochs=None, data_root=None, download=False, device="cpu", resume=resume, display=display
    )


def test_a_checkpoint_midway_up_the_ramp_certifies_at_the_runs_epsilon(tmp_path):
    """A run has one epsilon, its schedule's value at the last epoch: a checkpoint written while epsilon
    still ramps records it (and the epoch's training radius apart), so that `daic verify` certifies the
    radius the run's own evaluation reported."""
    net = STDLIB / "nets" / "digits_ffnn.net"
    scheme = tmp_path / "ramp.dai"
    scheme.write_text((DIGITS_SCHEME % net).replace("epsilon = 0.05", "epsilon = Lin(0, 0.05, 4, 0)"))
    folder = tmp_path / "run"
    with pytest.raises(DaicError):
        run_plan(scheme, folder, Quiet(stop_in_epoch=2))
    state = torch.load(folder / "checkpoint.pt", weights_only=True)
    row = json.loads((folder / "metrics.jsonl").read_text().splitlines()[-1])
    assert state["epoch"] == row["epoch"] == 2
    assert state["epsilon"] == row["epsilon"] == pytest.approx(0.05)  # epoch 2 was evaluated (test_every)
    # The radius the epoch's last step trained at: it began at t = 1 + 150/200 of the 200 images.
    assert state["train_epsilon"] == row["train_epsilon"] == pytest.approx(0.05 * 1.75 / 4)
    out = tmp_path / "record.jsonl"
    command = [
        "verify",
        str(net),
        "--weights",
        str(folder / "checkpoint.pt"),
        "--limit",
        "10",
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(main, [*command, "--domain", "box"])
    assert result.exit_code == 0, result.output
    assert json.loads(out.with_name("record.jsonl.json").read_text())["epsilon"] == pytest.approx(0.05)


def test_interrupted_run_resumes_to_the_same_numbers(tiny_scheme, tmp_path):
    whole = tmp_path / "whole"
    summary = run_plan(tiny_scheme, whole, Quiet())
    cut = tmp_path / "cut"
    with pytest.raises(DaicError, match="resume with resume=True") as info:
        run_plan(tiny_scheme, cut, Quiet(stop_in_epoch=2))
    assert "resume with --resume --out" in info.value.command_message
    assert info.value.exit_code == 130
    assert len((cut / "metrics.jsonl").read_text().splitlines()) == 2  # the third epoch was lost, no more
    assert torch.load(cut / "checkpoint.pt", weights_only=True)["epoch"] == 2
    with pytest.raises(DaicError, match="already holds a run"):
        run_plan(tiny_scheme, cut, Quiet())
    resumed = run_plan(tiny_scheme, cut, Quiet(), resume=True)
    assert resumed["Acc"] == summary["Acc"] and resumed["Ver Box"] == summary["Ver Box"]

    def rows(folder):
        return [
            {k: v for k, v in json.loads(line).items() if k not in ("seconds", "examples_per_s")}
            for line in (folder / "metrics.jsonl").read_text().splitlines()
        ]

    assert rows(cut) == rows(whole)
    a = torch.load(whole / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(cut / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_daic_run_writes_the_run_folder(tiny_scheme, tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", str(tiny_scheme), "--out", str(out), "--epochs", "2"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoint.pt", "digits_ffnn.net", "metrics.jsonl", "metrics.png", "run.json", "summary.json",
        "summary.txt", "tiny.dai",
    ]  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert summary["epochs"] == 2 and 0 <= summary["Ver Box"] <= summary["Acc"] <= 100
    assert (out / "summary.txt").read_text().splitlines()[0].split() == [
        "s/epoch",
        "Acc",
        "%",
        "Ver",
        "Box",
        "%",
    ]
    assert "Tiny from" in result.output
    # The formatted sources are what ran.
    assert (out / "tiny.dai").read_text().startswith("scheme Tiny {\n    net = ")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2] and "Acc" in rows[1] and "Acc" not in rows[0]
    record = json.loads((out / "run.json").read_text())
    assert record["device"] == "cpu" and record["native_kernels"].startswith(("loaded ", "unavailable: "))


LOGGED = """scheme Log {
    net = "%s"
    data = Digits(subset=100)
    epsilon = 0.05
    goal = Mix(Point, Sub(Lin(0, 1, 2, 1), Box), 0.5)
    epochs = 3
    test = [Accuracy, MIFGSM(k=2, mu=0.8, step=0.01), PGD(k=2, step=0.01), Verify(HBox), Verify(Box)]
}
"""


def test_a_runs_log_says_what_it_trains_and_evaluates_one_line_each(tmp_path):
    scheme = tmp_path / "log.dai"
    scheme.write_text(LOGGED % (STDLIB / "nets" / "digits_ffnn.net"))
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", str(scheme), "--out", str(out)])  # no terminal: a log
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # The goal as the source wrote it (no `Const(0.5)`, which the language lacks).
    assert lines[1] == "data: 100 training, 20 test images; goal Mix(Point, Sub(Lin(0, 1, 2, 1), Box), 0.5)"
    tests = "[Accuracy, MIFGSM(k=2, mu=0.8, step=0.01), PGD(k=2, step=0.01), Verify(HBox), Verify(Box)]"
    # Evaluated only after the last epoch (test_every's default), announced and followed in the log.
    assert lines[2].split() == ["epoch", "loss", "train_eps", "Sub.delta", "s"]
    assert lines[5] == f"evaluating after epoch 3: {tests} on 20 images at eps 0.05"
    assert lines[6:11] == [
        f"  testing {column}: 20 of 20 images (100%)"
        for column in ("Acc", "MI-FGSM", "PGD", "Ver HBox", "Ver Box")
    ]
    # Every row, and the header of 101 columns, is one line; each epoch shows the box's scale and the radius
    # as trained.
    header = (
        "epoch      loss  train_eps  Sub.delta         s     Acc %  MI-FGSM %     PGD %  Ver HBox %"
        "  Ver Box %"
    )
    assert lines[11] == header
    assert [line.split()[3] for line in (lines[3], lines[4], lines[12])] == ["0", "0.25", "0.75"]
    assert len(lines[12].split()) == 10
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["schedules"] for r in rows] == [{"Sub.delta": 0.0}, {"Sub.delta": 0.25}, {"Sub.delta": 0.75}]
    assert ["Acc" in r for r in rows] == [False, False, True]


def test_each_epoch_records_every_schedule_of_the_goal():
    """Adv1ISLPA holds two `Sub`s: each is named by where it sits, so that neither hides the other."""
    info = SCHEMES.schemes["Adv1ISLPA"]
    network = analyze_net(narrowed(parse_net(Path(info.net_path).read_text()).tree), (3, 32, 32), 10)
    scheme = lower_value(info.built)
    scheme.batch = 4
    row = Trainer(ibp_init_(lower_network(network), seed=0), scheme, tiny_cifar()).train_epoch(30)
    # The last of two steps trains at t = 30.5: Lin(0, 0.5, 150, 10), Lin(0, 1, 20, 20), Lin(0, 1, 150, 10).
    assert row["schedules"] == pytest.approx(
        {
            "Mix.weight": 0.5 * 20.5 / 150,
            "g1.Sub.delta": 10.5 / 20,
            "g2.Sub.delta": 20.5 / 150,
            "Sample.delta": 20.5 / 150,
        }
    )


def test_the_paper_schemes_evaluate_every_50_epochs():
    assert {name: info.built.args["test_every"] for name, info in SCHEMES.schemes.items()} == dict.fromkeys(
        SCHEMES.schemes, 50
    )


def test_run_errors_are_messages_not_tracebacks(tmp_path, tiny_scheme):
    bad = tmp_path / "bad.dai"
    bad.write_text("scheme A { goal = Box }\n")
    result = CliRunner().invoke(main, ["run", str(bad)])
    assert result.exit_code == 1 and "error[E106]" in result.stderr and "Traceback" not in result.output
    result = CliRunner().invoke(main, ["run", str(tiny_scheme), "--scheme", "Nope"])
    assert result.exit_code == 2 and "has no scheme 'Nope'" in result.stderr
    result = CliRunner().invoke(
        main, ["run", str(tiny_scheme), "--net", str(STDLIB / "nets" / "mnist_ffnn.net")]
    )
    assert result.exit_code == 1 and "does not fit Digits" in result.stderr
    result = CliRunner().invoke(
        main,
        ["run", str(tiny_scheme), "--device", "cuda:7"]
        if not torch.cuda.is_available()
        else ["run", str(tiny_scheme), "--device", "tpu"],
    )
    assert result.exit_code == 2
    for device in ("mps", "meta", "gpu"):
        result = CliRunner().invoke(main, ["run", str(tiny_scheme), "--device", device])
        assert result.exit_code == 2 and "daic runs on cpu, cuda or cuda:N" in result.stderr
    cifar = tmp_path / "c.dai"
    cifar.write_text(
        "import stdlib.schemes\n"
        f'scheme C extends Adv5ISLPA_R18 {{ net = "{STDLIB}/nets/cifar10_ffnn.net" }}\n'
    )
    result = CliRunner().invoke(main, ["run", str(cifar), "--out", str(tmp_path / "c")])
    assert result.exit_code == 2 and "pass --data DIR" in result.stderr
    assert not (tmp_path / "c").exists()


def test_seed_and_threads_come_from_the_command_line_and_are_recorded(tiny_scheme, tmp_path, monkeypatch):
    out = tmp_path / "run"
    command = ["run", str(tiny_scheme), "--out", str(out), "--epochs", "1", "--seed", "7"]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    try:
        result = CliRunner().invoke(main, [*command, "--threads", "2"])
    finally:
        torch.set_num_threads(1)  # the tests' setting
    assert result.exit_code == 0, result.output
    record = json.loads((out / "run.json").read_text())
    assert (record["seed"], record["threads"], record["OMP_NUM_THREADS"]) == (7, 2, "2")
    versions = record["versions"]
    assert (versions["daic"], versions["python"], versions["torch"], versions["host"]) == (
        "0.1.0", platform.python_version(), version("torch"), platform.node()
    )  # fmt: skip
    assert (
        versions["daic_commit"] == git_head() and record["sources_commit"] is None
    )  # tmp_path: no repository
    assert torch.load(out / "checkpoint.pt", weights_only=True)["seed"] == 7
    result = CliRunner().invoke(
        main, ["run", str(tiny_scheme), "--out", str(out), "--epochs", "2", "--resume"]
    )
    assert result.exit_code == 2 and "\n  seed: was 7, now 0\n" in result.stderr
    result = CliRunner().invoke(main, [*command[:4], "--epochs", "2", "--seed", "7", "--resume"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "run.json").read_text())["resumed"][0]["threads"] == 1


@pytest.mark.slow
def test_omp_num_threads_is_respected_without_threads(tiny_scheme, tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "daic", "run", str(tiny_scheme), "--out", str(out), "--epochs", "1"]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    record = json.loads((out / "run.json").read_text())
    assert (record["threads"], record["OMP_NUM_THREADS"]) == (1, "1")


@pytest.mark.slow
def test_sigterm_keeps_the_last_epoch_and_resume_finishes(tiny_scheme, tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "daic", "run", str(tiny_scheme), "--out", str(out), "--epochs", "40"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (out / "metrics.jsonl").exists():
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    saved = torch.load(out / "checkpoint.pt", weights_only=True)["epoch"]
    assert saved >= 1 and len((out / "metrics.jsonl").read_text().splitlines()) == saved
    done = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 40


def test_quickstart_reaches_its_targets(tmp_path):
    examples = EXAMPLES
    started = time.time()
    result = CliRunner().invoke(main, ["run", str(examples / "quickstart.dai"), "--out", str(tmp_path / "q")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "q" / "summary.json").read_text())
    assert summary["Acc"] >= 95 and summary["Ver HBox"] >= 75, summary
    print(f"quickstart: {summary} in {time.time() - started:.0f} s")


@pytest.mark.slow
def test_resnet34_completes_an_epoch_on_cpu(tmp_path, monkeypatch):
    from tests.runtime.data.test_data import test_cifar10_format

    test_cifar10_format(tmp_path / "data", monkeypatch)  # writes a tiny CIFAR10 in its real format
    scheme = tmp_path / "r34.dai"
    scheme.write_text(
        "import stdlib.schemes\nscheme R34 extends InSampLPA_R34 {\n    batch = 5\n"
        "    test = [Accuracy, Verify(Box)]\n}\n"
    )
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(scheme),
            "--data",
            str(tmp_path / "data"),
            "--epochs",
            "1",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "967,680 neurons, 25,731,082 parameters" in result.output.replace("\n", " ")
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["epochs"] == 1


def test_the_standard_librarys_taps_schemes_split_cnn7_where_ctbench_does():
    """TAPS's schemes in `stdlib/methods.dai` name a CNN7 with the split where CTBench's MNIST scripts put it
    (after the third convolution block at eps 0.1, the fourth at 0.3) and train with its settings."""
    from daic.compiler.jobs.run import plan as run_plan
    from daic.runtime.layers.activation import ReLU
    from daic.runtime.layers.taps import TAPS

    path = str(Path(str(resources.files("daic.stdlib"))) / "methods.dai")
    for name, relus_before, steps, goal in (
        ("TAPS_MNIST01", 3, 10, "Mix(Point, Sub(Const(2.0), Box), Const(0.7))"),
        ("TAPS_MNIST03", 4, 5, "Sub(Const(1.3333333333333333), Box)"),
    ):
        scheme, model = run_plan.lowered(plan_run(path, name, None))
        kinds = [m for m in model.modules() if isinstance(m, TAPS | ReLU)]
        (split,) = [i for i, m in enumerate(kinds) if isinstance(m, TAPS)]
        assert split == relus_before and len(kinds) == 7, name
        assert (kinds[split].steps, kinds[split].restarts, kinds[split].grad_scale) == (steps, 3, 4.0), name
        assert repr(scheme.goal) == goal and scheme.epochs == 70, name
        assert sum(p.numel() for p in model.parameters() if p.requires_grad) == 13_259_338, name


def test_the_mnist_methods_example_lowers_every_scheme_to_its_goal_and_network():
    """`examples/mnist_methods.dai` (the MNIST tables of docs/training.md) plans and lowers each of its
    schemes: the ConvSmall of 89,606 parameters (TAPS's split adds none), or ConvBig's or CNN7's, each
    method's goal as written."""
    from daic.compiler.jobs.run import plan as run_plan
    from daic.runtime.layers.taps import TAPS

    path = str(EXAMPLES / "mnist_methods.dai")
    names = [line.split()[1] for line in Path(path).read_text().splitlines() if line.startswith("scheme ")]
    assert len(names) == 28
    parameters = {"ExpIBP_03_ConvBig": 1_974_762, "IBP_03_CNN7": 13_259_338}
    goals = {}
    for name in names:
        scheme, model = run_plan.lowered(plan_run(path, name, None))
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert trainable == parameters.get(name, 89_606), name
        assert any(isinstance(m, TAPS) for m in model.modules()) == name.startswith("TAPS"), name
        goals[name] = repr(scheme.goal)
    assert goals["SABR_01"] == "Mix(Point, SmallBox(Const(0.4), PGD(8, 0.5, 1), Box), Const(0.7))"
    assert goals["CCIBP_03"].startswith("Sub(Const(1.33333")
    assert goals["ExpIBP_03_ConvBig"] == goals["ExpIBP_03"]
    assert goals["IBP_03_CNN7"] == "Mix(Point, Box, Const(0.7))"
    assert goals["SABR_01_folded"] == (
        "Mix(Point, SmallBox(Const(0.4), PGD(8, 0.5, 1), Box(folded=True)), Const(0.7))"
    )
