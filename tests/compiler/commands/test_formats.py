"""`daic check --format`: every format of the renderers' table has a golden file, and the SARIF log has
the fields the SARIF 2.1.0 schema requires."""

import json
import os

import pytest
from click.testing import CliRunner

from daic.compiler.commands.cli import main
from daic.compiler.commands.render import RENDERERS
from tests.paths import GOLDEN

FORMATS = GOLDEN / "formats"
SOURCES = ["broken.dai", "broken.net"]


def check(monkeypatch, *args: str):
    monkeypatch.chdir(FORMATS)
    return CliRunner().invoke(main, ["check", *args, *SOURCES])


@pytest.mark.parametrize("output_format", sorted(RENDERERS))
def test_each_format_matches_its_golden_file(monkeypatch, output_format):
    result = check(monkeypatch, "--format", output_format)
    expected = FORMATS / f"broken.{output_format}.expected"
    if os.environ.get("DAIC_UPDATE_GOLDEN"):
        expected.write_text(result.stdout)
    assert result.stdout == expected.read_text()
    assert result.exit_code == 1
    assert result.stderr == "checked 2 files: 4 errors and 1 warning in 2 files\n"


def test_every_format_has_a_golden_file():
    golden = {p.name.split(".")[1] for p in FORMATS.glob("broken.*.expected")}
    assert golden == set(RENDERERS)


def _require(node: dict, fields: list[str], where: str) -> None:
    missing = [f for f in fields if f not in node]
    assert not missing, f"{where} lacks {missing}"


def test_sarif_log_has_the_schemas_required_fields(monkeypatch):
    log = json.loads(check(monkeypatch, "--format", "sarif").stdout)
    # The `required` lists of the SARIF 2.1.0 schema, for the objects daic writes.
    _require(log, ["version", "runs"], "sarifLog")
    assert log["version"] == "2.1.0"
    assert log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    _require(run, ["tool"], "run")
    _require(run["tool"], ["driver"], "tool")
    driver = run["tool"]["driver"]
    _require(driver, ["name"], "toolComponent")
    rule_ids = []
    for rule in driver["rules"]:
        _require(rule, ["id"], "reportingDescriptor")
        _require(rule["shortDescription"], ["text"], "multiformatMessageString")
        rule_ids.append(rule["id"])
    assert run["columnKind"] in ("utf16CodeUnits", "unicodeCodePoints")
    assert len(run["results"]) == 5
    for result in run["results"]:
        _require(result, ["message"], "result")
        assert "text" in result["message"] or "id" in result["message"]
        assert result["level"] in ("none", "note", "warning", "error")
        assert rule_ids[result["ruleIndex"]] == result["ruleId"]
        (location,) = result["locations"]
        physical = location["physicalLocation"]
        assert "artifactLocation" in physical or "address" in physical
        assert physical["artifactLocation"]["uri"] in SOURCES
        region = physical["region"]
        assert region["startLine"] >= 1 and region["startColumn"] >= 1
        assert (region["endLine"], region["endColumn"]) >= (region["startLine"], region["startColumn"])
    assert {r["level"] for r in run["results"]} == {"error", "warning"}


def test_github_annotations_escape_what_would_end_a_command(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a,b:c%.dai").write_text("let g = Mixx\n")
    result = CliRunner().invoke(main, ["check", "--format", "github", "a,b:c%.dai"])
    assert result.stdout == (
        "::error file=a%2Cb%3Ac%25.dai,line=1,endLine=1,col=9,endColumn=13,title=daic E101"
        "::unknown name `Mixx`%0Ahint: did you mean `Mix`?\n"
    )
