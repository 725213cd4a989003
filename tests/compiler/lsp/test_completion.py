"""Completion: constructors of the expected type, keywords of the enclosing call, lets, scheme fields,
layer kinds and their parameter keys, on complete and on half-typed text."""

from __future__ import annotations

import pytest
from lsprotocol import types as T

from daic.compiler.constructors import REGISTRY
from daic.compiler.registry import LAYER_CATEGORIES, Category

pytestmark = pytest.mark.asyncio(loop_scope="session")

GOALS = {d.name for d in REGISTRY.of_category(Category.GOAL)}
SCHEDULES = {d.name for d in REGISTRY.of_category(Category.SCHEDULE)}
LAYERS = set(REGISTRY.names(*LAYER_CATEGORIES))


async def labels_at(editor, path, text: str, marker: str, shift: int | None = None) -> list[str]:
    """Open `text`, complete at the end of `marker` (or `shift` code points into it), close."""
    uri = await editor.open(path, text)
    position = editor.at(text, marker, len(marker) if shift is None else shift)
    result = await editor.client.text_document_completion_async(
        T.CompletionParams(T.TextDocumentIdentifier(uri=uri), position)
    )
    editor.close(uri)
    items = result.items if isinstance(result, T.CompletionList) else result
    return [item.label for item in items]


async def test_goal_argument_offers_goals_not_schedules(editor, tmp_path):
    text = "let g = Mix(Point, \n"
    labels = await labels_at(editor, tmp_path / "a.dai", text, "Mix(Point, ")
    assert set(labels) >= GOALS
    assert not SCHEDULES & set(labels)
    assert "Digits" not in labels and "Adam" not in labels
    # The keywords not yet given, not g1 (bound by position).
    assert {"g2=", "weight="} <= set(labels) and "g1=" not in labels


async def test_number_argument_offers_schedules_not_goals(editor, tmp_path):
    text = "let g = Mix(Point, Box, \n"
    labels = await labels_at(editor, tmp_path / "b.dai", text, "Box, ")
    assert set(labels) >= SCHEDULES
    assert not GOALS & set(labels)


async def test_keyword_argument_and_nested_call(editor, tmp_path):
    text = "let g = Sample(delta=Lin(0, 1, 10, 2), g_t=\n"
    labels = await labels_at(editor, tmp_path / "c.dai", text, "g_t=")
    assert set(labels) >= GOALS and not SCHEDULES & set(labels)
    text = "let s = Until(90, Lin(0, 0.2, 50, 40), "
    labels = await labels_at(editor, tmp_path / "d.dai", text, "40), ")
    assert set(labels) >= SCHEDULES and "then=" in labels


async def test_scheme_fields_and_field_types(editor, tmp_path):
    text = "scheme S {\n    data = Digits\n    \n}\n"
    labels = await labels_at(editor, tmp_path / "e.dai", text, "Digits\n    ")
    assert {"goal", "epsilon", "epochs", "net", "optimizer"} <= set(labels)
    assert "data" not in labels  # already given
    text = "scheme S {\n    goal = \n}\n"
    labels = await labels_at(editor, tmp_path / "f.dai", text, "goal = ")
    assert set(labels) >= GOALS and not SCHEDULES & set(labels)
    text = "scheme S {\n    epsilon = \n}\n"
    labels = await labels_at(editor, tmp_path / "g.dai", text, "epsilon = ")
    assert set(labels) >= SCHEDULES and not GOALS & set(labels)
    text = "scheme S {\n    test = [Accuracy, \n}\n"
    labels = await labels_at(editor, tmp_path / "h.dai", text, "Accuracy, ")
    # PGD is a test and a goal: the test's completion is the test
    assert {"Accuracy", "MIFGSM", "PGD", "Verify"} <= set(labels) and not (GOALS - {"PGD"}) & set(labels)
    text = "scheme S {\n    test = [Verify(\n}\n"
    labels = await labels_at(editor, tmp_path / "i.dai", text, "Verify(")
    assert {"Box", "HBox", "domain="} <= set(labels) and "Point" not in labels


async def test_lets_of_fitting_type(editor, tmp_path):
    text = "import stdlib.goals\nlet eps = 8/255\nlet mine = Mix(Point, Box, 0.5)\nlet g = Sub(eps, \n"
    labels = await labels_at(editor, tmp_path / "j.dai", text, "Sub(eps, ")
    assert {"mine", "Baseline", "InSamp"} <= set(labels)
    assert "eps" not in labels  # a Float where a goal is expected
    labels = await labels_at(editor, tmp_path / "k.dai", text, "Sub(", 4)
    assert "eps" in labels and "mine" not in labels


async def test_qualified_names_from_an_aliased_import(editor, tmp_path):
    text = "import stdlib.goals as g\nlet x = Mix(Point, g.\n"
    labels = await labels_at(editor, tmp_path / "l.dai", text, "g.")
    assert {"Baseline", "InSampLPA_R34"} <= set(labels)
    assert "Mix" not in labels


