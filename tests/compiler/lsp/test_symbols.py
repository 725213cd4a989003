"""Document symbols: a .dai file's imports, lets and schemes with their fields; a .net file's layers with
block bodies nested under their heads and each layer's output shape. Workspace symbols: the lets, schemes
and studies of a folder's .dai files and its .net files, the editor's unsaved text included."""

from __future__ import annotations

import pytest
from lsprotocol import types as T

from .conftest import QUICKSTART, ROOT

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def symbols_of(editor, path, text: str | None = None) -> list[T.DocumentSymbol]:
    uri = await editor.open(path, text)
    result = await editor.client.text_document_document_symbol_async(
        T.DocumentSymbolParams(T.TextDocumentIdentifier(uri=uri))
    )
    editor.close(uri)
    return result


async def test_dai_symbols(editor):
    path = QUICKSTART
    text = path.read_text()
    found = await symbols_of(editor, path, text)
    assert [(s.name, s.kind) for s in found] == [
        ("stdlib.goals", T.SymbolKind.Module),
        ("Quickstart", T.SymbolKind.Class),
    ]
    scheme = found[1]
    assert [f.name for f in scheme.children] == [
        "net",
        "data",
        "epsilon",
        "goal",
        "epochs",
        "batch",
        "optimizer",
        "test",
    ]
    start = text.index("Quickstart")
    assert scheme.selection_range == editor.range(text, start, start + len("Quickstart"))
    assert scheme.range.start == editor.position(text, text.index("scheme Quickstart"))
    assert scheme.range.end == editor.position(text, text.rindex("}") + 1)


async def test_let_symbols_carry_types(editor, tmp_path):
    text = "let eps = 8/255\nlet g = Mix(Point, Box, eps)\n"
    found = await symbols_of(editor, tmp_path / "lets.dai", text)
    assert [(s.name, s.kind, s.detail) for s in found] == [
        ("eps", T.SymbolKind.Constant, "Float"),
        ("g", T.SymbolKind.Constant, "Goal"),
    ]


async def test_net_symbols_nest_blocks_and_show_shapes(editor):
    path = ROOT / "tests" / "data" / "listings" / "resnettiny_none.net"
    found = await symbols_of(editor, path)
    names = [s.name for s in found]
    assert names[:6] == ["Normalize", "Conv2D", "ReLU", "ParNet1", "ParNet2", "ParSum"]
    assert [c.name for c in found[4].children] == ["Conv2D", "ReLU", "Conv2D"]
    assert found[1].detail == "[32, 32, 16]"
    assert found[-1].name == "Linear" and found[-1].detail == "[10]"
    assert found[4].range.start.line == 5 and found[4].range.end.line == 8


async def test_symbols_of_a_file_with_a_broken_statement(editor, tmp_path):
    text = "let a = 1\nlet b = Mix(\nlet c = 2\n"
    found = await symbols_of(editor, tmp_path / "broken.dai", text)
    assert [s.name for s in found] == ["a", "c"]


async def workspace_symbols(editor, query: str) -> list[tuple[str, T.SymbolKind, str, int, str | None]]:
    found = await editor.client.workspace_symbol_async(T.WorkspaceSymbolParams(query=query))
    return sorted(
        (s.name, s.kind, s.location.uri, s.location.range.start.line, s.container_name) for s in found
    )


async def test_workspace_symbols_span_a_folder(editor, tmp_path):
    folder = tmp_path / "project"
    (folder / "runs" / "r1").mkdir(parents=True)
    (folder / "nets").mkdir()
    (folder / "nets" / "tiny_net.net").write_text("Linear out=10\n")
    (folder / "lib.dai").write_text("let tiny_goal = Box\nscheme TinyScheme {\n    epochs = 2\n}\n")
    # A run's copy of its sources is no symbol of the project.
    (folder / "runs" / "r1" / "run.json").write_text("{}")
    (folder / "runs" / "r1" / "lib.dai").write_text("let tiny_copy = Box\n")
    editor.folders(added=[folder])
    try:
        lib = (folder / "lib.dai").as_uri()
        assert [s for s in await workspace_symbols(editor, "tiny") if "project" in s[2]] == [
            ("TinyScheme", T.SymbolKind.Class, lib, 1, "lib.dai"),
            ("tiny_goal", T.SymbolKind.Constant, lib, 0, "lib.dai"),
            ("tiny_net.net", T.SymbolKind.File, (folder / "nets" / "tiny_net.net").as_uri(), 0, None),
        ]
        # Letters in order, case aside, as editors filter; and the editor's text of an open file.
        uri = await editor.open(folder / "lib.dai", "\n\nlet tiny_goal = Box\n")
        assert [s for s in await workspace_symbols(editor, "TNYGL") if "project" in s[2]] == [
            ("tiny_goal", T.SymbolKind.Constant, lib, 2, "lib.dai")
        ]
        editor.close(uri)
        # The repository's own stdlib is in the editor's workspace too.
        assert ("InSampLPA_R34", T.SymbolKind.Class) in [
            s[:2] for s in await workspace_symbols(editor, "insamplpa_r34")
        ]
    finally:
        editor.folders(removed=[folder])
