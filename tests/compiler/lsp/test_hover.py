"""Hover: constructor documentation from the registry, a layer line's shapes and counts, a let's type and
value, a field's and a keyword's parameter documentation."""

from __future__ import annotations

import pytest
from lsprotocol import types as T

from daic.compiler.constructors import REGISTRY
from daic.compiler.docs import describe

from .conftest import DIGITS, QUICKSTART, ROOT

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def hover_at(editor, uri: str, text: str, marker: str, shift: int = 0) -> T.Hover | None:
    return await editor.client.text_document_hover_async(
        T.HoverParams(T.TextDocumentIdentifier(uri=uri), editor.at(text, marker, shift))
    )


async def test_constructor_shows_registry_documentation(editor):
    text = QUICKSTART.read_text()
    uri = await editor.open(QUICKSTART, text)
    hover = await hover_at(editor, uri, text, "Mix(", 1)
    value = hover.contents.value
    assert hover.contents.kind == T.MarkupKind.Markdown
    assert "Mix(g1: Goal, g2: Goal, weight: Schedule) -> Goal" in value
    assert REGISTRY.lookup("Mix")[0].doc in value
    start = text.index("Mix(")
    assert hover.range == editor.range(text, start, start + 3)
    # Every line of `daic doc Mix` is in the hover.
    for line in describe(REGISTRY.lookup("Mix")[0]).splitlines():
        assert line.strip() in value
    editor.close(uri)


async def test_name_with_two_declarations_lists_both(editor):
    text = QUICKSTART.read_text()
    uri = await editor.open(QUICKSTART, text)
    value = (await hover_at(editor, uri, text, "HBox")).contents.value
    assert "HBox() -> Domain" in value
    goal_box = (await hover_at(editor, uri, text, "Box), Lin")).contents.value
    assert "Box(folded: Bool = False) -> Goal" in goal_box and "Box() -> Domain" in goal_box
    # Where a goal is expected the goal comes first.
    assert goal_box.index("-> Goal") < goal_box.index("-> Domain")
    editor.close(uri)


async def test_layer_line_shows_shapes_neurons_and_parameters(editor):
    text = DIGITS.read_text()
    uri = await editor.open(DIGITS, text)
    value = (await hover_at(editor, uri, text, "Conv2D filters=32", 2)).contents.value
    assert "Conv2D filters=32 kernel_size=[4, 4] stride=[2, 2] padding=1" in value
    assert "input [8, 8, 16] → output [4, 4, 32]" in value
    assert "parameters 8,224" in value
    assert "Conv2D(filters: Int" in value
    relu = (await hover_at(editor, uri, text, "ReLU\nLinear out=100", 1)).contents.value
    assert "input [4, 4, 32] → output [4, 4, 32]" in relu and "neurons 512" in relu
    key = (await hover_at(editor, uri, text, "out=100", 1)).contents.value
    assert "out: Int" in key and "Output width." in key and "input [4, 4, 32] → output [100]" in key
    editor.close(uri)


async def test_block_head_shows_branch_shapes(editor):
    path = ROOT / "tests" / "data" / "listings" / "resnettiny_none.net"
    text = path.read_text()
    uri = await editor.open(path, text)
    value = (await hover_at(editor, uri, text, "ParSum")).contents.value
    assert "sum of its branches: [32, 32, 16] and [32, 32, 16]" in value
    editor.close(uri)


async def test_let_shows_type_and_value(editor, tmp_path):
    text = "import stdlib.goals\nlet eps = 8/255\nlet g = Baseline\nlet e2 = eps\n"
    uri = await editor.open(tmp_path / "lets.dai", text)
    eps = (await hover_at(editor, uri, text, "eps =")).contents.value
    assert "let eps: Float = 8 / 255" in eps and "value: 0.0313725" in eps
    used = (await hover_at(editor, uri, text, "eps\n", 1)).contents.value
    assert "let eps: Float = 8 / 255" in used
    base = (await hover_at(editor, uri, text, "Baseline")).contents.value
    assert "let Baseline: Goal = Mix(Point, Sub(Lin(0, 1, 150, 10), Box), Lin(0, 0.5, 150, 10))" in base
    assert "defined in stdlib/goals.dai" in base
    editor.close(uri)


