"""`bench/verifiers.py`: daic's record and alpha-beta-CROWN's results file read into one table, late
verdicts counted unknown, and the properties whose verdicts differ listed (a conflict flagged)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

from tests.paths import ROOT


def test_the_two_records_make_one_table_and_a_list_of_differences(tmp_path):
    ours = [
        {"index": 0, "status": "verified", "seconds": 0.5},
        {"index": 1, "status": "falsified", "seconds": 0.25},
        {"index": 2, "status": "unknown", "seconds": 20.0},
        {"index": 3, "status": "error", "seconds": 1.0},
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
    shown = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "verifiers.py"), "--daic", str(tmp_path / "daic.jsonl"),
         "--abcrown", str(tmp_path / "abcrown.pkl"), "--timeout", "20"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "| daic | 20 s | 4 | 1 | 1 | 2 | 21.8 |" in shown
    assert "| alpha-beta-CROWN | 20 s | 4 | 1 | 1 | 2 | 47.5 |" in shown
    assert "verdicts past the limit (counted unknown): 1" in shown
    assert "  0: daic verified (0.5 s), alpha-beta-CROWN unknown (25.0 s)\n" in shown
    assert "  1: daic falsified (0.2 s), alpha-beta-CROWN verified (2.0 s)  CONFLICT" in shown
    assert "  3: daic unknown (1.0 s), alpha-beta-CROWN falsified (0.5 s)" in shown
    assert "  2:" not in shown
