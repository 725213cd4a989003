"""daic beside alpha-beta-CROWN on the same VNN-LIB properties: verdicts, seconds and the images one
decides and the other does not.

Both tools run on what `daic export --onnx DIR/net.onnx --vnnlib DIR` writes (instances.csv in DIR), one
CPU thread each, the same limit per property:

    daic verify --vnnlib DIR/instances.csv --timeout 20 --threads 1 --out daic.jsonl
    python abcrown.py --config CONFIG --root_path DIR --csv_name instances.csv \
        --override_timeout 20 --results_file abcrown.pkl        # in alpha-beta-CROWN's own environment
    python bench/verifiers.py --daic daic.jsonl --abcrown abcrown.pkl --csv DIR/instances.csv --timeout 20

At a longer limit, the properties each tool left unknown are run again (a csv of those lines): give each
tool's records in order, `--daic d20.jsonl d60.jsonl --abcrown a20.pkl a60.pkl --csv all.csv open60.csv`,
and a property's verdict is the last record's that holds it.

alpha-beta-CROWN's results file is a pickle: ``summary`` maps each status to the instances (csv rows)
that ended so, ``results`` holds ``[status, seconds]`` in the order they ran. Its statuses: ``safe`` and
``safe-incomplete`` (verified), ``unsafe-pgd`` and ``unsafe-bab`` (falsified), ``unknown``; a verdict
reached past the limit has `` (timed out)`` appended. Such a late verdict is counted unknown here, as
daic's search stops at its limit: the table compares what each decides within it."""

from __future__ import annotations

import argparse
import csv
import json
import pickle
from collections import Counter
from pathlib import Path

VERDICTS = ("verified", "falsified", "unknown")
Verdicts = dict[str, tuple[str, float]]
"""A property's (verdict, seconds), by its file as the instances name it."""


def daic_verdicts(path: Path) -> Verdicts:
    """Each property's (verdict, seconds) in a `daic verify --vnnlib` record."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {
        row["property"]: (row["status"] if row["status"] in VERDICTS else "unknown", row["seconds"])
        for row in rows
    }


def abcrown_verdicts(path: Path, instances: Path) -> tuple[Verdicts, int]:
    """Each instance's (verdict, seconds) in alpha-beta-CROWN's results file (its instances, in order, the
    lines of `instances`), and how many verdicts came past the limit (counted unknown)."""
    with path.open("rb") as handle:
        found = pickle.load(handle)
    with instances.open(newline="") as handle:
        names = [row[1].strip() for row in csv.reader(handle) if row]
    order = sorted((index, status) for status, indices in found["summary"].items() for index in indices)
    verdicts, late = {}, 0
    for (index, _), (status, seconds) in zip(order, found["results"], strict=True):
        name = status.replace(" (timed out)", "").strip()
        verdict = (
            "falsified" if name.startswith("unsafe") else "verified" if name.startswith("safe") else "unknown"
        )
        if "(timed out)" in status and verdict != "unknown":
            late += 1
            verdict = "unknown"
        verdicts[names[index]] = (verdict, float(seconds))
    return verdicts, late


def merged(runs: list[Verdicts]) -> Verdicts:
    """Runs in order: a property's verdict and seconds are those of the last run that holds it."""
    out: Verdicts = {}
    for run in runs:
        out.update(run)
    return out


def table(tools: dict[str, Verdicts], timeout: float) -> str:
    """A markdown row per tool over the properties both decided something about."""
    shared = sorted(set.intersection(*(set(v) for v in tools.values())))
    lines = [
        "| tool | limit | properties | verified | falsified | unknown | total seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, verdicts in tools.items():
        counts = Counter(verdicts[i][0] for i in shared)
        seconds = sum(verdicts[i][1] for i in shared)
        lines.append(
            f"| {name} | {timeout:g} s | {len(shared)} | {counts['verified']} | {counts['falsified']} | "
            f"{counts['unknown']} | {seconds:.1f} |"
        )
    return "\n".join(lines)


def differences(ours: Verdicts, theirs: Verdicts) -> list[str]:
    """The properties where the verdicts differ, each with both tools' verdicts and seconds."""
    lines = []
    for name in [name for name in ours if name in theirs]:
        (a, sa), (b, sb) = ours[name], theirs[name]
        if a != b:
            conflict = "  CONFLICT" if {a, b} == {"verified", "falsified"} else ""
            lines.append(f"  {name}: daic {a} ({sa:.1f} s), alpha-beta-CROWN {b} ({sb:.1f} s){conflict}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daic", type=Path, nargs="+", required=True,
                        help="daic verify --vnnlib's records (JSON lines), in order")  # fmt: skip
    parser.add_argument("--abcrown", type=Path, nargs="+", required=True,
                        help="alpha-beta-CROWN's results files, in order")  # fmt: skip
    parser.add_argument("--csv", type=Path, nargs="+", required=True,
                        help="the instances each results file ran, one per --abcrown file")  # fmt: skip
    parser.add_argument(
        "--timeout", type=float, required=True, help="the limit per property (the last runs')"
    )
    args = parser.parse_args()
    if len(args.csv) != len(args.abcrown):
        parser.error("give one --csv per --abcrown results file")
    ours = merged([daic_verdicts(path) for path in args.daic])
    found = [
        abcrown_verdicts(path, instances) for path, instances in zip(args.abcrown, args.csv, strict=True)
    ]
    theirs = merged([verdicts for verdicts, _ in found])
    print(table({"daic": ours, "alpha-beta-CROWN": theirs}, args.timeout))
    print(f"\nalpha-beta-CROWN verdicts past the limit (counted unknown): {sum(late for _, late in found)}")
    print("properties where the verdicts differ:")
    print("\n".join(differences(ours, theirs)) or "  none")


if __name__ == "__main__":
    main()
