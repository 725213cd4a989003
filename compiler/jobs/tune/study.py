"""Running a study: its Optuna study opened (or made) in its storage, then trials one after another until
the study has as many results as it asks for, whichever worker ran them.

Any number of workers may run one study at once, each `daic tune` with the same storage: Optuna's storage
hands each trial a number and records what every worker's trials chose and reached. A trial cut short (an
interrupt, a kill, a machine that went away) ends FAIL, so it never counts as a result: an interrupted
worker marks its own trial; a trial of a killed worker is marked by the next worker to start on the same
host (its process is gone), or on any host once its heartbeat is older than the grace period.
"""

from __future__ import annotations

import os
import socket
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from daic.compiler.jobs.tune.optuna_parts import GridError
from daic.compiler.jobs.tune.plan import StudyPlan
from daic.compiler.jobs.tune.trial import TrialSettings, option_labels, run_trial
from daic.compiler.lower import load_target
from daic.compiler.types import INT
from daic.errors import DaicError

HEARTBEAT = 20  # seconds between a running trial's heartbeats
GRACE = 120  # seconds without one before another host's trial counts as cut short
DEFINITION = "definition"
# Fields of a study that say how long it runs, not what it is: a study continued with more trials is the
# same study.
NOT_MEANING = ("study.trials",)
INTERRUPTED = 130  # the exit status of a run stopped by Ctrl-C or SIGTERM


def open_study(plan: StudyPlan):
    """The plan's Optuna study in its storage: made on first use, checked to be of the same sources
    after that."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Heartbeats are "experimental" since Optuna 2.9 and unchanged since; the warning says nothing to a user.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    plan.folder.mkdir(parents=True, exist_ok=True)
    storage = _storage(plan.storage)
    built = plan.info.built.args
    study = optuna.create_study(
        storage=storage,
        study_name=plan.name,
        directions=["maximize"] * len(plan.info.objectives),
        sampler=_sampler(plan),
        pruner=_pruner(built["pruner"]),
        load_if_exists=True,
    )
    _same_sources(plan, study)
    return study


def _storage(url: str, attempts: int = 5):
    """Optuna's storage at `url`. Workers started together on a new database race to make its tables, and
    the losers' attempts fail on what the winner made (`UNIQUE constraint failed: alembic_version`): a
    later attempt finds the tables made."""
    import optuna

    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs={"connect_args": {"timeout": 60}} if url.startswith("sqlite") else None,
                heartbeat_interval=HEARTBEAT,
                grace_period=GRACE,
            )
        except Exception as exc:  # SQLAlchemy's errors (a bad URL, a database away, a race) vary by engine
            failure = exc
            time.sleep(0.5 * (attempt + 1))
    message = f"cannot open the storage {url}: {str(failure).splitlines()[0]}"
    raise DaicError(message, exit_code=2) from None


def _sampler(plan: StudyPlan):
    value = plan.info.built.args["sampler"]  # every argument bound, defaults included
    try:
        return load_target(value.decl.target)(_grid(plan), **value.args)
    except GridError as exc:
        raise DaicError(f"study {plan.name}: {exc}", exit_code=2) from None


def _pruner(value):
    import optuna

    if value is None:
        return optuna.pruners.NopPruner()
    return load_target(value.decl.target)(**value.args)


def _grid(plan: StudyPlan) -> dict[str, list[object]] | None:
    """Every parameter's values, where all are finite and none lies inside a Choice's option; else None."""
    if plan.nested:
        return None
    grid: dict[str, list[object]] = {}
    for name, space in plan.spaces:
        if space.is_choice:
            grid[name] = list(option_labels(space))
        elif space.type == INT:
            low, high = space.options
            grid[name] = list(range(low, high + 1, space.step))
        else:
            return None
    return grid


def _same_sources(plan: StudyPlan, study) -> None:
    """The first worker records the study's meaning; a later one (or a resumed study) must share it."""
    definition = {k: v for k, v in plan.definition().items() if k not in NOT_MEANING}
    recorded = {k: v for k, v in (study.user_attrs.get(DEFINITION) or {}).items() if k not in NOT_MEANING}
    if not recorded:
        study.set_user_attr(DEFINITION, definition)
        return
    differ = [k for k in dict.fromkeys([*recorded, *definition]) if recorded.get(k) != definition.get(k)]
    if differ:
        listed = "".join(
            f"\n  {k}: was {recorded.get(k, 'unset')}, now {definition.get(k, 'unset')}" for k in differ
        )
        raise DaicError(
            f"the storage holds study {plan.name} of other sources; going on would mix trials of two "
            f"studies:{listed}\nrun it with the sources it started from, or give another --out or --storage",
            exit_code=2,
        )


def counts(study) -> tuple[int, int]:
    """(results, running): trials that ended complete or pruned, and trials still running."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    ended = sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
    return ended, sum(t.state == TrialState.RUNNING for t in trials)


def fail_dead_trials(study) -> list[int]:
    """Marks FAIL the running trials of this host whose worker process is gone (killed, or its machine
    restarted); returns their numbers. Other hosts' are Optuna's to fail, by their heartbeats."""
    import optuna
    from optuna.trial import TrialState

    here = socket.gethostname()
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = trial.user_attrs.get("worker") or {}
        if worker.get("host") == here and not _alive(worker.get("pid")):
            study.tell(trial.number, state=TrialState.FAIL)
            failed.append(trial.number)
    optuna.storages.fail_stale_trials(study)
    return failed


def _alive(pid: object) -> bool:
    if not isinstance(pid, int):
        return True  # a trial that has not said yet which process runs it: give it its heartbeat's time
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid != os.getpid()  # this process runs no trial yet: a trial that names it is an old one's


def work(plan: StudyPlan, settings: TrialSettings, on_trial: Callable[[object, object], None]):
    """Runs trials until the study has its number of results (counting the trials other workers are
    running); `on_trial` sees the study and each trial of this worker as it ends. Returns the study."""
    study = open_study(plan)
    fail_dead_trials(study)
    wanted = plan.info.built.args["trials"]
    with _quiet_when_interrupted() as interrupted:

        def objective(trial) -> list[float]:
            try:
                return run_trial(plan, trial, settings)
            except DaicError as exc:
                if exc.exit_code == INTERRUPTED:
                    interrupted()
                raise

        while sum(counts(study)) < wanted:
            study.optimize(objective, n_trials=1, callbacks=[on_trial])
    return study


@contextmanager
def _quiet_when_interrupted() -> Iterator[Callable[[], None]]:
    """Optuna logs a trial that raises with its traceback, a warning meant for a failing objective. A
    trial the user interrupted has not failed: once told so (the call yielded), Optuna's log is silenced
    while it marks the trial, and the command says in one line what happened and how to continue."""
    import optuna

    was = optuna.logging.get_verbosity()
    try:
        yield lambda: optuna.logging.set_verbosity(optuna.logging.CRITICAL)
    finally:
        optuna.logging.set_verbosity(was)
