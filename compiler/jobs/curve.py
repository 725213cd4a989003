"""Certified accuracy against epsilon: `daic verify` given several radii certifies each, in a record of its
own, and draws accuracy, accuracy under attack and the share each cascade step has certified against the
radius (`<record>.curve.png`, with the figures in `<record>.curve.json`).

Radii are certified middle first, then the middles of what is left on either side, so that each image's
verdicts at the radii done decide it at others: a ball inside a verified ball is verified (by the same
step, unless a cheaper step of the cascade, which is tried, verifies it too), and a counterexample in a
ball is in every larger ball. Such rows say `"reused": r`, the radius whose verdict they carry.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daic.compiler.jobs.verify import Record, Settings, certify_radius, prepare
from daic.compiler.jobs.weights import certified_epsilon
from daic.errors import DaicError

if TYPE_CHECKING:
    from daic.runtime.training.distributed import Group

RANGE = re.compile(r"^\s*([^:]+):([^:]+):(\d+)\s*$")


def radii(written: Sequence[str]) -> list[float]:
    """`--eps` values: numbers, or ranges `START:STOP:COUNT` (COUNT radii from START to STOP, both ends
    included); sorted, each once. Whether each is a radius is checked where it is used."""
    found: list[float] = []
    for text in written:
        match = RANGE.match(text)
        try:
            if match is None:
                found.append(float(text))
                continue
            start, stop, count = float(match.group(1)), float(match.group(2)), int(match.group(3))
        except ValueError:
            raise DaicError(
                f"--eps {text}: a number, or START:STOP:COUNT (0.02:0.2:10)", exit_code=2
            ) from None
        if count < 2 or not start < stop:
            raise DaicError(
                f"--eps {text}: a range runs up from START to STOP in 2 or more radii", exit_code=2
            )
        # To 12 digits: 0.02:0.06:3 is 0.02, 0.04, 0.06, not 0.039999999999999994.
        found.extend(float(f"{start + (stop - start) * k / (count - 1):.12g}") for k in range(count))
    return sorted(set(found))


def middle_first(values: list[float]) -> list[float]:
    """The values in the order a bisection visits them: the middle, then the middles of either side."""
    if not values:
        return []
    mid = len(values) // 2
    left, right = middle_first(values[:mid]), middle_first(values[mid + 1 :])
    order = [values[mid]]
    for a, b in zip(left, right, strict=False):
        order += [a, b]
    longer = left if len(left) > len(right) else right
    return order + longer[min(len(left), len(right)) :]


def beside(out: Path, suffix: str) -> Path:
    """A file of a curve beside its record `NAME.jsonl`: `NAME{suffix}`."""
    stem = out.name[: -len(".jsonl")] if out.name.endswith(".jsonl") else out.name
    return out.with_name(stem + suffix)


def record_at(out: Path, epsilon: float) -> Path:
    """The record of one radius of a curve: `NAME.eps0.05.jsonl` beside `NAME.jsonl`."""
    return beside(out, f".eps{epsilon:g}.jsonl")


class Known:
    """The verdicts of the radii done, by image: what they decide at another radius."""

    def __init__(self) -> None:
        self.rows: dict[float, dict[int, dict[str, Any]]] = {}

    def add(self, epsilon: float, rows: list[dict[str, Any]]) -> None:
        self.rows[epsilon] = {row["index"]: row for row in rows}

    def _carried(self, epsilon: float, index: int) -> dict[str, Any] | None:
        """A row that decides image `index` at `epsilon`: verified at a radius at least as large (the
        nearest), or falsified at one at most as large."""
        for other in sorted(self.rows, key=lambda r: abs(r - epsilon)):
            row = self.rows[other].get(index)
            if row is None:
                continue
            if (row["status"] == "verified" and other >= epsilon) or (
                row["status"] == "falsified" and other <= epsilon
            ):
                return {**row, "seconds": 0.0, "reused": other}
        return None

    def settle(self, epsilon: float, todo: list[int], steps, run, on_row) -> list[int]:
        """Writes (through `on_row`) what the other radii decide of `todo`; an image verified elsewhere by
        a later step first goes through the steps before it (`run(steps, images, on_outcome)`), which may
        verify it too. Returns the images still to certify with the whole cascade."""
        left: list[int] = []
        by_step: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for index in todo:
            row = self._carried(epsilon, index)
            if row is None:
                left.append(index)
            elif row["status"] == "verified":
                by_step.setdefault(row["domain"], []).append((index, row))
            else:
                on_row(row)
        labels = [step.label for step in steps]
        for label, carried in by_step.items():
            cheaper = [s for s in steps[: labels.index(label)] if s.verifies]
            rows = dict(carried)
            if cheaper:

                def keep(outcome, rows=rows) -> None:  # a cheaper step's proof, else the carried one
                    on_row(outcome.record() if outcome.status == "verified" else rows[outcome.index])

                run(cheaper, list(rows), keep)
            else:
                for row in rows.values():
                    on_row(row)
        return left


def verify_curve(
    settings: Settings, epsilons: list[float], group: Group, display: Callable[[Counter, int, float], None]
) -> list[dict[str, Any]]:
    """Certifies every radius (each its own record, resumable), middle first; returns their summaries in
    increasing radius, and writes the curve's figure and figures beside `settings.out`."""
    if group.active:
        raise DaicError(
            "a curve of several --eps runs in one process: leave out --nproc-per-node", exit_code=2
        )
    certification = prepare(settings, group)
    for epsilon in epsilons:
        certified_epsilon(certification.state, epsilon)  # each a radius, before any record is touched
    known = Known()
    summaries: dict[float, dict[str, Any]] = {}
    for epsilon in middle_first(epsilons):
        out = record_at(settings.out, epsilon)
        summaries[epsilon] = certify_radius(
            certification, epsilon, out, settings.resume, group, display, known
        )
        known.add(epsilon, Record.rows_of(out))
    curve = [summaries[e] for e in epsilons]
    write_curve(settings.out, curve)
    return curve


