"""Go to definition: lets here and in imports (the shipped stdlib included), imported modules, a scheme's
base, and a scheme's network file."""

from __future__ import annotations

import pytest
from lsprotocol import types as T

from .conftest import DIGITS, QUICKSTART, ROOT

pytestmark = pytest.mark.asyncio(loop_scope="session")

STDLIB = ROOT / "stdlib"


async def definition_at(editor, uri: str, text: str, marker: str, shift: int = 0) -> list[T.Location]:
    result = await editor.client.text_document_definition_async(
        T.DefinitionParams(T.TextDocumentIdentifier(uri=uri), editor.at(text, marker, shift))
    )
    return result or []


def target_range(editor, path, name: str, prefix: str) -> T.Range:
    """The range of `name` in the file at `path`, where it follows `prefix`."""
    text = path.read_text()
    start = text.index(prefix + name) + len(prefix)
    return editor.range(text, start, start + len(name))


async def test_let_in_this_file(editor, tmp_path):
    text = "let eps = 8/255\nlet 🙂x = 1\nlet e = eps\n"
    path = tmp_path / "here.dai"
    uri = await editor.open(path, text)
    (location,) = await definition_at(editor, uri, text, "eps\n", 1)
    assert location.uri == uri
    assert location.range == editor.range(text, 4, 7)
    editor.close(uri)


async def test_stdlib_goal_and_module(editor, tmp_path):
    text = (
        "import stdlib.goals\nimport stdlib.schemes as s\nscheme X extends s.InSampLPA_R34 {\n"
        "    goal = Baseline_S18\n}\n"
    )
    uri = await editor.open(tmp_path / "uses.dai", text)
    (goal,) = await definition_at(editor, uri, text, "Baseline_S18", 3)
    assert goal.uri == (STDLIB / "goals.dai").as_uri()
    assert goal.range == target_range(editor, STDLIB / "goals.dai", "Baseline_S18", "let ")
    (module,) = await definition_at(editor, uri, text, "stdlib.goals", 8)
    assert module.uri == (STDLIB / "goals.dai").as_uri()
    assert module.range == T.Range(T.Position(0, 0), T.Position(0, 0))
    (base,) = await definition_at(editor, uri, text, "InSampLPA_R34", 2)
    assert base.uri == (STDLIB / "schemes.dai").as_uri()
    assert base.range == target_range(editor, STDLIB / "schemes.dai", "InSampLPA_R34", "scheme ")
    editor.close(uri)


async def test_scheme_net_file_and_file_import(editor):
    path = QUICKSTART
    text = path.read_text()
    uri = await editor.open(path, text)
    (net,) = await definition_at(editor, uri, text, "digits_conv.net", 3)
    assert net.uri == (DIGITS).as_uri()
    editor.close(uri)


async def test_file_import_and_nothing(editor, tmp_path):
    (tmp_path / "lib.dai").write_text("let shared = Mix(Point, Box, 0.5)\n")
    text = 'import "lib.dai"\nlet g = shared\nlet h = Box\n'
    uri = await editor.open(tmp_path / "main.dai", text)
    (module,) = await definition_at(editor, uri, text, "lib.dai", 2)
    assert module.uri == (tmp_path / "lib.dai").as_uri()
    (shared,) = await definition_at(editor, uri, text, "shared\n", 2)
    assert shared.uri == (tmp_path / "lib.dai").as_uri()
    assert shared.range == editor.range("let shared", 4, 10)
    # A constructor is declared in Python, not in a source file: no location.
    assert await definition_at(editor, uri, text, "Box") == []
    editor.close(uri)


async def test_an_open_buffer_stands_in_for_its_file(editor, tmp_path):
    library = tmp_path / "lib.dai"
    library.write_text("let eps = 0.1\n")
    lib_uri = await editor.open(library)
    text = 'import "lib.dai" as lib\nlet g = Mix(Point, Box, lib.eps)\n'
    uri = await editor.open(tmp_path / "main.dai", text)
    assert await editor.diagnostics(uri) == []
    # Unsaved: two lines added above, and eps made a goal.
    edited = "# added\n# lines\nlet eps = Box\n"
    await editor.change(lib_uri, edited)
    await editor.wait_until(uri, lambda found: [d.code for d in found] == ["E107"])
    (location,) = await definition_at(editor, uri, text, "lib.eps", 4)
    assert location.uri == library.as_uri()
    assert location.range == editor.range(edited, edited.index("eps"), edited.index("eps") + 3)
    editor.close(lib_uri)
    editor.close(uri)