async def test_statement_keywords_and_imports(editor, tmp_path):
    text = "let a = 1\n"
    labels = await labels_at(editor, tmp_path / "m.dai", text + "sc", "sc")
    assert labels == ["import", "let", "scheme", "study"]
    labels = await labels_at(editor, tmp_path / "n.dai", "import ", "import ")
    assert {"stdlib.goals", "stdlib.schemes"} <= set(labels)
    text = "import stdlib.schemes\nscheme Mine extends \n"
    labels = await labels_at(editor, tmp_path / "o.dai", text, "extends ")
    assert "InSampLPA_R34" in labels


async def test_net_layer_kinds_and_parameter_keys(editor, tmp_path):
    labels = await labels_at(editor, tmp_path / "a.net", "ReLU\nCon", "Con")
    assert set(labels) >= LAYERS
    labels = await labels_at(editor, tmp_path / "b.net", "Conv2D filters=16 ", "filters=16 ")
    assert {"kernel_size", "stride", "padding", "bias", "input_shape"} <= set(labels)
    assert "filters" not in labels
    labels = await labels_at(editor, tmp_path / "c.net", "DeepLoss bw=", "bw=")
    assert set(labels) >= SCHEDULES and not GOALS & set(labels)
    labels = await labels_at(editor, tmp_path / "d.net", "DeepLoss act=", "act=")
    assert "relu" in labels


async def test_text_edit_replaces_the_typed_prefix(editor, tmp_path):
    text = "let 🙂 = 1\nlet g = Mix(Poi"
    path = tmp_path / "p.dai"
    uri = await editor.open(path, text)
    position = editor.position(text, len(text))
    result = await editor.client.text_document_completion_async(
        T.CompletionParams(T.TextDocumentIdentifier(uri=uri), position)
    )
    point = next(item for item in result.items if item.label == "Point")
    assert point.text_edit.range == editor.range(text, len(text) - 3, len(text))
    assert point.text_edit.new_text == "Point"
    assert "Trains on the centre" in point.documentation.value
    editor.close(uri)


async def test_no_completion_in_comments_and_strings(editor, tmp_path):
    assert await labels_at(editor, tmp_path / "q.dai", "# Mix(", "Mix(") == []
    assert await labels_at(editor, tmp_path / "r.dai", 'let s = "Mix(', "Mix(") == []


async def edits_at(editor, path, text: str) -> dict[str, tuple[T.Range, str]]:
    """Complete at the end of `text`: each item's edit, by label."""
    uri = await editor.open(path, text)
    result = await editor.client.text_document_completion_async(
        T.CompletionParams(T.TextDocumentIdentifier(uri=uri), editor.position(text, len(text)))
    )
    editor.close(uri)
    return {item.label: (item.text_edit.range, item.text_edit.new_text) for item in result.items}


async def test_dotted_items_replace_the_whole_qualified_prefix(editor, tmp_path):
    text = "import stdlib.go"
    edits = await edits_at(editor, tmp_path / "r.dai", text)
    assert edits["stdlib.goals"] == (editor.range(text, len("import "), len(text)), "stdlib.goals")
    text = "import stdlib.schemes as s\nscheme X extends s."
    edits = await edits_at(editor, tmp_path / "s.dai", text)
    assert edits["s.Baseline"] == (editor.range(text, len(text) - 2, len(text)), "s.Baseline")
    text = "import stdlib.goals\nlet x = Mix(goals.Ba"
    edits = await edits_at(editor, tmp_path / "t.dai", text)
    assert edits["Baseline"] == (editor.range(text, len(text) - 2, len(text)), "Baseline")
    assert not any(label.endswith("=") for label in edits)  # no keywords after a qualifier


async def test_study_fields_scheme_names_and_search_spaces(editor, tmp_path):
    scheme = "scheme S {\n    data = Digits\n}\n"
    labels = await labels_at(editor, tmp_path / "s1.dai", scheme + "study T tunes \n", "tunes ")
    assert labels == ["S"]
    text = scheme + "study T tunes S {\n    trials = 4\n    \n}\n"
    labels = await labels_at(editor, tmp_path / "s2.dai", text, "trials = 4\n    ")
    assert {"objectives", "sampler", "pruner", "validation"} <= set(labels)
    assert "trials" not in labels and "epsilon" not in labels  # a study's fields, not a scheme's
    text = scheme + "study T tunes S {\n    sampler = \n}\n"
    labels = await labels_at(editor, tmp_path / "s3.dai", text, "sampler = ")
    assert {"TPE", "NSGAII", "Random", "Grid"} <= set(labels) and "Adam" not in labels
    # Where a Float goes, the spaces that give one; Choice wherever a value goes.
    text = "let o = Adam(lr=\n"
    labels = await labels_at(editor, tmp_path / "s4.dai", text, "lr=")
    assert {"Range", "LogRange", "IntRange", "Choice"} <= set(labels)
    text = "let g = Mix(Point, \n"
    labels = await labels_at(editor, tmp_path / "s5.dai", text, "Mix(Point, ")
    assert "Choice" in labels and not {"Range", "LogRange", "IntRange"} & set(labels)
