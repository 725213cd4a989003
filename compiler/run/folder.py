"""The run folder: the resolved sources, run.json, metrics.jsonl and the checkpoint, and which files are the
run's own."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from daic.dsl import ast as A
from daic.dsl.format import format_tree
from daic.dsl.parser import parse_net

from .errors import RunError
from .plan import Plan


class RunFolder:
    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def checkpoint(self) -> Path:
        return self.path / "checkpoint.pt"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def started(self) -> bool:
        """A run began here (its run.json), whether or not it finished an epoch."""
        return (self.path / "run.json").exists()

    def prepare(self, plan: Plan, resume: bool) -> bool:
        """Make the folder ready; returns whether the run resumes from a checkpoint. A run that never
        finished an epoch (interrupted in the first, or no checkpoint written) simply starts again, with
        or without --resume. Files that are not this run's are never overwritten."""
        if resume and self.checkpoint.exists():
            return True
        if resume and not self.started:
            raise RunError(f"{self.path} has no checkpoint to resume from", exit_code=2)
        if not resume and self.checkpoint.exists():
            raise RunError(
                f"{self.path} already holds a run: pass --resume to continue it, or choose another --out",
                exit_code=2,
            )
        copies = {
            Path(plan.scheme_path).name: _scheme_copy(plan, self.path),
            Path(plan.net_path).name: format_tree(parse_net(plan.net_text).tree),
        }
        if not self.started:
            written = [*copies, "run.json", self.metrics.name, *SUMMARY_FILES]
            in_the_way = [name for name in written if (self.path / name).exists()]
            if in_the_way:
                raise RunError(
                    f"{self.path} already has {', '.join(in_the_way)}, which a run would overwrite: "
                    "choose a new or empty folder with --out",
                    exit_code=2,
                )
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self.metrics.unlink(missing_ok=True)  # rows of an attempt that saved no checkpoint
            for name, text in copies.items():
                (self.path / name).write_text(text)
        except OSError as exc:
            raise RunError(
                f"cannot write the run folder {self.path}: {exc.strerror or exc}", exit_code=2
            ) from None
        return False

    def write_json(self, name: str, data: object) -> None:
        (self.path / name).write_text(json.dumps(data, indent=2) + "\n")

    def append_metrics(self, row: dict) -> None:
        with open(self.metrics, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")

    def history(self, upto_epoch: int) -> list[dict]:
        """Metrics rows of the epochs a checkpoint covers (later rows belong to a lost epoch, and a row cut
        short by a crash while it was appended is no row)."""
        if not self.metrics.exists():
            return []
        lines = [line for line in self.metrics.read_text().splitlines() if line.strip()]
        kept = [row for line in lines if (row := _row(line)) is not None and row["epoch"] <= upto_epoch]
        if len(kept) != len(lines):
            self.metrics.write_text("".join(json.dumps(r) + "\n" for r in kept))
        return kept


SUMMARY_FILES = ("summary.json", "summary.txt", "metrics.png")


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
        if own is not None:
            value = A.String(net, span=own.value.span)
            return replace(
                node, fields=tuple(replace(f, value=value) if f is own else f for f in node.fields)
            )
        # Inherited from a base: set here, on the scheme's own line.
        field = A.Field(
            "net", A.String(net, span=node.name_span), span=node.name_span, name_span=node.name_span
        )
        return replace(node, fields=(field, *node.fields))

    tree = plan.module.tree
    statements = tuple(
        with_net(s) if isinstance(s, A.Scheme) else with_path(s) if isinstance(s, A.Import) else s
        for s in tree.statements
    )
    return format_tree(replace(tree, statements=statements))


def _row(line: str) -> dict | None:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    return row if isinstance(row, dict) and isinstance(row.get("epoch"), int) else None
