"""The report of a run: the paper's columns (summary.txt, summary.json) and the metrics plot."""

from __future__ import annotations

from pathlib import Path


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
