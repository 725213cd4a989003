"""Diagnostics on open and on change: the same codes, spans and messages as `daic check`, in the client's
position encoding (characters outside the Basic Multilingual Plane included)."""

from __future__ import annotations

import asyncio
import time

import pytest
from lsprotocol import types as T

from daic.compiler.checking.check import check_path, check_source
from daic.compiler.checking.sources import Source

from .conftest import DIGITS, ROOT

pytestmark = pytest.mark.asyncio(loop_scope="session")

BROKEN = """import stdlib.goals

scheme S {
    data = Digits
    epsilon = 0.1
    goal = Mix(Point, Boxx, 0.5)
    epochs = 0
}
"""


async def test_open_reports_what_check_reports(editor, tmp_path):
    path = tmp_path / "broken.dai"
    uri = await editor.open(path, BROKEN)
    got = await editor.diagnostics(uri)
    expected = check_source(Source(str(path), "dai", BROKEN)).diagnostics
    assert [d.code for d in got] == [d.code.id for d in expected] == ["E101", "E108"]
    assert [d.message.split("\nhint: ")[0] for d in got] == [d.message for d in expected]
    unknown = BROKEN.index("Boxx")
    assert got[0].range == editor.range(BROKEN, unknown, unknown + 4)
    assert got[0].severity == T.DiagnosticSeverity.Error
    assert got[0].source == "daic"
    assert "did you mean `Box`?" in got[0].message
    editor.close(uri)


async def test_change_updates_diagnostics(editor, tmp_path):
    uri = await editor.open(tmp_path / "edit.dai", BROKEN)
    fixed = BROKEN.replace("Boxx", "Box").replace("epochs = 0", "epochs = 3")
    await editor.change(uri, fixed)
    assert await editor.diagnostics(uri) == []
    await editor.change(uri, fixed.replace("Mix(", "Mix(Point, "))
    # One argument too many: `Box` now stands where the weight goes, and the 0.5 is one too many.
    assert [d.code for d in await editor.diagnostics(uri)] == ["E107", "E105"]
    editor.close(uri)


async def test_non_bmp_characters_shift_columns_by_encoding(editor, tmp_path):
    # 🙂 is one code point, two UTF-16 units and four UTF-8 bytes; the error after it must land on `Boxx`.
    text = 'let label = "🙂🙂" let g = Boxx\n'.replace(" let g", "\nlet g")
    uri = await editor.open(tmp_path / "emoji.dai", text)
    (diagnostic,) = await editor.diagnostics(uri)
    start = text.index("Boxx")
    assert diagnostic.code == "E101"
    assert diagnostic.range == editor.range(text, start, start + 4)
    text = 'let g = ["🙂", Boxx]\n'
    await editor.change(uri, text)
    (diagnostic,) = await editor.diagnostics(uri)
    start = text.index("Boxx")
    expected_character = {"utf-16": 15, "utf-8": 17, "utf-32": 14}[editor.encoding]
    assert diagnostic.range.start == T.Position(0, expected_character)
    assert diagnostic.range == editor.range(text, start, start + 4)
    editor.close(uri)


async def test_net_file_diagnostics_and_warning_severity(editor, tmp_path):
    text = "Conv2D filters=16 kernel_size=3 input_shape=[8, 8, 1]\nCorrMaxK num_correlate=100000\n"
    uri = await editor.open(tmp_path / "warn.net", text)
    got = await editor.diagnostics(uri)
    expected = check_source(Source("warn.net", "net", text)).diagnostics
    assert [d.code for d in got] == [d.code.id for d in expected]
    assert [(d.code, d.severity) for d in got] == [("W201", T.DiagnosticSeverity.Warning)]
    editor.close(uri)


async def test_listing_with_paper_errors(editor):
    path = ROOT / "tests" / "data" / "listings" / "densenet100_none.net"
    uri = await editor.open(path)
    got = await editor.diagnostics(uri)
    assert [(d.code, d.range.start.line) for d in got] == [("E106", 116), ("E106", 231), ("E106", 345)]
    assert "implies kernel_size=[2, 2] with padding=1" in got[0].message
    editor.close(uri)


async def test_typing_fast_is_debounced_into_one_check(editor, tmp_path):
    uri = await editor.open(tmp_path / "typing.dai", "")
    text = ""
    for ch in "let g = Mix(Point, Bo":
        text += ch
        editor.send(uri, text)
        await asyncio.sleep(0.02)  # a fast typist: well inside the server's debounce delay
    started = time.monotonic()
    got = await editor.diagnostics(uri)
    assert time.monotonic() - started < 5
    # The final text's diagnostics (an unclosed call) arrive, none for the keystrokes before it.
    assert [d.code for d in got] == ["E005"]
    assert [v for u, v in editor.client.publications if u == uri] == [1, editor.versions[uri]]
    editor.close(uri)


