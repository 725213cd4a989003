"""`daic verify`: the cascade's record (one JSON line per image), resuming it after an interruption to the
record of an uninterrupted run, refusing a record of another certification, the JSON summary."""

import json
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

from daic.compiler.commands.cli import main
from daic.runtime.certification import certify as certify_module

STDLIB = Path(str(resources.files("daic.stdlib")))
NET = STDLIB / "nets" / "digits_ffnn.net"


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    folder = tmp_path_factory.mktemp("verify")
    source = folder / "s.dai"
    source.write_text(
        f'scheme S {{ net = "{NET}" data = Digits epsilon = 0.05 goal = Mix(Point, Box, 0.2) epochs = 2 '
        "batch = 50 test = [Accuracy] }\n"
    )
    result = CliRunner().invoke(main, ["run", str(source), "--out", str(folder / "run")])
    assert result.exit_code == 0, result.output
    return folder / "run" / "checkpoint.pt"


def verify(weights, out, *extra):
    command = ["verify", str(NET), "--weights", str(weights), "--limit", "150", "--out", str(out)]
    return CliRunner().invoke(main, [*command, "--domain", "box", "--domain", "crown", *extra])


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def without_seconds(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "seconds"} for row in records]


def test_every_image_gets_one_line_and_the_summary_counts_them(weights, tmp_path):
    out = tmp_path / "record.jsonl"
    result = verify(weights, out, "--format", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    record = rows(out)
    assert [row["index"] for row in record] == list(range(150))
    assert {row["status"] for row in record} <= {"verified", "falsified", "unknown"}
    for row in record:
        assert set(row) == {"index", "label", "status", "domain", "margin", "seconds"}
        if row["status"] == "verified":
            assert row["domain"] in ("Box", "CROWN") and row["margin"] > 0
        if row["status"] == "falsified":
            assert row["domain"] in ("clean", "PGD") and row["margin"] <= 0
    assert summary["cascade"] == ["Box", "PGD", "CROWN"]
    counts = {s: sum(row["status"] == s for row in record) for s in ("verified", "falsified", "unknown")}
    assert {s: summary[s] for s in counts} == counts and summary["images"] == 150
    assert summary["verified_by"] == {
        d: n
        for d in ("Box", "CROWN")
        if (n := sum(row["domain"] == d for row in record if row["status"] == "verified"))
    }
    falsified = [row["domain"] for row in record if row["status"] == "falsified"]
    assert summary["falsified_by"] == {d: falsified.count(d) for d in set(falsified)}
    assert summary["accuracy_percent"] == pytest.approx(100 * (150 - falsified.count("clean")) / 150)
    assert summary["attack_accuracy_percent"] == pytest.approx(100 * (150 - len(falsified)) / 150)
    assert 0 < summary["attack_accuracy_percent"] < summary["accuracy_percent"] < 100
    sidecar = json.loads(out.with_name("record.jsonl.json").read_text())
    assert sidecar["epsilon"] == 0.05 and sidecar["images"] == 150 and sidecar["dataset"] == "Digits"


def test_an_interrupted_certification_resumes_to_the_uninterrupted_record(weights, tmp_path, monkeypatch):
    whole = tmp_path / "whole.jsonl"
    assert verify(weights, whole).exit_code == 0
    cut = tmp_path / "cut.jsonl"
    original = certify_module.certify_batch
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(certify_module, "certify_batch", interrupted)
    result = verify(weights, cut)
    assert result.exit_code == 130 and "continue with --resume" in result.stderr
    assert len(rows(cut)) == 100  # the first batch, whole
    monkeypatch.setattr(certify_module, "certify_batch", original)
    refused = verify(weights, cut)
    assert refused.exit_code == 2 and "already holds a record" in refused.stderr
    result = verify(weights, cut, "--resume")
    assert result.exit_code == 0, result.output
    assert without_seconds(rows(cut)) == without_seconds(rows(whole))


def test_an_interruption_before_the_first_image_says_so_and_resumes(weights, tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    out = tmp_path / "cut.jsonl"
    monkeypatch.setattr(certify_module, "certify_batch", interrupted)
    result = verify(weights, out)
    assert result.exit_code == 130
    assert result.stderr == "daic: interrupted; no image was decided yet: continue with --resume\n"
    monkeypatch.undo()
    result = verify(weights, out, "--resume")
    assert result.exit_code == 0, result.output
    assert len(rows(out)) == 150


def test_resume_refuses_the_record_of_another_certification(weights, tmp_path):
    out = tmp_path / "r.jsonl"
    assert verify(weights, out).exit_code == 0
    result = verify(weights, out, "--resume", "--eps", "0.02")
    assert result.exit_code == 2
    assert "records another certification (epsilon differ)" in result.stderr


def test_the_table_names_the_cascade_and_its_counts(weights, tmp_path):
    result = verify(weights, tmp_path / "t.jsonl", "--no-attack")
    assert result.exit_code == 0, result.output
    assert "cascade Box > CROWN" in result.stdout
    for name in ("verified by Box", "verified by CROWN", "falsified: misclassified", "unknown", "accuracy"):
        assert name in result.stdout
    assert "PGD accuracy" not in result.stdout and "falsified by PGD" not in result.stdout


@pytest.mark.slow  # 10-15 s end to end (-m slow runs it); quicker tests of the same parts stay
def test_two_processes_record_what_one_records(weights, tmp_path):
    import subprocess
    import sys

    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert verify(weights, one).exit_code == 0
    command = [sys.executable, "-m", "daic", "verify", str(NET), "--weights", str(weights), "--limit", "150"]
    command += ["--domain", "box", "--domain", "crown", "--out", str(two), "--nproc-per-node", "2"]
    done = subprocess.run(
        [*command, "--device", "cpu", "--threads", "1"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # The same decisions. A bound's last digits depend on which images share its batch, and the attack's
    # random starts are drawn per batch, so a counterexample's margin is another point's.
    one_rows, two_rows = without_seconds(rows(one)), without_seconds(rows(two))
    assert [{**r, "margin": None} for r in one_rows] == [{**r, "margin": None} for r in two_rows]
    for a, b in zip(one_rows, two_rows, strict=True):
        assert b["margin"] <= 0 if a["status"] == "falsified" else b["margin"] == pytest.approx(a["margin"])
    assert not list(tmp_path.glob("two.jsonl.part*"))  # merged, and the parts removed
