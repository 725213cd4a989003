"""Quick fixes: a disagreeing input_shape annotation becomes the inferred shape (E131); an unknown name,
layer or keyword becomes the checker's did-you-mean suggestion (E101, E102, E103)."""

from __future__ import annotations

import pytest
from lsprotocol import types as T

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def actions_for(editor, path, text: str) -> tuple[str, list[T.CodeAction]]:
    uri = await editor.open(path, text)
    diagnostics = await editor.diagnostics(uri)
    result = await editor.client.text_document_code_action_async(
        T.CodeActionParams(
            T.TextDocumentIdentifier(uri=uri),
            editor.range(text, 0, len(text)),
            T.CodeActionContext(diagnostics=diagnostics),
        )
    )
    editor.close(uri)
    return uri, result or []


def fixed(editor, uri: str, text: str, action: T.CodeAction) -> str:
    """Apply an action's single edit, with positions converted back from the client's encoding."""
    (edit,) = action.edit.changes[uri]
    lines = text.split("\n")

    def offset(position: T.Position) -> int:
        line = lines[position.line]
        count = next(i for i in range(len(line) + 1) if editor.units(line[:i]) >= position.character)
        return sum(len(x) + 1 for x in lines[: position.line]) + count

    return text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end) :]


async def test_wrong_input_shape_becomes_the_inferred_one(editor, tmp_path):
    text = (
        "Conv2D filters=16 kernel_size=[3, 3] input_shape=[8, 8, 1] padding=1\nReLU  # 🙂\n"
        "Conv2D filters=8 kernel_size=[3, 3] input_shape=[8, 8, 15]\n"
    )
    uri, actions = await actions_for(editor, tmp_path / "a.net", text)
    (action,) = actions
    assert action.kind == T.CodeActionKind.QuickFix and action.is_preferred
    assert action.title == "Replace input_shape by the inferred shape [8, 8, 16]"
    assert [d.code for d in action.diagnostics] == ["E131"]
    assert fixed(editor, uri, text, action) == text.replace("[8, 8, 15]", "[8, 8, 16]")


async def test_unknown_names_become_the_suggestion(editor, tmp_path):
    text = "import stdlib.goals as goals\nlet 🙂 = 1\nlet g = Mix(Piont, goals.Basline, weigth=0.5)\n"
    uri, actions = await actions_for(editor, tmp_path / "b.dai", text)
    titles = sorted(a.title for a in actions)
    assert titles == [
        "Replace `Piont` by `Point`",
        "Replace `goals.Basline` by `goals.Baseline`",
        "Replace `weigth` by `weight`",
    ]
    for action in actions:
        result = fixed(editor, uri, text, action)
        assert result.count("Point") + result.count("goals.Baseline") + result.count("weight=") == 1


async def test_unknown_layer_becomes_the_suggestion(editor, tmp_path):
    text = "Linear out=10 input_shape=[4]\nReLu\n"
    uri, actions = await actions_for(editor, tmp_path / "c.net", text)
    (action,) = actions
    assert fixed(editor, uri, text, action) == text.replace("ReLu", "ReLU")


async def test_no_action_without_a_certain_fix(editor, tmp_path):
    _, actions = await actions_for(editor, tmp_path / "d.dai", "let g = Zzzzzz\nlet h = Mix(Point, Box, 2)\n")
    assert actions == []