async def test_words_in_comments_and_strings_have_no_hover(editor, tmp_path):
    text = 'let eps = 0.1  # see eps and Mix here\nlet q = "eps Box"\n'
    uri = await editor.open(tmp_path / "prose.dai", text)
    assert await hover_at(editor, uri, text, "see eps", 5) is None
    assert await hover_at(editor, uri, text, "Mix here") is None
    assert await hover_at(editor, uri, text, '"eps', 2) is None
    assert "let eps: Float" in (await hover_at(editor, uri, text, "eps =")).contents.value
    editor.close(uri)
    net = "Linear out=10 input_shape=[4]  # Conv2D would need an image\n"
    uri = await editor.open(tmp_path / "prose.net", net)
    assert await hover_at(editor, uri, net, "Conv2D would") is None
    assert "Linear" in (await hover_at(editor, uri, net, "Linear")).contents.value
    editor.close(uri)


async def test_field_and_keyword_show_parameter_docs(editor):
    text = QUICKSTART.read_text()
    uri = await editor.open(QUICKSTART, text)
    field = (await hover_at(editor, uri, text, "epsilon")).contents.value
    assert "epsilon: Schedule" in field and "scheme field" in field
    keyword = (await hover_at(editor, uri, text, "mu=0.8")).contents.value
    assert "mu: Float = 0.8" in keyword and "Momentum decay." in keyword
    editor.close(uri)


async def test_hover_on_half_typed_text_and_on_nothing(editor, tmp_path):
    text = "let g = Mix(Point, Sub(\n"
    uri = await editor.open(tmp_path / "half.dai", text)
    value = (await hover_at(editor, uri, text, "Sub")).contents.value
    assert "Sub(delta: Schedule, g: Goal) -> Goal" in value
    assert await hover_at(editor, uri, text, "= Mix") is None
    editor.close(uri)


async def test_scheme_shows_its_fields_and_network(editor):
    text = QUICKSTART.read_text()
    uri = await editor.open(QUICKSTART, text)
    value = (await hover_at(editor, uri, text, "Quickstart")).contents.value
    assert "scheme Quickstart" in value
    assert "data = Digits" in value
    assert "network digits_conv.net: input [8, 8, 1] → output [10]" in value
    editor.close(uri)


async def test_net_call_inside_a_parameter(editor, tmp_path):
    text = "Linear out=10 input_shape=[4]\nDeepLoss bw=Until(90, Lin(0, 0.2, 50, 40), 0)\n"
    uri = await editor.open(tmp_path / "deep.net", text)
    value = (await hover_at(editor, uri, text, "Until")).contents.value
    assert "Until(epoch: Float, first: Schedule, then: Schedule) -> Schedule" in value
    assert "input [10] → output [10]" in value
    editor.close(uri)


async def test_a_path_too_long_costs_the_document_neither_diagnostics_nor_hover(editor, tmp_path):
    text = f'import "{"x" * 300}.dai" as x\nlet g = Mix(Point, Box, 0.5)\nlet h = Boxx\n'
    uri = await editor.open(tmp_path / "long.dai", text)
    got = await editor.diagnostics(uri)
    assert [d.code for d in got] == ["E110", "E101"]
    assert got[0].message.endswith(": File name too long")
    hover = await hover_at(editor, uri, text, "Mix(", 1)
    editor.close(uri)
    assert "Mix(g1: Goal, g2: Goal, weight: Schedule) -> Goal" in hover.contents.value


async def test_study_fields_and_search_spaces_show_their_documentation(editor, tmp_path):
    text = (
        "scheme S {\n    data = Digits\n    epsilon = Range(0.05, 0.2)\n}\n\n"
        "study T tunes S {\n    trials = 4\n    objectives = [Accuracy]\n}\n"
    )
    uri = await editor.open(tmp_path / "study.dai", text)
    field = (await hover_at(editor, uri, text, "trials")).contents.value
    assert "trials: Int = 20" in field and "study field" in field and "How many trials" in field
    space = (await hover_at(editor, uri, text, "Range")).contents.value
    assert "Range(low: Float, high: Float) -> Float" in space and "search space" in space
    scheme = (await hover_at(editor, uri, text, "S {\n    trials")).contents.value
    assert "scheme S" in scheme
    editor.close(uri)
