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
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from daic.dsl.diagnostics import Diagnostic
from daic.dsl.format import format_tree
from daic.dsl.parser import parse_net

from .check import check_source
from .lower import lower_network, lower_value
from .network import Network, analyze_net
from .program import Module, Program, SchemeInfo
from .sources import read


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
    report = check_source(read(scheme_path), Program())
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

    def prepare(self, plan: Plan, resume: bool) -> None:
        if resume:
            if not self.checkpoint.exists():
                raise RunError(f"{self.path} has no checkpoint to resume from", exit_code=2)
            return
        if self.checkpoint.exists() or self.metrics.exists():
            raise RunError(
                f"{self.path} already holds a run: pass --resume to continue it, or choose another --out",
                exit_code=2,
            )
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / Path(plan.scheme_path).name).write_text(format_tree(plan.module.tree))
        (self.path / Path(plan.net_path).name).write_text(format_tree(parse_net(plan.net_text).tree))

    def write_json(self, name: str, data: object) -> None:
        (self.path / name).write_text(json.dumps(data, indent=2) + "\n")

    def append_metrics(self, row: dict) -> None:
        with open(self.metrics, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")

    def history(self, upto_epoch: int) -> list[dict]:
        """Metrics rows of the epochs a checkpoint covers (later rows belong to a lost epoch)."""
        if not self.metrics.exists():
            return []
        rows = [json.loads(line) for line in self.metrics.read_text().splitlines() if line.strip()]
        kept = [r for r in rows if r["epoch"] <= upto_epoch]
        if len(kept) != len(rows):
            self.metrics.write_text("".join(json.dumps(r) + "\n" for r in kept))
        return kept


class Interrupted(Exception):
    pass


def _raise_interrupt(signum, frame):
    raise Interrupted()


# --- running -------------------------------------------------------------------------------------------


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
) -> dict:
    """Train and evaluate; returns the summary. `display` receives progress (see cli.RunDisplay)."""
    import torch

    from daic.runtime import ibp_init_
    from daic.runtime.checkpoint import load, save_atomic
    from daic.runtime.data import DataError
    from daic.runtime.trainer import Trainer

    scheme = lower_value(plan.scheme.built)
    if epochs is not None:
        scheme.epochs = epochs
    torch.manual_seed(scheme.seed)
    model = lower_network(plan.network)
    ibp_init_(model, seed=scheme.seed)
    try:
        data = scheme.data.load(data_root, download)
    except DataError as exc:
        raise RunError(str(exc)) from None
    folder = RunFolder(out)
    folder.prepare(plan, resume)
    trainer = Trainer(model, scheme, data, device)
    start = 0
    if resume:
        state = load(folder.checkpoint, device)
        model.load_state_dict(state["model"])
        trainer.optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]
    else:
        folder.write_json(
            "run.json",
            {
                "scheme": plan.scheme.node.name,
                "seed": scheme.seed,
                "device": str(device),
                "epochs": scheme.epochs,
                "command": sys.argv,
                "started": time.time(),
            },
        )
    history = folder.history(start)
    display.start(plan, scheme, data, start, history)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        for epoch in range(start, scheme.epochs):
            row = trainer.train_epoch(epoch, display.progress(epoch, scheme.epochs))
            last = epoch + 1 == scheme.epochs
            if last or (epoch + 1) % scheme.test_every == 0:
                row.update(trainer.evaluate(on_progress=display.evaluating))
            # Metrics first: a crash between the two leaves a row the checkpoint does not cover, which
            # `history` drops on resume, rather than a checkpoint whose epoch has no row.
            folder.append_metrics(row)
            save_atomic(
                {
                    "model": model.state_dict(),
                    "optimizer": trainer.optimizer.state_dict(),
                    "epoch": epoch + 1,
                    "scheme": plan.scheme.node.name,
                    "seed": scheme.seed,
                    "dataset": plan.scheme.built.args["data"].decl.name,
                    "epsilon": trainer.epsilon(epoch + 1),
                    "relu": scheme.relu,
                },
                folder.checkpoint,
            )
            history.append(row)
            display.epoch_done(row)
    except (KeyboardInterrupt, Interrupted):
        display.interrupted(out)
        raise RunError(
            f"interrupted; the last finished epoch is saved: resume with --resume --out {out}", exit_code=130
        ) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        display.finish()
    summary = summarize(history)
    folder.write_json("summary.json", summary)
    (out / "summary.txt").write_text(summary_text(summary) + "\n")
    plot_metrics(history, out / "metrics.png")
    return summary


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
