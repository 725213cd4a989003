"""Paths written in sources that the file system refuses to look up (a name too long for it, a NUL in it):
each is a diagnostic at the string that names it, and the rest of the file and of the folder is checked."""

import json

import pytest
from click.testing import CliRunner

from daic.compiler.checking.check import check_source
from daic.compiler.checking.sources import Source
from daic.compiler.commands.cli import main

LONG = "x" * 300
CASES = {
    "net.dai": (f'scheme S {{\n    net = "{LONG}.net"\n}}\n', f'"{LONG}.net"', "File name too long"),
    "file.dai": (f'import "{LONG}.dai" as x\n', f'"{LONG}.dai"', "File name too long"),
    "module.dai": (f"import stdlib.{LONG}\n", f"stdlib.{LONG}", "no module `stdlib.xxx"),
}


@pytest.mark.parametrize("name", CASES)
def test_an_unusable_path_is_a_diagnostic_at_its_string(tmp_path, name):
    text, written, words = CASES[name]
    (tmp_path / name).write_text(text)
    (tmp_path / "other.dai").write_text("let g = Mixx\n")
    result = CliRunner().invoke(main, ["check", "--format", "json", str(tmp_path)])
    assert result.exit_code == 1, result.output
    found = json.loads(result.stdout)
    # The other file of the folder is still checked.
    assert [d["code"] for d in found if d["path"].endswith("other.dai")] == ["E101"]
    (problem,) = [d for d in found if d["path"].endswith(name) and d["code"] == "E110"]
    start = text.index(written)
    line = text.count("\n", 0, start) + 1
    column = start - (text.rfind("\n", 0, start) + 1) + 1
    assert (problem["line"], problem["column"], problem["end_column"]) == (
        line,
        column,
        column + len(written),
    )
    assert words in problem["message"]
    assert len(problem["message"]) < 200  # the name is shortened, not printed whole


def test_a_nul_in_a_path_is_a_diagnostic(tmp_path):
    text = 'import "a\x00b.dai" as x\nscheme S {\n    net = "n\x00.net"\n}\n'
    report = check_source(Source(str(tmp_path / "a.dai"), "dai", text))
    messages = [d.message for d in report.diagnostics if d.code.id == "E110"]
    assert messages == [
        "cannot look up `a\x00b.dai`: the name holds a NUL character",
        "cannot look up network file `n\x00.net`: the name holds a NUL character",
    ]


def test_a_command_line_path_too_long_is_a_usage_error(tmp_path):
    path = tmp_path / f"{LONG}.dai"
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 2
    assert result.stderr == f"daic: {path}: cannot be looked up: File name too long\n"


def test_escapes_in_a_path_are_shown_as_written(tmp_path):
    (tmp_path / "win.dai").write_text('scheme S {\n    net = "C:\\nets\\my.net"\n}\nimport "a\\tb.dai"\n')
    result = CliRunner().invoke(main, ["check", "--format", "concise", str(tmp_path / "win.dai")])
    lines = result.stdout.splitlines()
    # One line per problem, each with its hint on the next: the messages say `\n` where the source does.
    problems = [line for line in lines if not line.startswith("  hint: ")]
    assert result.stderr == "checked 1 file: 7 errors in 1 file\n"
    assert len(problems) == 7 and all(line.startswith(f"{tmp_path / 'win.dai'}:") for line in problems)
    where = f"(looked in {tmp_path})"
    assert f"{tmp_path / 'win.dai'}:2:11: error[E110]: no network file `C:\\nets\\my.net` {where}" in lines
    assert "  hint: `\\n` in a string is a line break: write paths with `/`" in lines
    assert f"{tmp_path / 'win.dai'}:4:8: error[E110]: no file `a\\tb.dai` (looked in {tmp_path})" in lines
