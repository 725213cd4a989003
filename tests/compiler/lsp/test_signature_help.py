"""Signature help: inside a call, every declaration of the callee with the argument's parameter active
(by position, with the checker's choice of positional form, or by keyword); on a .net layer line, the
layer's parameters."""

from __future__ import annotations

import pytest
from lsprotocol import types as T

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def help_at(editor, path, text: str, marker: str) -> T.SignatureHelp | None:
    uri = await editor.open(path, text)
    result = await editor.client.text_document_signature_help_async(
        T.SignatureHelpParams(T.TextDocumentIdentifier(uri=uri), editor.at(text, marker, len(marker)))
    )
    editor.close(uri)
    return result


def active(result: T.SignatureHelp) -> str:
    signature = result.signatures[result.active_signature]
    return signature.parameters[signature.active_parameter].label


async def test_positional_and_keyword_arguments(editor, tmp_path):
    result = await help_at(editor, tmp_path / "a.dai", "let g = Mix(Point, ", "Point, ")
    assert [s.label for s in result.signatures] == ["Mix(g1: Goal, g2: Goal, weight: Schedule) -> Goal"]
    assert active(result) == "g2: Goal"
    assert "Cartesian product" in result.signatures[0].documentation.value
    result = await help_at(editor, tmp_path / "b.dai", "let g = Mix(weight=0.5, g1=", "g1=")
    assert active(result) == "g1: Goal"


async def test_nested_call_and_positional_forms(editor, tmp_path):
    text = "let g = Sample(Lin(0, 1, 150, 10), 0.5, "
    result = await help_at(editor, tmp_path / "c.dai", text, "0.5, ")
    assert result.signatures[0].label.startswith("Sample(delta: Schedule, r: Schedule = 1, g_s: Goal")
    # Three arguments so far could be either form; the checker picks (delta, g_s, g_t).
    assert active(result) == "g_t: Goal"
    result = await help_at(editor, tmp_path / "d.dai", "let g = Sample(Lin(0, ", "Lin(0, ")
    assert active(result) == "end: Float"


async def test_net_layer_line(editor, tmp_path):
    result = await help_at(editor, tmp_path / "a.net", "Conv2D filters=16 kernel_size=", "kernel_size=")
    assert result.signatures[0].label.startswith("Conv2D(filters: Int, kernel_size: Int or List[Int]")
    assert active(result) == "kernel_size: Int or List[Int]"
    result = await help_at(editor, tmp_path / "b.net", "DeepLoss bw=Until(90, ", "90, ")
    assert active(result) == "first: Schedule"


async def test_nothing_outside_calls(editor, tmp_path):
    assert await help_at(editor, tmp_path / "e.dai", "let g = Box", "Box") is None
    assert await help_at(editor, tmp_path / "f.dai", "let g = Nope(", "Nope(") is None
