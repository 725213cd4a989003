"""Whole-document formatting: `daic fmt`'s canonical text, and nothing for text that does not parse."""

from __future__ import annotations

import pytest
from lsprotocol import types as T

from daic.dsl.format import format_tree
from daic.dsl.parser import parse_net

pytestmark = pytest.mark.asyncio(loop_scope="session")

OPTIONS = T.FormattingOptions(tab_size=4, insert_spaces=True)


async def format_text(editor, path, text: str) -> list[T.TextEdit]:
    uri = await editor.open(path, text)
    edits = await editor.client.text_document_formatting_async(
        T.DocumentFormattingParams(T.TextDocumentIdentifier(uri=uri), OPTIONS)
    )
    editor.close(uri)
    return edits or []


def apply(editor, text: str, edits: list[T.TextEdit]) -> str:
    (edit,) = edits
    assert edit.range == editor.range(text, 0, len(text))
    return edit.new_text


async def test_formats_dai(editor, tmp_path):
    text = "import stdlib.goals\nscheme S {\n  goal=Mix(Point,Box,0.5)  # the goal\n  epsilon = 8/255\n}\n"
    formatted = apply(editor, text, await format_text(editor, tmp_path / "a.dai", text))
    assert formatted == (
        "import stdlib.goals\n\nscheme S {\n    goal = Mix(Point, Box, 0.5)  # the goal\n"
        "    epsilon = 8 / 255\n}\n"
    )
    assert await format_text(editor, tmp_path / "b.dai", formatted) == []


async def test_formats_net_like_daic_fmt(editor, tmp_path):
    text = (
        "Conv2D, filters=16, kernel_size=[3,3], input_shape=[8, 8, 1]\nParNet1\n    ReLU\nParNet2\nParSum\n"
    )
    formatted = apply(editor, text, await format_text(editor, tmp_path / "c.net", text))
    assert formatted == format_tree(parse_net(text).tree)
    assert formatted.startswith("Conv2D filters=16 kernel_size=[3, 3] input_shape=[8, 8, 1]\n")


async def test_semantic_errors_do_not_stop_formatting_but_syntax_errors_do(editor, tmp_path):
    assert await format_text(editor, tmp_path / "d.dai", "let g =   Boxx\n") != []
    assert await format_text(editor, tmp_path / "e.dai", "let g = Mix(Point,\nlet h =  1\n") == []


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("cr.dai", "let a  =  Box  # x\rlet b = a\n", "let a = Box  # x\nlet b = a\n"),
        ("cr.net", "ReLU  # x\rLinear  out=10\n", "ReLU  # x\nLinear out=10\n"),
    ],
)
async def test_a_lone_carriage_return_ends_a_line(editor, tmp_path, name, text, expected):
    # The client splits lines at `\r` too: the edit must cover all of its lines, and keep each one once.
    assert editor.apply(text, await format_text(editor, tmp_path / name, text)) == expected
