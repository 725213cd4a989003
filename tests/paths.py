"""Folders the tests read, named once: tests live at different depths, so none counts its own parents."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
LISTINGS = DATA / "listings"
GOLDEN = ROOT / "tests" / "compiler" / "golden"
EXAMPLES = ROOT / "examples"
STDLIB = ROOT / "stdlib"
