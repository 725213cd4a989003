"""`daic run`: check a scheme and its network, lower them, train with a live display, evaluate, and keep
everything in a run folder.

The run folder holds the resolved sources (formatted), `run.json` (seed, device, command), `metrics.jsonl`
(one line per epoch), `checkpoint.pt` (written atomically after every epoch), and at the end
`summary.txt`, `summary.json` and `metrics.png`. Interrupting a run (Ctrl-C or SIGTERM) loses at most the
epoch in progress; `--resume` continues from the last checkpoint with the same schedules, optimizer state
and random streams (each epoch's randomness is seeded by the epoch, so a resumed epoch equals the original).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from daic.dsl import ast as A
from daic.dsl.diagnostics import Diagnostic
from daic.dsl.format import format_tree
from daic.dsl.parser import parse_net

from .check import check_source
from .lower import lower_network, lower_value
from .network import Network, analyze_net
from .program import Module, Program, SchemeInfo
from .sources import language_of, read

if TYPE_CHECKING:  # the runtime (and torch) is imported only when a run starts
    from torch import nn

    from daic.runtime.distributed import Group
    from daic.runtime.scheme import Scheme

T = TypeVar("T")


class RunError(Exception):
    """A problem the user can fix (bad sources, missing data, a run folder in the way); exit code 1."""

    def __init__(self, message: str, diagnostics: list[Diagnostic] | None = None, exit_code: int = 1):
        super().__init__(message)
        self.diagnostics = diagnostics or []
        self.exit_code = exit_code


@dataclass
class Plan:
    """Everything checked and resolved, before any tensor exists."""

    scheme_path: str
    scheme: SchemeInfo
    module: Module
    net_path: str
    net_text: str
    network: Network


def plan_run(scheme_path: str, scheme_name: str | None, net_override: str | None) -> Plan:
    if language_of(scheme_path) == "net":
        raise RunError(
            f"{scheme_path} is a network; `daic run` takes a .dai scheme (pass a network with --net)",
            exit_code=2,
        )
    if net_override is not None and language_of(net_override) != "net":
        raise RunError(f"--net takes a .net network file, not {net_override}", exit_code=2)
    report = check_source(read(scheme_path), Program(check_nets=net_override is None))
    errors = [d for d in report.diagnostics if d.is_error]
    if errors or report.module is None:
        raise RunError(f"{scheme_path} has errors", list(report.diagnostics))
    module = report.module
    if not module.schemes:
        raise RunError(f"{scheme_path} defines no scheme")
    if scheme_name is None:
        if len(module.schemes) > 1:
            names = ", ".join(module.schemes)
            raise RunError(
                f"{scheme_path} defines several schemes ({names}); choose one with --scheme", exit_code=2
            )
        scheme_name = next(iter(module.schemes))
    if scheme_name not in module.schemes:
        raise RunError(
            f"{scheme_path} has no scheme {scheme_name!r} (it has {', '.join(module.schemes)})", exit_code=2
        )
    info = module.schemes[scheme_name]
    if net_override is not None:
        net_path = net_override
    elif info.net_path is not None:
        net_path = info.net_path
    else:
        raise RunError(
            f'scheme {scheme_name} names no network: add `net = "file.net"` or pass --net', exit_code=2
        )
    return _with_network(scheme_path, info, module, net_path)


def _with_network(scheme_path: str, info: SchemeInfo, module: Module, net_path: str) -> Plan:
    source = read(net_path)
    data = info.built.args["data"]
    facts = data.decl.facts
    parsed = parse_net(source.text) if source.problem is None else None
    if parsed is None:
        raise RunError(f"{net_path} cannot be read", [source.problem])
    network = analyze_net(parsed.tree, facts["shape"], facts["classes"])
    problems = [replace(d, path=net_path) for d in (*parsed.diagnostics, *network.diagnostics)]
    if any(d.is_error for d in problems):
        raise RunError(f"{net_path} does not fit {data.decl.name}", problems)
    return Plan(scheme_path, info, module, net_path, source.text, network)


# --- the run folder ------------------------------------------------------------------------------------


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


class Interrupted(Exception):
    pass


class _Termination:
    """The SIGTERM handler: raises `Interrupted`, except while an epoch's metrics row and checkpoint are
    being written; a signal then waits until both are on disk, so that the folder never holds a row its
    checkpoint lacks (resuming would drop it, but a reader in between would see one epoch too many)."""

    def __init__(self) -> None:
        self.writing = False
        self.pending = False

    def __call__(self, signum, frame) -> None:
        if self.writing:
            self.pending = True
        else:
            raise Interrupted()

    @contextmanager
    def deferred(self) -> Iterator[None]:
        self.writing = True
        try:
            yield
        finally:
            self.writing = False
        if self.pending:
            raise Interrupted()


# --- running -------------------------------------------------------------------------------------------


def lowered(plan: Plan) -> tuple[Scheme, nn.Module]:
    """The plan's runtime scheme and its network, seeded and IBP-initialised with the scheme's seed: what a
    run trains (benchmarks time the same thing through this)."""
    import torch

    from daic.runtime import ibp_init_

    scheme = lower_value(plan.scheme.built)
    torch.manual_seed(scheme.seed)
    return scheme, ibp_init_(lower_network(plan.network), seed=scheme.seed)


def execute(
    plan: Plan,
    out: Path,
    *,
    epochs: int | None,
    data_root: str | None,
    download: bool,
    device: str,
    resume: bool,
    display,
    group: Group | None = None,
    amp: str | None = None,
) -> dict:
    """Train and evaluate; returns the summary. `display` receives progress (see cli.RunDisplay).

    `group` (a `runtime.distributed.Group`) makes this one of several processes training together: each
    trains on its share of every batch, and only rank 0 writes the run folder and shows progress; the
    others return rank 0's summary. `amp` ("bf16" or "fp16") runs the concrete passes in mixed precision.
    """
    import torch

    from daic.runtime import native
    from daic.runtime.distributed import DistributedError, Group, local_batch
    from daic.runtime.trainer import Trainer

    from .display import Silent

    group = group or Group(device=torch.device(device))
    if not group.is_main:
        display = Silent()
    scheme, model = lowered(plan)
    if epochs is not None:
        scheme.epochs = epochs
    try:
        local_batch(scheme.batch, group.world)
    except DistributedError as exc:
        raise RunError(str(exc), exit_code=2) from None
    data = _load_data(scheme, data_root, download, group)
    folder = RunFolder(out)
    resume = bool(group.broadcast(_main_first(group, lambda: folder.prepare(plan, resume))))
    trainer = Trainer(model, scheme, data, group=group, amp=amp)
    start = 0
    if resume:
        # Rank 0 reads the checkpoint and hands it round: on several machines only its own holds the folder.
        state = group.broadcast(_main_first(group, lambda: _resumable(folder.checkpoint, plan, scheme)))
        _restore(trainer, state, folder.checkpoint, plan)
        start = state["epoch"]
    elif group.is_main:
        folder.write_json(
            "run.json",
            {
                "scheme": plan.scheme.node.name,
                "seed": scheme.seed,
                "device": str(group.device),
                "processes": group.world,
                "amp": amp,
                "native_kernels": native.status() if group.device.type == "cpu" else "not used off the CPU",
                "epochs": scheme.epochs,
                "command": sys.argv,
                "started": time.time(),
            },
        )
    history = folder.history(start) if group.is_main else []
    display.start(plan, scheme, data, start, history)
    termination = _Termination()
    previous = signal.signal(signal.SIGTERM, termination)
    try:
        for epoch in range(start, scheme.epochs):
            row = trainer.train_epoch(epoch, display.progress(epoch, scheme.epochs))
            last = epoch + 1 == scheme.epochs
            if last or (epoch + 1) % scheme.test_every == 0:
                row.update(trainer.evaluate(on_progress=display.evaluating))
            with termination.deferred():
                if group.is_main:
                    _save_epoch(folder, row, trainer, plan, scheme)
                history.append(row)
                display.epoch_done(row)
    except (KeyboardInterrupt, Interrupted):
        display.interrupted(out)
        if not history:
            message = "interrupted before an epoch finished: run the same command again"
            raise RunError(message, exit_code=130) from None
        raise RunError(
            f"interrupted; the last finished epoch is saved: resume with --resume --out {out}", exit_code=130
        ) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        display.finish()
    summary = summarize(history) if group.is_main else None
    if group.is_main:
        folder.write_json("summary.json", summary)
        (out / "summary.txt").write_text(summary_text(summary) + "\n")
        plot_metrics(history, out / "metrics.png")
    return group.broadcast(summary)


def _resumable(path: Path, plan: Plan, scheme) -> dict:
    """The checkpoint at `path`, if it is one of this scheme's runs (the same scheme, data set, seed and
    optimizer: a checkpoint of another would load, or half load, and train on as something else)."""
    from daic.runtime.checkpoint import load

    try:
        state = load(path)
    except Exception as exc:  # torch.load raises many kinds (pickle, zip, EOF) for a file it cannot read
        raise RunError(
            f"{path} cannot be read ({exc.__class__.__name__}); the run cannot resume from it: start a new "
            "one with another --out",
            exit_code=2,
        ) from None
    expected = _identity(plan, scheme)
    differ = [
        f"{k} {state[k]!r} there, {v!r} here" for k, v in expected.items() if k in state and state[k] != v
    ]
    if differ or "model" not in state:
        raise RunError(
            f"{path} is from another run ({'; '.join(differ) or 'no network weights'}): resume with the "
            "scheme that started it, or start a new run with another --out",
            exit_code=2,
        )
    return state


def _restore(trainer, state: dict, path: Path, plan: Plan) -> None:
    try:
        trainer.load_state_dict(state)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise RunError(
            f"{path} does not fit {plan.net_path} and this scheme's optimizer: {str(exc).splitlines()[0]}",
            exit_code=2,
        ) from None


def _identity(plan: Plan, scheme) -> dict:
    """What a checkpoint records of the run it belongs to, and what resuming compares."""
    return {
        "scheme": plan.scheme.node.name,
        "dataset": plan.scheme.built.args["data"].decl.name,
        "seed": scheme.seed,
        "optimizer_type": type(scheme.optimizer).__name__,
    }


def _save_epoch(folder: RunFolder, row: dict, trainer, plan: Plan, scheme) -> None:
    """The epoch's metrics row, then its checkpoint. Metrics first: a crash between the two leaves a row the
    checkpoint does not cover, which `history` drops on resume, rather than a checkpoint whose epoch has
    no row."""
    from daic.runtime.checkpoint import save_atomic

    state = {
        **trainer.state_dict(),
        **_identity(plan, scheme),
        "epoch": row["epoch"],
        "epsilon": trainer.epsilon(row["epoch"]),
        "relu": scheme.relu,
    }
    try:
        folder.append_metrics(row)
        save_atomic(state, folder.checkpoint)
    except (OSError, RuntimeError) as exc:  # torch.save reports a full disk as a RuntimeError
        before = row["epoch"] - 1
        saved = (
            f"epoch {before} is saved: resume with --resume --out {folder.path}"
            if before
            else "nothing is saved"
        )
        reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
        raise RunError(f"cannot save epoch {row['epoch']} in {folder.path} ({reason}); {saved}") from None


def _main_first(group: Group, action: Callable[[], T]) -> T | None:
    """Runs `action` on rank 0 alone and tells the other processes whether it failed, so that a problem
    only rank 0 sees (a run folder in the way, no checkpoint to resume, a failed download) stops every
    process with rank 0's message instead of leaving the others waiting for it."""
    result, failure = None, None
    if group.is_main:
        try:
            result = action()
        except RunError as exc:
            failure = exc
    message = group.broadcast(None if failure is None else (str(failure), failure.exit_code))
    if failure is not None:
        raise failure
    if message is not None:
        raise RunError(message[0], exit_code=message[1])
    return result


