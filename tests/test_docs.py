"""The documentation: README.md is the front page and docs/ holds a page per subject. The language reference
(docs/reference.md) is generated from the registry and must be current (DAIC_UPDATE_GOLDEN=1 rewrites it,
as it rewrites the golden outputs); every relative link between the pages reaches a file, and a heading of
it where it names one; and the front page links every page."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from daic.compiler.checking.codes import every_code
from daic.compiler.constructors import REGISTRY
from daic.compiler.docs import reference_markdown
from daic.compiler.registry import BLOCK_CATEGORIES, Category
from tests.paths import ROOT

DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference.md"
PAGES = sorted(DOCS.glob("*.md"))
# The Markdown files whose links are checked.
LINKED = [ROOT / "README.md", *PAGES, ROOT / "bench" / "README.md"]
UPDATE = "DAIC_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_docs.py"

FENCE = re.compile(r"^ {0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def outside_fences(text: str) -> list[str]:
    """The lines of a Markdown text, those of fenced code blocks made empty (so that lines keep their
    numbers)."""
    lines, fenced = [], None
    for line in text.split("\n"):
        fence = FENCE.match(line)
        if fenced is None and fence:
            fenced = fence.group(1)
        elif fenced is not None and fence and fence.group(1) == fenced:
            fenced = None
        elif fenced is None:
            lines.append(line)
            continue
        lines.append("")
    return lines


def prose(text: str) -> str:
    """The text outside fenced code blocks and code spans, where Markdown reads links."""
    return CODE_SPAN.sub(
        lambda m: " " * len(m.group(0).replace("\n", "")) + "\n" * m.group(0).count("\n"),
        "\n".join(outside_fences(text)),
    )


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading's text: lowercase, punctuation other than `-` and `_` dropped (inline
    code's backticks too), spaces to `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors as its text
    kept = "".join(c for c in text.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor; a repeated one gets `-1`, `-2`, ..., as GitHub numbers them."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in outside_fences(path.read_text()):
        if match := HEADING.match(line):
            base = github_anchor(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link of a Markdown file, outside code."""
    text = prose(path.read_text())
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in LINK.finditer(text)]


def unescaped(markdown: str) -> str:
    """Text as Markdown shows it, for the escapes the reference writes (`\\\\`, `\\<`)."""
    return re.sub(r"\\([\\<])", r"\1", markdown)


def is_external(target: str) -> bool:
    return re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) is not None or target.startswith("//")


def test_the_reference_is_generated_from_the_registry():
    expected = reference_markdown()
    if os.environ.get("DAIC_UPDATE_GOLDEN"):
        REFERENCE.write_text(expected)
    written = REFERENCE.read_text() if REFERENCE.exists() else ""
    if written != expected:
        old, new = [*written.split("\n"), "(the end)"], [*expected.split("\n"), "(the end)"]
        line = next(i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b)
        pytest.fail(
            "docs/reference.md is not what the registry and the diagnostic codes generate: at line "
            f"{line + 1} it has {old[line]!r} where {new[line]!r} is generated. Run `{UPDATE}` to write "
            "it again."
        )


def test_the_reference_documents_every_constructor_field_and_code():
    text = REFERENCE.read_text()
    sections = dict(re.findall(r"^## (.*?)\n(.*?)(?=^## |\Z)", text, re.S | re.M))
    for category in Category:
        decls = REGISTRY.of_category(category)
        if not decls:
            continue
        assert category.title in sections, f"docs/reference.md has no section {category.title!r}"
        section = sections[category.title]
        headings = re.findall(r"^### `([^`]+)`$", section, re.M)
        if category in BLOCK_CATEGORIES:
            wanted = [p.name for d in decls for p in d.params]
            docs = [p.doc for d in decls for p in d.params]
        else:
            wanted = [d.name for d in decls]
            docs = [d.doc for d in decls] + [p.doc for d in decls for p in d.params]
            for decl in decls:
                assert f"```\n{decl.signature()}\n```" in section, f"{decl.name}'s signature is missing"
        assert headings == wanted, f"{category.title}: documented {headings}, declared {wanted}"
        for doc in docs:
            assert doc.split("`")[0] in unescaped(section), f"{category.title}: {doc!r} is missing"
    codes = re.findall(r"^### ([EW]\d{3})\n\n(?:error|warning): (.*)\.$", sections["Diagnostic codes"], re.M)
    assert [(code, unescaped(summary)) for code, summary in codes] == [
        (c.id, c.summary) for c in every_code()
    ]
    assert len(codes) == len(every_code()) > 30


def test_every_page_starts_with_a_title_and_a_summary():
    for page in PAGES:
        lines = page.read_text().split("\n")
        assert lines[0].startswith("# "), f"docs/{page.name} starts with {lines[0]!r}, not a `# Title`"
        assert lines[1] == "" and lines[2] and not lines[2].startswith(("#", "-", "|", "```")), (
            f"docs/{page.name}: its title is not followed by a summary paragraph"
        )


def test_relative_links_reach_a_file_and_its_heading():
    broken = []
    checked = 0
    for path in LINKED:
        for line, target in links(path):
            if is_external(target):
                continue
            checked += 1
            file, _, anchor = target.partition("#")
            reached = (path.parent / file).resolve() if file else path
            where = f"{path.relative_to(ROOT)}:{line}: {target}"
            if not reached.exists():
                broken.append(f"{where}: no file {reached}")
            elif anchor and reached.suffix == ".md" and anchor not in anchors(reached):
                broken.append(f"{where}: {reached.relative_to(ROOT)} has no heading #{anchor}")
    assert checked > 30, f"only {checked} relative links found: the link reader is broken"
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_front_page_links_every_page():
    linked = {
        (ROOT / target.partition("#")[0]).resolve()
        for _, target in links(ROOT / "README.md")
        if not is_external(target)
    }
    missing = [f"docs/{page.name}" for page in PAGES if page.resolve() not in linked]
    assert PAGES and not missing, f"README.md does not link {missing}"


def test_the_link_reader_reads_links_and_anchors_as_github_does(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n## `daic run`: training\n\n## Notes\n\n## Notes\n\n```\n## not a heading\n"
        "[not a link](nowhere.md)\n```\n\nSee [it](other.md#x) and `[code](nowhere.md)`,"
        " [web](https://example.com).\n"
    )
    assert anchors(page) == {"a-page", "daic-run-training", "notes", "notes-1"}
    assert links(page) == [(14, "other.md#x"), (14, "https://example.com")]
    assert github_anchor("Python: `import daic`") == "python-import-daic"
    assert github_anchor("ONNX and VNN-LIB in: `daic import`, `daic verify --vnnlib`") == (
        "onnx-and-vnn-lib-in-daic-import-daic-verify---vnnlib"
    )
