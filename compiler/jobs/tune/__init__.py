"""`daic tune`: a study of a scheme's search spaces, run with Optuna.

`plan` checks the file and finds the study, its parameters, folder and storage; `study` opens the Optuna
study and runs trials until it has its results (several workers may share one storage); `trial` chooses
one trial's values, writes its scheme and runs it as an ordinary `daic run`; `report` hands back the table,
the best trial or Pareto front tested once on the test set, `best.dai` and `pareto.png`; `optuna_parts`
builds Optuna's samplers and pruners from their declarations.
"""

from daic.compiler.jobs.tune.plan import StudyPlan, plan_study
from daic.compiler.jobs.tune.report import StudyReport, progress_text, report_study, report_text
from daic.compiler.jobs.tune.study import work
from daic.compiler.jobs.tune.trial import TrialSettings

__all__ = [
    "StudyPlan",
    "StudyReport",
    "TrialSettings",
    "plan_study",
    "progress_text",
    "report_study",
    "report_text",
    "work",
]
