"""`daic tune` end to end on the embedded digits: a study's trials as run folders, its report and best.dai,
a study killed and continued, two workers on one SQLite storage, and `daic run` refusing search spaces."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from daic.compiler.commands.cli import main
from daic.compiler.jobs.run.stops import STOP_VARIABLE
from tests.compiler.commands.test_run import STDLIB

STUDY = """let lr = LogRange(1e-3, 1e-2)

scheme Tiny {
    net = "%s"
    data = Digits(subset=200)
    epsilon = 0.05
    goal = Mix(Point, Box, Range(0.1, 0.9))
    epochs = 2
    batch = 50
    optimizer = Adam(lr=lr)
    test = [Accuracy, Verify(Box)]
    test_every = 1
}

study Small tunes Tiny {
    trials = %d
    objectives = %s
    sampler = %s
}
"""


def write_study(folder: Path, trials: int = 2, objectives: str = "[Accuracy, Verify(Box)]", sampler="Random"):
    path = folder / "study.dai"
    path.write_text(STUDY % (STDLIB / "nets" / "digits_ffnn.net", trials, objectives, sampler))
    return path


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_a_two_trial_study_runs_each_trial_as_a_run_folder_and_reports_a_front(tmp_path):
    study = write_study(tmp_path)
    out = tmp_path / "runs"
    result = CliRunner().invoke(main, ["tune", str(study), "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = summary(out)
    assert report["objectives"] == ["Acc", "Ver Box"]
    assert [t["trial"] for t in report["trials"]] == [0, 1]
    assert {t["state"] for t in report["trials"]} == {"complete"}
    for trial in report["trials"]:
        params = trial["params"]
        assert set(params) == {"goal.weight", "lr"}
        assert 0.1 <= params["goal.weight"] <= 0.9 and 1e-3 <= params["lr"] <= 1e-2
        assert all(0 <= v <= 100 for v in trial["values"].values())
        source = (out / f"trial-{trial['trial']:03d}.dai").read_text()
        # The chosen values are written into the trial's scheme, which tests on the validation split.
        assert f"Mix(Point, Box, {params['goal.weight']!r})" in source
        assert f"Adam(lr={params['lr']!r})" in source and "validation = 0.2" in source
        run = out / f"trial-{trial['trial']:03d}"
        assert (run / "checkpoint.pt").is_file() and "finished" in json.loads((run / "run.json").read_text())
    assert report["chosen"] and set(report["chosen"]) <= {0, 1}
    for number in report["chosen"]:
        assert set(report["test"][str(number)]) == {"Acc", "Ver Box"}
        assert (out / f"pareto-{number:03d}.dai").read_text() == (out / f"trial-{number:03d}.dai").read_text()
    assert (out / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    assert "the Pareto front on the test set" in result.stdout
    # The trial's run saw 40 of the 200 training images as its test set: the validation split.
    metrics = (out / "trial-000" / "run.json").read_text()
    assert '"scheme": "Tiny"' in metrics
    assert "160 training, 40 validation images" in result.output


def test_best_dai_checks_and_reruns_to_the_trials_numbers(tmp_path):
    study = write_study(tmp_path, trials=2, objectives="[Verify(Box)]")
    out = tmp_path / "runs"
    result = CliRunner().invoke(main, ["tune", str(study), "--out", str(out)])
    assert result.exit_code == 0, result.output
    best = summary(out)["chosen"][0]
    values = next(t["values"] for t in summary(out)["trials"] if t["trial"] == best)
    assert CliRunner().invoke(main, ["check", str(out / "best.dai")]).exit_code == 0
    again = CliRunner().invoke(main, ["run", str(out / "best.dai"), "--out", str(tmp_path / "again")])
    assert again.exit_code == 0, again.output
    rerun = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert rerun["Ver Box"] == values["Ver Box"]


def test_pruning_reports_every_evaluation_to_the_study(tmp_path):
    study = write_study(tmp_path, trials=2, objectives="[Accuracy]")
    text = study.read_text().replace("sampler = Random", "sampler = Random\n    pruner = Median(startup=5)")
    study.write_text(text)
    out = tmp_path / "runs"
    result = CliRunner().invoke(main, ["tune", str(study), "--out", str(out)])
    assert result.exit_code == 0, result.output
    loaded = optuna.load_study(study_name="Small", storage=f"sqlite:///{out / 'study.db'}")
    for trial in loaded.trials:
        # One evaluation after each of the two epochs (test_every = 1), the last being the trial's value.
        assert sorted(trial.intermediate_values) == [1, 2]
        assert trial.intermediate_values[2] == trial.values[0]


def test_run_refuses_a_scheme_with_search_spaces(tmp_path):
    study = write_study(tmp_path)
    result = CliRunner().invoke(main, ["run", str(study), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert "scheme Tiny holds search spaces (goal.weight, lr): `daic tune` runs a study" in result.output
    assert not (tmp_path / "r").exists()


def test_a_study_of_other_sources_is_refused_in_the_same_storage(tmp_path):
    study = write_study(tmp_path, trials=1)
    out = tmp_path / "runs"
    assert CliRunner().invoke(main, ["tune", str(study), "--out", str(out)]).exit_code == 0
    study.write_text(study.read_text().replace("Range(0.1, 0.9)", "Range(0.2, 0.9)"))
    result = CliRunner().invoke(main, ["tune", str(study), "--out", str(out)])
    assert result.exit_code == 2
    assert "the storage holds study Small of other sources" in result.output
    assert "scheme.goal: was Mix(" in result.output


def test_more_trials_continue_a_study_and_a_line_tells_its_progress(tmp_path):
    study = write_study(tmp_path, trials=1, objectives="[Accuracy]")
    out = tmp_path / "runs"
    first = CliRunner().invoke(main, ["tune", str(study), "--out", str(out)])
    assert first.exit_code == 0, first.output
    assert re.search(r"^study Small: 1 of 1 trials; best Acc \d+\.\d\d \(trial 0\)$", first.stderr, re.M)
    study.write_text(study.read_text().replace("trials = 1", "trials = 2"))
    second = CliRunner().invoke(main, ["tune", str(study), "--out", str(out)])
    assert second.exit_code == 0, second.output
    assert states(out) == {0: "COMPLETE", 1: "COMPLETE"}
    assert re.search(r"^study Small: 2 of 2 trials; best Acc [\d.]+ \(trial [01]\)$", second.stderr, re.M)
    assert [t["trial"] for t in summary(out)["trials"]] == [0, 1]
    # One best trial, whether or not the two tie.
    assert len(summary(out)["chosen"]) == 1
    assert "(best.dai, summary.txt, summary.json)" in second.stderr


def test_the_progress_line_estimates_the_time_left(tmp_path):
    study = write_study(tmp_path, trials=2)
    out = tmp_path / "runs"
    result = CliRunner().invoke(main, ["tune", str(study), "--out", str(out)])
    assert re.search(
        r"^study Small: 1 of 2 trials; front: trials 0; about \d+ s left at \d+ s a trial$",
        result.stderr,
        re.M,
    )


def daic_tune(study: Path, out: Path, *options: str, stop: str | None = None):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop(STOP_VARIABLE, None)
    if stop is not None:
        env[STOP_VARIABLE] = stop
    command = [sys.executable, "-m", "daic", "tune", str(study), "--out", str(out), *options]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def states(out: Path) -> dict[int, str]:
    loaded = optuna.load_study(study_name="Small", storage=f"sqlite:///{out / 'study.db'}")
    return {t.number: t.state.name for t in loaded.trials}


# Every signal in the slow suite; the default one keeps SIGKILL, after which nothing of the study runs, and
# SIGINT (Ctrl-C), whose handling the worker shares with SIGTERM.
SIGNALS = [
    pytest.param("SIGKILL", marks=pytest.mark.slow),
    "SIGINT",
    pytest.param("SIGTERM", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("signal_name", SIGNALS)
def test_a_killed_study_continues_and_its_cut_trial_does_not_count(tmp_path, signal_name):
    study = write_study(tmp_path, trials=2)
    out = tmp_path / "runs"
    killed = daic_tune(study, out, stop=f"epoch-saved:{signal_name}")
    output, _ = killed.communicate(timeout=300)
    assert killed.returncode != 0
    if signal_name != "SIGKILL":  # the worker said so in one line, and marked its own trial
        assert killed.returncode == 130
        assert output.splitlines()[-1] == (
            "daic: interrupted: the trial in progress is marked cut short and not counted; run the same "
            "command to continue the study"
        )
        assert "Traceback" not in output and "Trial 0 failed" not in output  # nothing of Optuna's log
        assert states(out) == {0: "FAIL"}
    else:  # nobody could: it stays running until the next worker finds its process gone
        assert states(out) == {0: "RUNNING"}
    again = daic_tune(study, out)
    output, _ = again.communicate(timeout=300)
    assert again.returncode == 0, output
    assert states(out) == {0: "FAIL", 1: "COMPLETE", 2: "COMPLETE"}
    report = summary(out)
    assert [t["state"] for t in report["trials"]] == ["cut short", "complete", "complete"]
    assert 0 not in report["chosen"]


@pytest.mark.slow  # 10-15 s end to end (-m slow runs it); quicker tests of the same parts stay
def test_two_workers_share_one_sqlite_storage(tmp_path):
    study = write_study(tmp_path, trials=4)
    out = tmp_path / "runs"
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    workers = [daic_tune(study, out, "--storage", storage) for _ in range(2)]
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    loaded = optuna.load_study(study_name="Small", storage=storage)
    complete = [t for t in loaded.trials if t.state.name == "COMPLETE"]
    # Each worker stops once the results and the other's running trials make four; both may have started
    # a trial in the same moment, so one more may end.
    assert 4 <= len(complete) <= 5 and len(loaded.trials) == len(complete)
    for trial in complete:
        assert (out / f"trial-{trial.number:03d}" / "checkpoint.pt").is_file()
    pids = {t.user_attrs["worker"]["pid"] for t in complete}
    assert pids <= {w.pid for w in workers}
    assert all(re.search(r"study Small: \d trials", o) for o in outputs)


def test_a_trial_of_a_choice_of_networks_names_the_chosen_file_from_the_study_folder(tmp_path):
    from daic.compiler.jobs.tune.plan import plan_study
    from daic.compiler.jobs.tune.trial import trial_fields

    (tmp_path / "nets").mkdir()
    for name in ("a.net", "b.net"):
        (tmp_path / "nets" / name).write_text((STDLIB / "nets" / "digits_ffnn.net").read_text())
    study = tmp_path / "study.dai"
    study.write_text(
        STUDY.replace('net = "%s"', 'net = Choice(["nets/a.net", "nets/b.net"])') % (1, "[Accuracy]", "Grid")
    )
    plan = plan_study(str(study), None, str(tmp_path / "deep" / "out"), None)
    assert [name for name, _ in plan.spaces] == ["net", "goal.weight", "lr"]
    fields = trial_fields(plan, lambda space: space.options[-1], plan.folder)
    assert fields["net"] == "../../nets/b.net"
    assert fields["validation"] == 0.2 and fields["goal"].args["weight"] == 0.9


def test_a_grid_over_a_continuous_space_is_refused_before_any_trial(tmp_path):
    study = write_study(tmp_path, sampler="Grid")
    result = CliRunner().invoke(main, ["tune", str(study), "--out", str(tmp_path / "runs")])
    assert result.exit_code == 2
    assert "study Small: Grid takes only Choice and IntRange spaces" in result.output
    assert not list((tmp_path / "runs").glob("trial-*"))


def test_workers_opening_a_new_storage_at_once_all_get_it(tmp_path):
    """Workers started together race to make a new database's tables; each must end with the storage (one
    of two workers failed with `UNIQUE constraint failed: alembic_version.version_num` before)."""
    url = f"sqlite:///{tmp_path / 'new.db'}"
    opening = (
        "from daic.compiler.jobs.tune.study import _storage; import sys; _storage(sys.argv[1]); print('ok')"
    )
    workers = [
        subprocess.Popen([sys.executable, "-c", opening, url], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    assert [w.communicate(timeout=120)[0].strip() for w in workers] == ["ok"] * 4


def test_a_study_runs_from_python_as_the_command_runs_it(tmp_path):
    import daic

    study = write_study(tmp_path, trials=1, objectives="[Accuracy]")
    seen = []
    report = daic.tune(
        daic.load_study(study, out=tmp_path / "runs"), on_trial=lambda trial, progress: seen.append(progress)
    )
    assert [row["trial"] for row in report.rows] == [0] and report.chosen == [0]
    assert report.files == ["best.dai", "summary.txt", "summary.json"]
    assert (tmp_path / "runs" / "best.dai").exists()
    assert len(seen) == 1 and seen[0].startswith("study Small: 1 of 1 trials; best Acc ")
    with pytest.raises(daic.DaicError, match=r"is not a \.dai file") as refused:
        daic.load_study(tmp_path / "study.txt")
    assert refused.value.exit_code == 2