def cumulative(summary: dict[str, Any]) -> dict[str, float]:
    """The share of the images certified once each (non-attack) step of the cascade has run."""
    from daic.runtime.certification.certify import Attack

    n, total, shares = max(1, summary["images"]), 0, {}
    for label in summary["cascade"]:
        if label == Attack.label:
            continue
        total += summary["verified_by"].get(label, 0)
        shares[label] = 100.0 * total / n
    return shares


def write_curve(out: Path, curve: list[dict[str, Any]]) -> None:
    figures = [
        {
            "epsilon": s["epsilon"],
            "accuracy": s["accuracy_percent"],
            "attack_accuracy": s.get("attack_accuracy_percent"),
            "certified_after": cumulative(s),
            "unknown": s["unknown"],
        }
        for s in curve
    ]
    from daic.files import write_atomic

    for suffix, data in ((".curve.json", (json.dumps(figures, indent=2) + "\n").encode()),
                         (".curve.png", plot_curve(figures))):  # fmt: skip
        write_atomic(beside(out, suffix), lambda handle, data=data: handle.write(data))


def plot_curve(figures: list[dict[str, Any]]) -> bytes:
    """Accuracy, accuracy under attack and the certified share after each step, against epsilon."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps = [f["epsilon"] for f in figures]
    figure, axes = plt.subplots(figsize=(6.5, 4.5))
    axes.plot(eps, [f["accuracy"] for f in figures], "k-", label="accuracy")
    if figures[0]["attack_accuracy"] is not None:
        axes.plot(eps, [f["attack_accuracy"] for f in figures], "k--", label="accuracy under attack")
    steps = list(figures[0]["certified_after"])
    for k, step in enumerate(steps):
        label = "certified: " + " > ".join(steps[: k + 1])
        axes.plot(eps, [f["certified_after"][step] for f in figures], "o-", label=label)
    axes.set(xlabel="epsilon", ylabel="% of test images", ylim=(0, 100), title="Certified accuracy")
    axes.legend(fontsize="small")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()


def curve_table(curve: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The curve as a table: a row per radius."""
    steps = list(cumulative(curve[0]))
    head = ["eps", "accuracy", "under attack", *(f"certified > {s}" for s in steps), "unknown"]
    rows = []
    for s in curve:
        shares = cumulative(s)
        attack = s.get("attack_accuracy_percent")
        rows.append(
            [
                f"{s['epsilon']:.6g}",
                f"{s['accuracy_percent']:.2f}%",
                "-" if attack is None else f"{attack:.2f}%",
            ]
            + [f"{shares[step]:.2f}%" for step in steps]
            + [f"{s['unknown']:,}"]
        )
    return head, rows
