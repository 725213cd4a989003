"""What a study hands back: a table of its trials, the chosen ones (the best, or the Pareto front of
several objectives) tested once on the test set, `best.dai` (or `pareto-NNN.dai` per front point),
`pareto.png`, the parameters' importances, and `summary.txt`/`summary.json` in the study's folder."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from daic.compiler.jobs.run import plan_run
from daic.compiler.jobs.run.retest import retest
from daic.compiler.jobs.tune.plan import StudyPlan
from daic.compiler.jobs.tune.trial import objective_columns, trial_name

STATES = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "cut short", "RUNNING": "running"}


@dataclass
class StudyReport:
    columns: list[str]  # the objectives' result columns
    rows: list[dict]  # per trial: number, state, params, values
    chosen: list[int]  # the best trial, or the Pareto front's
    tested: dict[int, dict[str, float]]  # chosen trial -> its tests on the test set
    importances: dict[str, dict[str, float]] = field(default_factory=dict)  # objective -> parameter -> share
    files: list[str] = field(default_factory=list)  # what was written in the study's folder


def chosen_trials(study) -> list:
    """The trials a study hands back: the best of one objective, the Pareto front of several."""
    from optuna.trial import TrialState

    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return []
    if len(study.directions) == 1:  # one best, the first of those that tie (best_trials lists them all)
        return [study.best_trial]
    return sorted(study.best_trials, key=lambda t: t.number)


def progress_text(plan: StudyPlan, study) -> str:
    """One line over the study after a trial: its results so far of those it asks for, the best so far
    (the front, for several objectives), and the time left at the pace of the trials so far."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    ended = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    running = sum(t.state == TrialState.RUNNING for t in trials)
    wanted = plan.info.built.args["trials"]
    parts = [f"study {plan.name}: {len(ended)} of {wanted} trials"]
    if running:
        parts[0] += f", {running} running"
    best = chosen_trials(study)
    if len(study.directions) == 1 and best:
        parts.append(f"best {objective_columns(plan)[0]} {best[0].values[0]:.2f} (trial {best[0].number})")
    elif best:
        parts.append(f"front: trials {', '.join(str(t.number) for t in best)}")
    took = [(t.datetime_complete - t.datetime_start).total_seconds() for t in ended if t.datetime_complete]
    left = wanted - len(ended) - running
    if took and left > 0:
        pace = sum(took) / len(took)
        parts.append(f"about {_duration(left * pace)} left at {_duration(pace)} a trial")
    return "; ".join(parts)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def report_study(plan: StudyPlan, study, data_root: str | None, device: str) -> StudyReport:
    columns = objective_columns(plan)
    rows = [
        {
            "trial": t.number,
            "state": STATES.get(t.state.name, t.state.name.lower()),
            "params": t.params,
            "values": dict(zip(columns, t.values, strict=True)) if t.values else {},
        }
        for t in study.get_trials(deepcopy=False)
    ]
    chosen = chosen_trials(study)
    report = StudyReport(
        columns, rows, [t.number for t in chosen], _tested(plan, study, chosen, data_root, device)
    )
    report.importances = _importances(study, columns)
    report.files = _write_chosen(plan, report.chosen)
    if len(columns) > 1 and any(r["values"] for r in rows):
        _write(plan, "pareto.png", plot_front(report))
        report.files.append("pareto.png")
    _write(plan, "summary.txt", (report_text(plan, report) + "\n").encode("utf-8"))
    _write(plan, "summary.json", (json.dumps(_as_json(report), indent=2) + "\n").encode("utf-8"))
    report.files += ["summary.txt", "summary.json"]
    return report


def _write(plan: StudyPlan, name: str, data: bytes) -> None:
    """A file of the study's folder, whole or not at all (a worker killed while writing leaves the old)."""
    from daic.files import write_atomic

    write_atomic(plan.folder / name, lambda handle: handle.write(data))


