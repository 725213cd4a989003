"""End to end with a real editor: headless Neovim opens a broken .dai file, starts the server as its LSP
client, and prints the diagnostics it received, with Neovim's own conversion of positions to columns."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "nvim" / "diagnostics.lua"
BROKEN = """import stdlib.goals

let g = ["🙂", Boxx]

scheme S {
    goal = Baseline
    epochs = 0
"""

pytestmark = pytest.mark.skipif(
    shutil.which("nvim") is None, reason="needs Neovim (`apt-get install neovim`) on the PATH"
)


def test_neovim_receives_the_diagnostics(tmp_path):
    source = tmp_path / "broken.dai"
    source.write_text(BROKEN, encoding="utf-8")
    out = tmp_path / "diagnostics.txt"
    env = {**os.environ, "DAIC_OUT": str(out), "DAIC_PYTHON": sys.executable}
    subprocess.run(
        ["nvim", "--headless", "--clean", "-u", "NONE", "-c", f"luafile {SCRIPT}", str(source)],
        cwd=tmp_path,
        env=env,
        timeout=60,
        check=True,
        capture_output=True,
    )
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "received"
    # Neovim's columns are bytes: `Boxx` follows `let g = ["🙂", ` (17 bytes; 15 UTF-16 units on the wire).
    assert lines[1] == "2:17-2:21 E101 unknown name `Boxx` | hint: did you mean `Box`?"
    assert lines[2].startswith("6:13-6:14 E005 unexpected end of the file")
    assert len(lines) == 3