async def test_close_clears_diagnostics(editor, tmp_path):
    uri = await editor.open(tmp_path / "closing.dai", BROKEN)
    editor.close(uri)
    assert await editor.diagnostics(uri) == []


async def saved(editor, path, uri: str) -> list[str]:
    """Tell the server `path` was saved; the codes of `uri`'s diagnostics once they are published again."""
    before = len(editor.client.publications)
    editor.client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(path.as_uri())))

    async def republished() -> None:
        while not any(u == uri for u, _ in editor.client.publications[before:]):
            await asyncio.sleep(0.005)

    await asyncio.wait_for(republished(), 10)
    return [d.code for d in editor.client.diagnostics[uri]]


async def test_saving_an_imported_file_rechecks_its_importers(editor, tmp_path):
    library = tmp_path / "lib.dai"
    library.write_text("let shared = Mix(Point, Box, 0.5)\n")
    uri = await editor.open(tmp_path / "main.dai", 'import "lib.dai"\nlet g = shared\n')
    assert await editor.diagnostics(uri) == []
    library.write_text("let renamed = Mix(Point, Box, 0.5)\n")
    assert await saved(editor, library, uri) == ["E101"]
    editor.close(uri)


async def test_saving_the_network_of_an_imported_scheme_rechecks_its_importers(editor, tmp_path):
    good = DIGITS.read_text()
    net = tmp_path / "n.net"
    net.write_text(good.replace("Linear out=10", "Linear out=7"))
    fields = 'net = "n.net" data = Digits goal = Box epochs = 1 epsilon = 0.1'
    (tmp_path / "lib.dai").write_text(f"scheme Base {{ {fields} }}\n")
    text = 'import "lib.dai" as lib\nscheme M extends lib.Base {}\n'
    uri = await editor.open(tmp_path / "main.dai", text)
    broken = [d.code for d in await editor.diagnostics(uri)]
    assert broken == ["E110"]  # `lib.dai` has errors
    # A keystroke first: that check reuses lib.dai's module, and must still watch lib.dai's network.
    assert [d.code for d in await editor.change(uri, text + "\n")] == broken
    net.write_text(good)
    assert await saved(editor, net, uri) == []
    net.write_text(good.replace("Linear out=10", "Linear out=7"))
    assert await saved(editor, net, uri) == broken
    editor.close(uri)


async def test_a_change_to_a_document_that_is_not_open_is_ignored(editor, tmp_path):
    stray = (tmp_path / "never_opened.dai").as_uri()
    before = len(editor.client.messages)
    editor.client.text_document_did_change(
        T.DidChangeTextDocumentParams(
            T.VersionedTextDocumentIdentifier(uri=stray, version=2),
            [T.TextDocumentContentChangeWholeDocument(text="let x = 1\n")],
        )
    )
    # The server goes on answering, and shows the user no error.
    uri = await editor.open(tmp_path / "after.dai", BROKEN)
    assert [d.code for d in await editor.diagnostics(uri)]
    assert editor.client.messages[before:] == []
    editor.close(uri)


async def test_ranges_count_a_lone_carriage_return_as_a_line_end(editor, tmp_path):
    text = "let a = 1  # one\rlet b = Mixx\r\nlet c = 2\n"
    uri = await editor.open(tmp_path / "cr.dai", text)
    (got,) = await editor.diagnostics(uri)
    editor.close(uri)
    unknown = text.index("Mixx")
    assert got.range == editor.range(text, unknown, unknown + 4)
    assert got.range == T.Range(T.Position(1, 8), T.Position(1, 12))


@pytest.mark.parametrize(
    ("name", "text"), [("bom.dai", "\ufefflet a = Mixx\n"), ("bom.net", "\ufeffReLUU\n")]
)
async def test_a_byte_order_mark_is_accepted_as_daic_check_accepts_it(editor, tmp_path, name, text):
    uri = await editor.open(tmp_path / name, text)
    got = await editor.diagnostics(uri)
    editor.close(uri)
    (path := tmp_path / name).write_bytes(text.encode("utf-8"))
    expected = check_path(str(path)).diagnostics
    assert [(d.code, d.message.split("\nhint: ")[0]) for d in got] == [
        (d.code.id, d.message) for d in expected
    ]
    assert [d.code for d in got] == ["E101" if name.endswith(".dai") else "E102"]
    word = text.index("Mixx" if name.endswith(".dai") else "ReLUU")
    assert got[0].range.start == editor.position(text, word)
