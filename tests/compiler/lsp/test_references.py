"""References and rename across a workspace folder: lets, schemes and network files, named here, in
imports (qualified or not), by `extends`, `tunes` and `net` fields; renames that keep every file checking
clean, and renames refused with their reason."""

from __future__ import annotations

import pytest
from lsprotocol import types as T
from pygls.exceptions import JsonRpcException

from daic.compiler.checking.check import check_path

from .conftest import DIGITS

pytestmark = pytest.mark.asyncio(loop_scope="session")

LIB = """let g = Mix(Point, Box, 0.5)
let eps = Lin(0, 0.1, 2, 0)
scheme Base {
    net = "small.net"
    data = Digits(subset=100)
    goal = g
    epsilon = eps
    epochs = 2
}
"""
USE = """import "lib.dai" as lib
import "lib.dai"
let h = Mix(lib.g, g, Range(0.1, 0.9))
scheme S extends lib.Base {
    goal = h
    test = [Accuracy]
}
study T tunes S {
    trials = 2
    objectives = [Accuracy]
}
"""


@pytest.fixture
def folder(editor, tmp_path):
    """A workspace folder of two modules and the network they name."""
    (tmp_path / "lib.dai").write_text(LIB)
    (tmp_path / "use.dai").write_text(USE)
    (tmp_path / "small.net").write_text(DIGITS.read_text())
    editor.folders(added=[tmp_path])
    yield tmp_path
    editor.folders(removed=[tmp_path])


async def references_at(editor, uri, text, marker, shift=0, declaration=True):
    found = await editor.client.text_document_references_async(
        T.ReferenceParams(
            context=T.ReferenceContext(declaration),
            text_document=T.TextDocumentIdentifier(uri),
            position=editor.at(text, marker, shift),
        )
    )
    return sorted(
        (loc.uri, loc.range.start.line, loc.range.start.character, loc.range.end.character) for loc in found
    )


def place(editor, folder, name, text, marker, shift=0, length=None):
    """Where `marker` (moved `shift` code points) is in `text`, the file `name` of the folder holds."""
    start = editor.at(text, marker, shift)
    return (
        (folder / name).as_uri(),
        start.line,
        start.character,
        start.character + (length or len(marker) - shift),
    )


async def test_a_lets_references_span_the_files_that_import_it(editor, folder):
    uri = await editor.open(folder / "use.dai")
    expected = [
        place(editor, folder, "lib.dai", LIB, "g =", length=1),
        place(editor, folder, "lib.dai", LIB, "g\n", length=1),
        place(editor, folder, "use.dai", USE, "lib.g", 4),
        place(editor, folder, "use.dai", USE, "g, Range", length=1),
    ]
    assert await references_at(editor, uri, USE, "lib.g", 4) == sorted(expected)
    # From the qualifier too, and without the declaration.
    assert await references_at(editor, uri, USE, "lib.g", 1, declaration=False) == sorted(expected[1:])
    # A file changed on disk is read again.
    (folder / "lib.dai").write_text(LIB + "let again = g\n")
    again = place(editor, folder, "lib.dai", LIB + "let again = g\n", "again = g", 8, 1)
    assert await references_at(editor, uri, USE, "lib.g", 4) == sorted([*expected, again])
    editor.close(uri)


async def test_a_schemes_references_are_its_bases_and_studies(editor, folder):
    uri = await editor.open(folder / "use.dai")
    expected = [
        place(editor, folder, "use.dai", USE, "S extends", length=1),
        place(editor, folder, "use.dai", USE, "tunes S", 6),
    ]
    assert await references_at(editor, uri, USE, "S extends") == sorted(expected)
    base = await references_at(editor, uri, USE, "Base")
    assert base == sorted(
        [place(editor, folder, "lib.dai", LIB, "Base"), place(editor, folder, "use.dai", USE, "Base")]
    )
    editor.close(uri)


async def test_a_networks_references_are_the_net_fields_that_name_it(editor, folder):
    net = (folder / "small.net").read_text()
    uri = await editor.open(folder / "small.net")
    expected = [place(editor, folder, "lib.dai", LIB, '"small.net"')]
    assert await references_at(editor, uri, net, "Conv2D") == expected
    editor.close(uri)
    uri = await editor.open(folder / "lib.dai")
    assert await references_at(editor, uri, LIB, "small.net") == expected
    editor.close(uri)


