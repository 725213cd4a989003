"""One trial of a study: the values its sampler chooses, the scheme they make written as `trial-NNN.dai`
in the study's folder, and its run in the run folder `trial-NNN` beside it, whose evaluations go to the
pruner. The run is an ordinary `daic run`: `daic run trial-NNN.dai` trains the same network again."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from daic.compiler.checking.program import stdlib_net
from daic.compiler.checking.spaces import Space, resolve
from daic.compiler.checking.written import scheme_text, value_text
from daic.compiler.constructors import SCHEME_DECL
from daic.compiler.jobs.run import execute, plan_run
from daic.compiler.jobs.tune.plan import StudyPlan
from daic.compiler.lower import lower_value
from daic.compiler.types import INT


@dataclass
class TrialSettings:
    """How every trial of this worker runs."""

    data_root: str | None
    device: str
    display_for: Callable[[int], object]  # a run display for trial N


def trial_name(number: int) -> str:
    return f"trial-{number:03d}"


def option_labels(space: Space) -> list[str]:
    """What a Choice's options are called in the study: their source text (made unique)."""
    labels: list[str] = []
    for option in space.options:
        text = value_text(option)
        labels.append(text if text not in labels else f"{text} #{len(labels) + 1}")
    return labels


class Chooser:
    """Each space's value, asked of an Optuna trial (which draws it, or gives back what it drew)."""

    def __init__(self, trial, spaces: list[tuple[str, Space]]) -> None:
        self.trial = trial
        self.names = {id(space): name for name, space in spaces}

    def __call__(self, space: Space) -> object:
        name = self.names[id(space)]
        if space.is_choice:
            labels = option_labels(space)
            return space.options[labels.index(self.trial.suggest_categorical(name, labels))]
        low, high = space.options
        if space.type == INT:
            return self.trial.suggest_int(name, low, high, step=space.step)
        return self.trial.suggest_float(name, low, high, log=space.decl.space.log)


def trial_fields(plan: StudyPlan, choose: Callable[[Space], object], folder: Path) -> dict[str, object]:
    """The scheme's fields with the chosen values in place of its spaces, for a file in `folder`: its
    network named from there, the study's validation split set."""
    info = plan.scheme
    fields = {
        p.name: resolve(info.built.args[p.name], choose)
        for p in SCHEME_DECL.params
        if p.name in info.explicit
    }
    net = fields.get("net")
    if isinstance(net, str) and info.net_dir is not None and stdlib_net(net) is None:
        fields["net"] = os.path.relpath((info.net_dir / net).resolve(), folder.resolve())
    fields["validation"] = plan.info.built.args["validation"]
    return fields


def write_trial(plan: StudyPlan, number: int, fields: dict[str, object], params: dict) -> Path:
    """`trial-NNN.dai` in the study's folder, whole or not at all."""
    from daic.files import write_atomic

    chosen = "\n".join(f"  {name} = {value}" for name, value in params.items())
    comment = (
        f"Trial {number} of study {plan.name} ({plan.path}), tested on a validation split; its values:\n"
        f"{chosen}\nIts run is the folder {trial_name(number)} of the study's folder."
    )
    text = scheme_text(plan.scheme.node.name, fields, comment)
    path = plan.folder / f"{trial_name(number)}.dai"
    plan.folder.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda handle: handle.write(text.encode("utf-8")))
    return path


def objective_columns(plan: StudyPlan) -> list[str]:
    """The result column of each objective: the column of the scheme's test it is."""
    tests = plan.scheme.built.args["test"]
    return [lower_value(tests[i]).column for i in plan.info.objectives]


def run_trial(plan: StudyPlan, trial, settings: TrialSettings) -> list[float]:
    """Train and test one trial; its objectives' values on the validation split. Raises optuna's
    TrialPruned when the pruner stops it."""
    import optuna

    trial.set_user_attr("worker", {"host": socket.gethostname(), "pid": os.getpid()})
    choose = Chooser(trial, plan.spaces)
    fields = trial_fields(plan, choose, plan.folder)
    source = write_trial(plan, trial.number, fields, trial.params)
    columns = objective_columns(plan)
    pruning = plan.info.built.args["pruner"] is not None

    def report(row: dict) -> None:
        if pruning and columns[0] in row:
            trial.report(row[columns[0]], step=row["epoch"])
            if trial.should_prune():
                raise optuna.TrialPruned(f"stopped after epoch {row['epoch']} by the pruner")

    run_plan = plan_run(str(source), None, None)
    summary = execute(
        run_plan,
        plan.folder / trial_name(trial.number),
        epochs=None,
        data_root=settings.data_root,
        download=False,
        device=settings.device,
        resume=False,
        display=settings.display_for(trial.number),
        on_epoch=report,
    )
    return [summary[column] for column in columns]
