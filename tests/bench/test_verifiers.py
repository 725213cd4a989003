"""`bench/verifiers.py`: daic's record and alpha-beta-CROWN's results file read into one table, late
verdicts counted unknown, the properties whose verdicts differ listed (a conflict flagged), and a rerun at a
longer limit merged over the first run."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

from tests.paths import ROOT


def test_the_two_records_make_one_table_and_a_list_of_differences(tmp_path):
    ours = [
        {"index": 0, "property": "p0.vnnlib", "status": "verified", "seconds": 0.5},
        {"index": 1, "property": "p1.vnnlib", "status": "falsified", "seconds": 0.25},
        {"index": 2, "property": "p2.vnnlib", "status": "unknown", "seconds": 20.0},
        {"index": 3, "property": "p3.vnnlib", "status": "error", "seconds": 1.0},
    ]
    (tmp_path / "daic.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ours))
    # Instances ran 0, 1, 2, 3; results are in that order, the summary maps statuses to instances.
    theirs = {
        "summary": {"safe-incomplete (timed out)": [0], "safe": [1], "unknown": [2], "unsafe-pgd": [3]},
        "results": [
            ["safe-incomplete (timed out)", 25.0],
            ["safe", 2.0],
            ["unknown", 20.0],
            ["unsafe-pgd", 0.5],
        ],
    }
    with (tmp_path / "abcrown.pkl").open("wb") as handle:
        pickle.dump(theirs, handle)
    (tmp_path / "all.csv").write_text("".join(f"net.onnx,p{i}.vnnlib,20\n" for i in range(4)))
    shown = compare(tmp_path, ["daic.jsonl"], ["abcrown.pkl"], ["all.csv"], "20")
    assert "| daic | 20 s | 4 | 1 | 1 | 2 | 21.8 |" in shown
    assert "| alpha-beta-CROWN | 20 s | 4 | 1 | 1 | 2 | 47.5 |" in shown
    assert "verdicts past the limit (counted unknown): 1" in shown
    assert "  p0.vnnlib: daic verified (0.5 s), alpha-beta-CROWN unknown (25.0 s)\n" in shown
    assert "  p1.vnnlib: daic falsified (0.2 s), alpha-beta-CROWN verified (2.0 s)  CONFLICT" in shown
    assert "  p3.vnnlib: daic unknown (1.0 s), alpha-beta-CROWN falsified (0.5 s)" in shown
    assert "  p2.vnnlib:" not in shown
    # At 60 s each tool runs again what it left unknown; the last verdict of a property counts.
    rerun = [{"index": 0, "property": "p2.vnnlib", "status": "verified", "seconds": 41.0}]
    (tmp_path / "daic60.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rerun))
    with (tmp_path / "abcrown60.pkl").open("wb") as handle:
        pickle.dump(
            {"summary": {"unknown": [0, 1]}, "results": [["unknown", 61.0], ["unknown", 60.5]]}, handle
        )
    (tmp_path / "open.csv").write_text("net.onnx,p0.vnnlib,60\nnet.onnx,p2.vnnlib,60\n")
    shown = compare(tmp_path, ["daic.jsonl", "daic60.jsonl"], ["abcrown.pkl", "abcrown60.pkl"],
                    ["all.csv", "open.csv"], "60")  # fmt: skip
    assert "| daic | 60 s | 4 | 2 | 1 | 1 | 42.8 |" in shown
    assert "| alpha-beta-CROWN | 60 s | 4 | 1 | 1 | 2 | 124.0 |" in shown
    assert "  p2.vnnlib: daic verified (41.0 s), alpha-beta-CROWN unknown (60.5 s)" in shown


def compare(folder, daic, abcrown, instances, timeout) -> str:
    command = [sys.executable, str(ROOT / "bench" / "verifiers.py"), "--timeout", timeout, "--daic"]
    command += [str(folder / name) for name in daic] + ["--abcrown"]
    command += [str(folder / name) for name in abcrown] + ["--csv"]
    command += [str(folder / name) for name in instances]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout
