"""Repository-wide hygiene: the code is ruff clean and every shipped .net/.dai source is formatted.
(tests/data holds the paper's listings verbatim and a corpus of broken files, on purpose.)"""

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from daic.compiler.commands.cli import main

ROOT = Path(__file__).parents[1]


def test_ruff_is_clean():
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--quiet", str(ROOT)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_shipped_sources_are_formatted_and_clean():
    folders = [str(ROOT / name) for name in ("stdlib", "examples")]
    assert CliRunner().invoke(main, ["fmt", "--check", *folders]).exit_code == 0
    result = CliRunner().invoke(main, ["check", *folders])
    assert result.exit_code == 0, result.output


def test_readme_quickstart_is_the_example():
    """The scheme the README's tour and the languages page show is the one `daic run
    examples/quickstart.dai` runs."""
    example = (ROOT / "examples" / "quickstart.dai").read_text()
    code = [line for line in example.splitlines() if line.strip() and not line.strip().startswith("#")]
    for page in ("README.md", "docs/languages.md"):
        text = (ROOT / page).read_text()
        shown = text.split("A training scheme (`examples/quickstart.dai`):\n\n```\n", 1)[1].split("```", 1)[0]
        assert shown.strip().splitlines() == code, f"{page} shows another scheme than examples/quickstart.dai"
