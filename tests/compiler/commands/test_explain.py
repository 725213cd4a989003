"""`daic explain`: every code with why it is reported and an example, taken from the golden files through
the generated module `daic.compiler.explanations`, which must match them (DAIC_UPDATE_GOLDEN=1 rewrites
it, as it rewrites the golden outputs)."""

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from daic.compiler.checking.codes import every_code
from daic.compiler.commands.cli import main
from tests.paths import GOLDEN, ROOT

MODULE = ROOT / "compiler" / "explanations.py"
HEADER = '''"""Why each diagnostic code is reported, with examples: generated from tests/compiler/golden
by tests/compiler/commands/test_explain.py (DAIC_UPDATE_GOLDEN=1 rewrites it). Do not edit; explain.py
reads it."""

# ruff: noqa: E501
# fmt: off
'''


def split_case(source: Path) -> tuple[str, int, str] | None:
    """A golden source's why (its leading `# ` comment, up to a blank line), the line its code starts on,
    and that code; None for a source without a why (a file another case imports)."""
    lines = source.read_bytes().decode("utf-8", errors="replace").split("\n")
    why = []
    for line in lines:
        if not line.startswith("# "):
            break
        why.append(line[2:].strip())
    if not why or len(lines) <= len(why) or lines[len(why)] != "":
        return None
    first = len(why) + 2
    return " ".join(why), first, "\n".join(lines[first - 1 :])


def explanations_module() -> str:
    cases: dict[str, list[tuple]] = {}
    for source in sorted(GOLDEN.iterdir()):
        if source.suffix not in (".dai", ".net") or (case := split_case(source)) is None:
            continue
        why, first, code_text = case
        output = source.with_suffix(source.suffix + ".expected").read_text()
        cases.setdefault(source.name.split("_")[0], []).append((why, source.name, first, code_text, output))
    lines = [HEADER, "EXPLANATIONS = {"]
    for code, found in sorted(cases.items()):
        lines += [f"    {code!r}: (", *(f"        {example!r}," for example in found), "    ),"]
    lines += ["}", "# fmt: on", ""]
    return "\n".join(lines)


def test_the_shipped_explanations_are_the_golden_files():
    expected = explanations_module()
    if os.environ.get("DAIC_UPDATE_GOLDEN"):
        MODULE.write_text(expected)
    assert MODULE.read_text() == expected


@pytest.mark.parametrize("code", [c.id for c in every_code()])
def test_every_code_has_its_why_and_an_example(code):
    result = CliRunner().invoke(main, ["explain", code.lower()])
    assert result.exit_code == 0
    text = result.stdout
    summary = next(c.summary for c in every_code() if c.id == code)
    assert text.startswith(f"{code}: {summary}\n\n")
    assert "For example, " in text and f"[{code}]" in text


def test_explain_prints_the_why_the_source_and_the_output():
    assert CliRunner().invoke(main, ["explain", "E101"]).stdout == (
        "E101: a name that is not defined (a let, an import, or a constructor)\n"
        "\n"
        "A name must be a let of this file, a let of an import, or a constructor of the language. A "
        "misspelt\n"
        "name stands for nothing, so the checker names the closest one that exists.\n"
        "\n"
        "For example, E101_unknown_name.dai:\n"
        "\n"
        "  4 | let g = Mix(Piont, Box, 0.5)\n"
        "\n"
        "daic check E101_unknown_name.dai prints:\n"
        "\n"
        "  E101_unknown_name.dai:4:13: error[E101]: unknown name `Piont`\n"
        "   4 | let g = Mix(Piont, Box, 0.5)\n"
        "     |             ^^^^^\n"
        "    hint: did you mean `Point`?\n"
    )
