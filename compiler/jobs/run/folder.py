"""The run folder, and what it guarantees after a kill at any moment.

A run folder is in one of four states, read from its files (`RunFolder.state`):

- nothing: no run.json. No run began here; a run may start (files that are not a run's are never
  overwritten: a folder that has them is refused).
- started: run.json but no checkpoint. A run began and finished no epoch; it starts again, from the same
  command or with --resume.
- has a checkpoint: --resume continues after the checkpoint's epoch; the same command without it is refused.
- finished: run.json says so (the report is written); --resume writes the report again, or trains on when
  the epochs were raised.

A run moves through them in this order, and every file is written whole or not at all (a temporary file
beside it, synced, then renamed over it; `daic.files.write_atomic`): the folder is made, run.json
is written (started), the sources are copied, then each epoch appends its metrics row and renames its
checkpoint into place (has a checkpoint), and at the end the report is written and run.json marked
finished. A kill between any two steps therefore leaves one of the four states, which the same command
or --resume continues; a kill while a file is written leaves at most its temporary file, which the next
start removes. run.json lists the run's own files, so that a restart knows what it may replace.
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from daic.compiler.checking.sources import RUN_RECORD
from daic.compiler.jobs.run.plan import Plan
from daic.compiler.jobs.run.stops import stop_point
from daic.dsl import ast as A
from daic.dsl.format import format_tree
from daic.errors import DaicError


class State(enum.Enum):
    NOTHING = "nothing"
    STARTED = "started"
    CHECKPOINT = "has a checkpoint"
    FINISHED = "finished"


RECORD = RUN_RECORD
METRICS = "metrics.jsonl"
CHECKPOINT = "checkpoint.pt"
REPORT_FILES = ("summary.json", "summary.txt", "metrics.png")
RUN_FILES = (RECORD, METRICS, CHECKPOINT, *REPORT_FILES)  # besides the copies of the sources


class RunFolder:
    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def checkpoint(self) -> Path:
        return self.path / CHECKPOINT

    @property
    def metrics(self) -> Path:
        return self.path / METRICS

    def state(self) -> State:
        if not (self.path / RECORD).is_file():
            return State.NOTHING
        if "finished" in self.record():
            return State.FINISHED
        return State.CHECKPOINT if self.checkpoint.is_file() else State.STARTED

    def record(self) -> dict[str, Any]:
        """run.json (written whole, so unreadable only if something else changed it)."""
        path = self.path / RECORD
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise DaicError(
                f"cannot read {path} ({reason}): this folder's run cannot continue; choose another --out",
                exit_code=2,
            ) from None
        if not isinstance(record, dict):
            raise DaicError(f"{path} is not a run's record: choose another --out", exit_code=2)
        return record

    def begin(self, copies: dict[str, str], record: dict[str, Any]) -> None:
        """Nothing or started -> started: write run.json (listing the run's files), remove what an earlier
        attempt that saved no epoch left, and copy the sources. Refuses a folder holding files a run would
        write that are not its own."""
        own = self._own_files() if (self.path / RECORD).is_file() else set()
        in_the_way = [n for n in (*copies, *RUN_FILES) if n not in own and (self.path / n).exists()]
        if in_the_way:
            raise DaicError(
                f"{self.path} already has {', '.join(in_the_way)}, which a run would overwrite: "
                "choose a new or empty folder with --out",
                exit_code=2,
            )
        with _writing(self.path):
            self.path.mkdir(parents=True, exist_ok=True)
            self.remove_temporaries(list(copies))
            stop_point("folder-made")
            self.write_record({**record, "files": list(copies)})
            stop_point("recorded")
            # What an earlier attempt, which saved no epoch, left: its rows, and copies under other names.
            for name in (own - set(RUN_FILES) - set(copies)) | {METRICS, *REPORT_FILES}:
                (self.path / name).unlink(missing_ok=True)
            for name, text in copies.items():
                self.write(name, text.encode("utf-8"))
            stop_point("copied")

    def _own_files(self) -> set[str]:
        files = self.record().get("files", [])
        return set(RUN_FILES) | {f for f in files if isinstance(f, str) and "/" not in f}

    def remove_temporaries(self, copies: list[str]) -> None:
        """The temporary files a kill left while one of the run's files was being written."""
        from daic.files import temporaries

        for name in {*RUN_FILES, *copies}:
            for stale in temporaries(self.path / name):
                stale.unlink(missing_ok=True)

    def write(self, name: str, data: bytes) -> None:
        """One of the run's files, whole or not at all."""
        from daic.files import write_atomic

        write_atomic(self.path / name, lambda handle: handle.write(data))

    def write_record(self, record: dict[str, Any]) -> None:
        self.write(RECORD, (json.dumps(record, indent=2) + "\n").encode("utf-8"))

    def finish(self, when: float) -> None:
        """-> finished."""
        with _writing(self.path):
            self.write_record({**self.record(), "finished": when})

    def append_metrics(self, row: dict) -> None:
        """The epoch's row, on disk before its checkpoint is (a crash of the machine must not keep the
        checkpoint and lose the row)."""
        with open(self.metrics, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        from daic.runtime.checkpoint import save_atomic

        save_atomic(state, self.checkpoint, before_rename=lambda: stop_point("checkpoint-written"))

    def history(self, upto_epoch: int) -> list[dict]:
        """Metrics rows of the epochs a checkpoint covers (later rows belong to a lost epoch, and a row cut
        short by a crash while it was appended is no row)."""
        if not self.metrics.exists():
            return []
        lines = [line for line in self.metrics.read_text().splitlines() if line.strip()]
        kept = [row for line in lines if (row := _row(line)) is not None and row["epoch"] <= upto_epoch]
        if len(kept) != len(lines):
            with _writing(self.path):
                self.write(METRICS, "".join(json.dumps(r) + "\n" for r in kept).encode("utf-8"))
        return kept


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """Turns a failure to write the run folder into a message the user can act on."""
    try:
        yield
    except OSError as exc:
        message = f"cannot write the run folder {path}: {exc.strerror or exc}"
        raise DaicError(message, exit_code=2) from None


def source_copies(plan: Plan, folder: Path) -> dict[str, str]:
    """The run's sources, formatted, by the names they take in the run folder."""
    return {
        Path(plan.scheme_path).name: _scheme_copy(plan, folder),
        Path(plan.net_path).name: format_tree(plan.net_tree),
    }


def _scheme_copy(plan: Plan, folder: Path) -> str:
    """The scheme file, formatted, for the run folder. The run's scheme names the network copied beside it
    (the path written in it, relative to its own folder or replaced by --net, would not lead there); the
    other schemes' `net` paths and the imported files are rewritten relative to the folder, so that the
    copy checks as it is."""
    run_node = plan.scheme.node
    here = Path(plan.scheme_path).parent

    def from_folder(written: str) -> str | None:
        """`written` (relative to the scheme's folder) relative to the run folder, if it names a file."""
        target = here / written
        return os.path.relpath(target.resolve(), folder.resolve()) if target.is_file() else None

    def with_path(node: A.Import) -> A.Import:
        moved = from_folder(node.target.value) if isinstance(node.target, A.String) else None
        return replace(node, target=A.String(moved, span=node.target.span)) if moved else node

    def with_net(node: A.Scheme) -> A.Scheme:
        own = node.get_field("net")
        written = own.value.value if own is not None and isinstance(own.value, A.String) else None
        if node is run_node:
            net = Path(plan.net_path).name
        elif written is not None and (moved := from_folder(written)) is not None:
            net = moved
        else:
            return node  # a shipped stdlib/ network, or one that is not there: as written
        return _net_set(node, net)

    tree = plan.module.tree
    statements = tuple(
        with_net(s) if isinstance(s, A.Scheme) else with_path(s) if isinstance(s, A.Import) else s
        for s in tree.statements
    )
    return format_tree(replace(tree, statements=statements))


def _net_set(node: A.Scheme, net: str) -> A.Scheme:
    """`node` with its `net` field saying `net`; one it inherits from a base is set on its own line."""
    own = node.get_field("net")
    if own is not None:
        value = A.String(net, span=own.value.span)
        return replace(node, fields=tuple(replace(f, value=value) if f is own else f for f in node.fields))
    field = A.Field("net", A.String(net, span=node.name_span), span=node.name_span, name_span=node.name_span)
    return replace(node, fields=(field, *node.fields))


def _row(line: str) -> dict | None:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not (isinstance(row, dict) and isinstance(row.get("epoch"), int)):
        return None
    if "train_epsilon" not in row and "epsilon" in row:  # rows written by an earlier daic name it `epsilon`
        row["train_epsilon"] = row.pop("epsilon")
    return row
