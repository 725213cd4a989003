"""Semantic tokens: every word of both languages with the role the checker gives it, in the client's
position encoding."""

from __future__ import annotations

import pytest
from lsprotocol import types as T

from daic.compiler.lsp.semantic_tokens import LEGEND

from .conftest import DIGITS

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def tokens_of(editor, uri: str, text: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """The server's tokens, decoded as a client decodes them: (the text, its type, its modifiers)."""
    answer = await editor.client.text_document_semantic_tokens_full_async(
        T.SemanticTokensParams(T.TextDocumentIdentifier(uri))
    )
    found, line, character = [], 0, 0
    data = answer.data
    for i in range(0, len(data), 5):
        delta_line, delta_start, length, kind, bits = data[i : i + 5]
        line += delta_line
        character = delta_start if delta_line else character + delta_start
        start = editor.offset(text, T.Position(line, character))
        end = editor.offset(text, T.Position(line, character + length))
        modifiers = tuple(m for j, m in enumerate(LEGEND.token_modifiers) if bits >> j & 1)
        found.append((text[start:end], LEGEND.token_types[kind], modifiers))
    return found


async def test_a_dai_files_words_have_their_roles(editor, tmp_path):
    (tmp_path / "lib.dai").write_text("let g = Box\nscheme Base {\n    epochs = 2\n}\n")
    text = (
        'import "lib.dai" as lib  # 🙂 a note\n'
        "let h = Mix(lib.g, Box, 0.5)  # 🙂\n"
        "scheme S extends lib.Base {\n"
        "    epochs = 2 * -3\n"
        "    goal = Mix(g1=h, g2=PGD(k=5), weight=0.5)\n"
        "}\n"
    )
    uri = await editor.open(tmp_path / "main.dai", text)
    library = ("defaultLibrary",)
    assert await tokens_of(editor, uri, text) == [
        ("import", "keyword", ()),
        ('"lib.dai"', "string", ()),
        ("as", "keyword", ()),
        ("lib", "namespace", ()),
        ("# 🙂 a note", "comment", ()),
        ("let", "keyword", ()),
        ("h", "variable", ("declaration", "readonly")),
        ("Mix", "function", library),
        ("lib", "namespace", ()),
        ("g", "variable", ("readonly",)),
        ("Box", "function", library),
        ("0.5", "number", ()),
        ("# 🙂", "comment", ()),
        ("scheme", "keyword", ()),
        ("S", "class", ("declaration",)),
        ("extends", "keyword", ()),
        ("lib", "namespace", ()),
        ("Base", "class", ()),
        ("epochs", "property", ()),
        ("2", "number", ()),
        ("*", "operator", ()),
        ("-", "operator", ()),
        ("3", "number", ()),
        ("goal", "property", ()),
        ("Mix", "function", library),
        ("g1", "parameter", ()),
        ("h", "variable", ("readonly",)),
        ("g2", "parameter", ()),
        ("PGD", "function", library),
        ("k", "parameter", ()),
        ("5", "number", ()),
        ("weight", "parameter", ()),
        ("0.5", "number", ()),
    ]
    editor.close(uri)


async def test_the_standard_librarys_lets_and_unknown_names(editor, tmp_path):
    text = "import stdlib.goals\nlet a = Baseline_S18\nlet b = Boxx\n"
    uri = await editor.open(tmp_path / "std.dai", text)
    found = await tokens_of(editor, uri, text)
    assert ("Baseline_S18", "variable", ("readonly", "defaultLibrary")) in found
    assert [t for t in found if t[0] in ("stdlib", "goals")] == [
        ("stdlib", "namespace", ()),
        ("goals", "namespace", ()),
    ]
    # A name the checker could not resolve keeps the editor's plain colour.
    assert not [t for t in found if t[0] == "Boxx"]
    editor.close(uri)


async def test_a_net_files_layers_and_parameters(editor, tmp_path):
    text = "Conv2D filters=8 kernel_size=3 input_shape=[8, 8, 1]  # first\nReLU\nLinear out=10\n"
    uri = await editor.open(tmp_path / "n.net", text)
    found = await tokens_of(editor, uri, text)
    assert found[:6] == [
        ("Conv2D", "function", ("defaultLibrary",)),
        ("filters", "parameter", ()),
        ("8", "number", ()),
        ("kernel_size", "parameter", ()),
        ("3", "number", ()),
        ("input_shape", "parameter", ()),
    ]
    assert found[-5:] == [
        ("# first", "comment", ()),
        ("ReLU", "function", ("defaultLibrary",)),
        ("Linear", "function", ("defaultLibrary",)),
        ("out", "parameter", ()),
        ("10", "number", ()),
    ]
    editor.close(uri)
    uri = await editor.open(DIGITS)
    assert len(await tokens_of(editor, uri, DIGITS.read_text())) > 10
    editor.close(uri)
