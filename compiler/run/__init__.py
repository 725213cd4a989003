"""`daic run`: check a scheme and its network, lower them, train with a live display, evaluate, and keep
everything in a run folder.

The run folder holds the resolved sources (formatted), `run.json` (seed, device, command), `metrics.jsonl`
(one line per epoch), `checkpoint.pt` (written atomically after every epoch), and at the end
`summary.txt`, `summary.json` and `metrics.png`. Interrupting a run (Ctrl-C or SIGTERM) loses at most the
epoch in progress; `--resume` continues from the last checkpoint with the same schedules, optimizer state
and random streams (each epoch's randomness is seeded by the epoch, so a resumed epoch equals the original).

The package holds the run's parts: `plan` (checking and resolving the sources), `folder` (the run folder),
`loop` (the epochs) and `report` (the summary and the plot).
"""

from .errors import RunError
from .loop import execute
from .plan import Plan, lowered, plan_run
from .report import plot_metrics, summarize, summary_text

__all__ = ["Plan", "RunError", "execute", "lowered", "plan_run", "plot_metrics", "summarize", "summary_text"]