def _tested(plan: StudyPlan, study, chosen: list, data_root: str | None, device: str) -> dict:
    """Each chosen trial's tests on the test set, measured once (the study's storage keeps them)."""
    tested, attrs = {}, study.user_attrs
    for trial in chosen:
        key = f"test:{trial.number}"
        if key not in attrs:
            folder = plan.folder / trial_name(trial.number)
            run_plan = plan_run(str(plan.folder / f"{trial_name(trial.number)}.dai"), None, None)
            attrs[key] = retest(run_plan, folder, data_root, device)
            study.set_user_attr(key, attrs[key])
        tested[trial.number] = attrs[key]
    return tested


def _importances(study, columns: list[str]) -> dict[str, dict[str, float]]:
    """fANOVA's share of each objective's variance per parameter, where there are enough trials."""
    import optuna
    from optuna.trial import TrialState

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < 2:
        return {}
    found = {}
    for i, column in enumerate(columns):
        try:
            found[column] = optuna.importance.get_param_importances(
                study,
                evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0),
                target=lambda t, i=i: t.values[i],
            )
        except (ValueError, RuntimeError):  # no parameter varied among the complete trials
            continue
    return found


def _write_chosen(plan: StudyPlan, chosen: list[int]) -> list[str]:
    """best.dai, or pareto-NNN.dai per front point: the chosen trials' schemes."""
    several = len(plan.info.objectives) > 1
    written = []
    for number in chosen:
        name = f"pareto-{number:03d}.dai" if several else "best.dai"
        _write(plan, name, (plan.folder / f"{trial_name(number)}.dai").read_bytes())
        written.append(name)
    return written


def report_text(plan: StudyPlan, report: StudyReport) -> str:
    names = list(dict.fromkeys(name for row in report.rows for name in row["params"]))
    head = ["trial", "state", *names, *report.columns]
    lines = [head]
    for row in report.rows:
        mark = "*" if row["trial"] in report.chosen else ""
        lines.append(
            [f"{row['trial']}{mark}", row["state"]]
            + [_shown(row["params"].get(n, "")) for n in names]
            + [f"{row['values'][c]:.2f}" if c in row["values"] else "" for c in report.columns]
        )
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    table = ["  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    what = "Pareto front" if len(report.columns) > 1 else "best trial"
    out = [
        f"study {plan.name}: {len(report.rows)} trials (* the {what}; values on the validation split)",
        *table,
    ]
    if report.chosen:
        out.append(f"\nthe {what} on the test set:")
        for number in report.chosen:
            shown = ", ".join(f"{k} {v:.2f}%" for k, v in report.tested[number].items())
            out.append(f"  trial {number}: {shown}")
    for column, shares in report.importances.items():
        listed = ", ".join(f"{name} {share:.2f}" for name, share in shares.items())
        out.append(f"importance for {column}: {listed}")
    return "\n".join(out)


def _shown(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _as_json(report: StudyReport) -> dict:
    return {
        "objectives": report.columns,
        "trials": report.rows,
        "chosen": report.chosen,
        "test": {str(k): v for k, v in report.tested.items()},
        "importances": report.importances,
    }


def plot_front(report: StudyReport) -> bytes:
    """The first two objectives of every complete trial, the front highlighted and joined, as one PNG."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_name, y_name = report.columns[:2]
    done = [r for r in report.rows if r["values"]]
    front = sorted((r for r in done if r["trial"] in report.chosen), key=lambda r: r["values"][x_name])
    figure, axes = plt.subplots(figsize=(6, 5))
    axes.scatter(
        [r["values"][x_name] for r in done], [r["values"][y_name] for r in done], c="0.6", label="trials"
    )
    axes.plot(
        [r["values"][x_name] for r in front],
        [r["values"][y_name] for r in front],
        "o-",
        color="C3",
        label="Pareto front",
    )
    labels: dict[tuple[float, float], list[str]] = {}  # trials that reached the same point share a label
    for r in front:
        labels.setdefault((r["values"][x_name], r["values"][y_name]), []).append(str(r["trial"]))
    for k, (point, numbers) in enumerate(labels.items()):  # above and below in turn, for close points
        axes.annotate(", ".join(numbers), point, textcoords="offset points", xytext=(4, 6 if k % 2 else -14))
    axes.set(
        xlabel=f"{x_name} % (validation)", ylabel=f"{y_name} % (validation)", title="Trials of the study"
    )
    axes.legend()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()
