"""The report of a run: the paper's columns (summary.txt, summary.json) and the metrics plot."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence

from daic.compiler.jobs.run.folder import RunFolder
from daic.errors import DaicError


def write_report(folder: RunFolder, history: list[dict], columns: Sequence[str]) -> dict:
    """summary.json, summary.txt and metrics.png, each written whole or not at all; returns the summary. A
    full disk loses nothing: every epoch is saved already, and --resume writes the report again. `columns`
    are the scheme's tests' result columns."""
    summary = summarize(history, columns)
    files = {
        "summary.json": json.dumps(summary, indent=2) + "\n",
        "summary.txt": summary_text(summary) + "\n",
    }
    try:
        for name, text in files.items():
            folder.write(name, text.encode("utf-8"))
        if history:
            folder.write("metrics.png", plot_metrics(history, columns))
    except OSError as exc:
        raise DaicError(
            f"cannot write the report in {folder.path} ({exc.strerror or exc}); every epoch is saved: free "
            f"some space and run the same command with --resume --out {folder.path} to write it",
            exit_code=2,
        ) from None
    return summary


def test_results(row: dict, columns: Sequence[str]) -> dict[str, float]:
    """The test results of a metrics row (present after an evaluation), in the order of `columns`."""
    return {c: row[c] for c in columns if c in row}


def summarize(history: list[dict], columns: Sequence[str]) -> dict:
    """The paper's columns: seconds per epoch, and the last evaluation's percentages."""
    evaluated = [r for r in history if test_results(r, columns)]
    final = evaluated[-1] if evaluated else {}
    seconds = [r["seconds"] for r in history]
    summary = {"epochs": len(history), "s/epoch": sum(seconds) / max(1, len(seconds))}
    summary.update(test_results(final, columns))
    return summary


def summary_text(summary: dict) -> str:
    columns = [("s/epoch", f"{summary['s/epoch']:.1f}")] + [
        (f"{k} %", f"{v:.1f}") for k, v in summary.items() if k not in ("epochs", "s/epoch")
    ]
    widths = [max(len(a), len(b)) for a, b in columns]
    head = "  ".join(a.rjust(w) for (a, _), w in zip(columns, widths, strict=True))
    body = "  ".join(b.rjust(w) for (_, b), w in zip(columns, widths, strict=True))
    return f"{head}\n{body}"


def plot_metrics(history: list[dict], columns: Sequence[str]) -> bytes:
    """Loss and every percentage against epochs, as one PNG. Drawn in memory, so that a disk that fills
    while it is written leaves no half an image (the caller writes it whole)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] for r in history]
    percent = [c for c in columns if any(c in r for r in history)]
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
    image = io.BytesIO()
    try:
        figure.savefig(image, format="png", dpi=100)
    finally:
        plt.close(figure)
    return image.getvalue()
