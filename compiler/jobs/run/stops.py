"""Named points of a run where a test stops it as a kill would.

`DAIC_STOP_AT=POINT` (or `POINT:SIGTERM`, `POINT:SIGINT`) makes the run send itself that signal (SIGKILL by
default) when it reaches POINT, so that a test can cut a run at an exact step of its start-up or of an
epoch and check that the same command, or `--resume`, continues from the folder it left.
"""

from __future__ import annotations

import os
import signal

STOP_VARIABLE = "DAIC_STOP_AT"

# In the order a run reaches them.
STOP_POINTS = (
    "data-loaded",  # the data set is in memory; the run folder is untouched
    "folder-made",  # the folder exists (and stale temporaries are gone); run.json is not written
    "recorded",  # run.json is written; the sources are not copied
    "copied",  # the sources are copied; no epoch has begun
    "checkpoint-written",  # an epoch's checkpoint is in its temporary file, not yet renamed into place
    "epoch-saved",  # an epoch's metrics row and checkpoint are saved
    "resumed",  # a resumed run has recorded this session in run.json; no epoch has begun
    "reported",  # the summary and the plot are written; run.json is not yet marked finished
)


def stop_point(name: str) -> None:
    """Stop here if DAIC_STOP_AT names this point."""
    wanted = os.environ.get(STOP_VARIABLE)
    if not wanted:
        return
    point, _, signal_name = wanted.partition(":")
    if point == name:
        os.kill(os.getpid(), getattr(signal, signal_name or "SIGKILL"))
