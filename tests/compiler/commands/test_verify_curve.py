"""Certified accuracy against epsilon (`daic verify --eps A --eps B ...` or `--eps START:STOP:COUNT`): a
record per radius that never contradicts certifying that radius alone, the verdicts carried between
radii, and the curve's table, figures and figure."""

from __future__ import annotations

import json

from click.testing import CliRunner

from daic.compiler.commands.cli import main
from daic.compiler.jobs.curve import middle_first, radii
from tests.compiler.commands.test_verify_command import NET, rows, weights  # noqa: F401 - the module's fixture

CASCADE = ["--domain", "box", "--domain", "crown"]


def run(weights, out, *extra):  # noqa: F811
    command = ["verify", str(NET), "--weights", str(weights), "--limit", "60", "--out", str(out), *CASCADE]
    return CliRunner().invoke(main, [*command, *extra])


def test_the_radii_of_a_curve_are_certified_middle_first():
    assert radii(["0.1", "0.02:0.06:3", "0.04"]) == [0.02, 0.04, 0.06, 0.1]
    assert middle_first([1, 2, 3, 4, 5, 6, 7]) == [4, 2, 6, 1, 5, 3, 7]
    assert sorted(middle_first(list(range(10)))) == list(range(10))


def test_a_curve_agrees_with_each_radius_certified_alone(weights, tmp_path):  # noqa: F811
    result = run(weights, tmp_path / "c.jsonl", "--eps", "0.02:0.1:3", "--format", "json")
    assert result.exit_code == 0, result.output
    curve = json.loads(result.stdout)["curve"]
    assert [s["epsilon"] for s in curve] == [0.02, 0.06, 0.1]
    reused = 0
    for summary in curve:
        eps = summary["epsilon"]
        alone = tmp_path / f"alone{eps}.jsonl"
        assert run(weights, alone, "--eps", str(eps)).exit_code == 0
        together = rows(tmp_path / f"c.eps{eps:g}.jsonl")
        assert [r["index"] for r in together] == list(range(60))
        for mine, fresh in zip(together, rows(alone), strict=True):
            # Never the opposite verdict; and what the radius decides alone, the curve decides too.
            assert {mine["status"], fresh["status"]} != {"verified", "falsified"}, (mine, fresh)
            if fresh["status"] != "unknown":
                assert mine["status"] == fresh["status"], (mine, fresh)
            reused += "reused" in mine
            if "reused" in mine:
                assert (mine["reused"] > eps) == (mine["status"] == "verified")
    assert reused > 0
    figures = json.loads((tmp_path / "c.curve.json").read_text())
    assert [f["epsilon"] for f in figures] == [0.02, 0.06, 0.1]
    assert all(f["certified_after"]["Box"] <= f["certified_after"]["CROWN"] <= f["accuracy"] for f in figures)
    shares = [f["certified_after"]["CROWN"] for f in figures]
    assert shares == sorted(shares, reverse=True)  # a smaller ball is certified whenever a larger one is
    assert (tmp_path / "c.curve.png").read_bytes()[:4] == b"\x89PNG"


def test_the_curve_is_printed_as_a_table_and_a_range_must_run_upwards(weights, tmp_path):  # noqa: F811
    result = run(weights, tmp_path / "t.jsonl", "--eps", "0.03", "--eps", "0.05")
    assert result.exit_code == 0, result.output
    assert "certified" in result.stdout and "CROWN" in result.stdout
    assert "0.03" in result.stdout and "0.05" in result.stdout
    assert "the curve: " in result.stderr
    bad = run(weights, tmp_path / "b.jsonl", "--eps", "0.1:0.02:3")
    assert bad.exit_code == 2 and "a range runs up from START to STOP" in bad.stderr
