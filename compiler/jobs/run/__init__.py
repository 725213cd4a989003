"""`daic run`: check a scheme and its network, lower them, train with a live display, evaluate, and keep
everything in a run folder.

The run folder holds the resolved sources (formatted), `run.json` (what the run is and where it ran),
`metrics.jsonl` (one line per epoch), `checkpoint.pt` (after every epoch), and at the end `summary.txt`,
`summary.json` and `metrics.png`, each written whole or not at all. Interrupting a run (Ctrl-C, SIGTERM, or
a kill at any moment) loses at most the epoch in progress; `--resume` continues from the last checkpoint
with the same schedules, optimizer state and random streams (each epoch's randomness is seeded by the
epoch, so a resumed epoch equals the original).

The package holds the run's parts: `plan` (checking and resolving the sources, and the run's definition),
`folder` (the run folder and its states), `start` (starting or resuming from the folder found), `loop`
(the epochs), `report` (the summary and the plot), and `stops` (named points where tests stop a run).
"""

from daic.compiler.jobs.run.loop import execute
from daic.compiler.jobs.run.plan import Plan, lowered, plan_run
from daic.compiler.jobs.run.report import plot_metrics, summarize, summary_text

__all__ = ["Plan", "execute", "lowered", "plan_run", "plot_metrics", "summarize", "summary_text"]