def _load_data(scheme, data_root: str | None, download: bool, group: Group):
    """The data set, read by every process; rank 0 reads (and, with --download, fetches) it first, so
    that processes on one machine never download into the same folder at once."""
    from daic.runtime.data import DataError

    def read():
        try:
            return scheme.data.load(data_root, download)
        except DataError as exc:
            raise RunError(str(exc)) from None

    data = _main_first(group, read)
    return data if group.is_main else read()


def summarize(history: list[dict]) -> dict:
    """The paper's columns: seconds per epoch, and the last evaluation's percentages."""
    evaluated = [r for r in history if any(k.startswith(("Acc", "Ver", "MI-", "PGD")) for k in r)]
    final = evaluated[-1] if evaluated else {}
    seconds = [r["seconds"] for r in history]
    summary = {"epochs": len(history), "s/epoch": sum(seconds) / max(1, len(seconds))}
    summary.update({k: v for k, v in final.items() if k.startswith(("Acc", "Ver", "MI-", "PGD"))})
    return summary


def summary_text(summary: dict) -> str:
    names = {"Acc": "Acc %", "MI-FGSM": "Attck %", "PGD": "PGD %"}
    columns = [("s/epoch", f"{summary['s/epoch']:.1f}")] + [
        (names.get(k, k.replace("Ver ", "Ver ") + " %"), f"{v:.1f}")
        for k, v in summary.items()
        if k not in ("epochs", "s/epoch")
    ]
    widths = [max(len(a), len(b)) for a, b in columns]
    head = "  ".join(a.rjust(w) for (a, _), w in zip(columns, widths, strict=True))
    body = "  ".join(b.rjust(w) for (_, b), w in zip(columns, widths, strict=True))
    return f"{head}\n{body}"


def plot_metrics(history: list[dict], path: Path) -> None:
    """Loss and every percentage against epochs, as one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not history:
        return
    epochs = [r["epoch"] for r in history]
    percent = sorted({k for r in history for k in r if k.startswith(("Acc", "Ver", "MI-", "PGD"))})
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(epochs, [r["loss"] for r in history], marker="o")
    left.set(xlabel="epoch", ylabel="training loss", title="Loss")
    for key in percent:
        points = [(r["epoch"], r[key]) for r in history if key in r]
        right.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=key)
    right.set(xlabel="epoch", ylabel="% of test images", title="Test", ylim=(0, 100))
    if percent:
        right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