async def rename_at(editor, uri, text, marker, new_name, shift=0):
    return await editor.client.text_document_rename_async(
        T.RenameParams(T.TextDocumentIdentifier(uri), editor.at(text, marker, shift), new_name)
    )


async def test_a_rename_rewrites_every_file_and_they_still_check(editor, folder):
    uri = await editor.open(folder / "use.dai")
    prepared = await editor.client.text_document_prepare_rename_async(
        T.PrepareRenameParams(T.TextDocumentIdentifier(uri), editor.at(USE, "lib.g", 4))
    )
    assert prepared.placeholder == "g"
    assert prepared.range == editor.range(USE, USE.index("lib.g") + 4, USE.index("lib.g") + 5)
    edit = await rename_at(editor, uri, USE, "lib.g", "shared", 4)
    assert sorted(edit.changes) == [(folder / "lib.dai").as_uri(), uri]
    for name, text in (("lib.dai", LIB), ("use.dai", USE)):
        (folder / name).write_text(editor.apply(text, edit.changes[(folder / name).as_uri()]))
    assert "let shared = Mix" in (folder / "lib.dai").read_text()
    assert "let h = Mix(lib.shared, shared, Range" in (folder / "use.dai").read_text()
    for name in ("lib.dai", "use.dai"):
        assert check_path(str(folder / name)).diagnostics == ()
    editor.close(uri)


async def test_a_rename_reads_the_editors_unsaved_text(editor, folder):
    edited = "# moved down a line\n" + LIB
    lib = await editor.open(folder / "lib.dai", edited)
    uri = await editor.open(folder / "use.dai")
    edit = await rename_at(editor, uri, USE, "Base", "Root")
    assert editor.apply(edited, edit.changes[lib]) == edited.replace("Base", "Root")
    assert editor.apply(USE, edit.changes[uri]) == USE.replace("lib.Base", "lib.Root")
    editor.close(uri)
    editor.close(lib)


@pytest.mark.parametrize(
    ("marker", "shift", "new_name", "reason"),
    [
        ("lib.g", 4, "2g", "`2g` is not a name"),
        ("lib.g", 4, "scheme", "`scheme` is not a name"),
        ("lib.g", 4, "Box", "`Box` is a constructor"),
        ("lib.g", 4, "eps", "`lib.dai` already defines a let `eps`"),
        ("S extends", 0, "T2", None),
    ],
)
async def test_a_rename_that_cannot_stand_is_refused_with_its_reason(
    editor, folder, marker, shift, new_name, reason
):
    uri = await editor.open(folder / "use.dai")
    if reason is None:
        edit = await rename_at(editor, uri, USE, marker, new_name, shift)
        assert editor.apply(USE, edit.changes[uri]) == USE.replace("scheme S", "scheme T2").replace(
            "tunes S", "tunes T2"
        )
    else:
        with pytest.raises(JsonRpcException) as refused:
            await rename_at(editor, uri, USE, marker, new_name, shift)
        assert refused.value.code == T.LSPErrorCodes.RequestFailed
        assert reason in refused.value.message
    editor.close(uri)


async def test_what_is_not_the_users_is_not_renamed(editor, folder):
    text = 'import stdlib.goals\nlet g = Baseline_S18\nscheme X extends S {\n    net = "small.net"\n}\n'
    uri = await editor.open(folder / "more.dai", text)
    for marker, reason in (("Baseline_S18", "standard library"), ("small.net", "rename the file")):
        with pytest.raises(JsonRpcException) as refused:
            await editor.client.text_document_prepare_rename_async(
                T.PrepareRenameParams(T.TextDocumentIdentifier(uri), editor.at(text, marker, 2))
            )
        assert reason in refused.value.message
    # A constructor or a number is no name of the sources: nothing to rename there.
    for marker in ("import", "goals"):
        assert (
            await editor.client.text_document_prepare_rename_async(
                T.PrepareRenameParams(T.TextDocumentIdentifier(uri), editor.at(text, marker, 1))
            )
            is None
        )
    editor.close(uri)
