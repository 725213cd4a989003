"""The .net parser on the paper's nine listings (copied verbatim into tests/data/listings) and on
hand-written nets."""

from pathlib import Path

import pytest

from daic.dsl import ast as A
from daic.dsl.parser import parse_net

LISTINGS = Path(__file__).parents[1] / "data" / "listings"


def listing(name: str) -> str:
    return (LISTINGS / name).read_text()


@pytest.mark.parametrize("path", sorted(LISTINGS.glob("*.net")), ids=lambda p: p.stem)
def test_every_listing_parses_with_only_the_known_defects(path):
    result = parse_net(path.read_text())
    if path.stem == "skipnet18_combo":
        assert [d.code.id for d in result.diagnostics] == ["E009", "E009"]
    else:
        assert result.diagnostics == ()


def test_listing_layer_counts_and_branch_bodies():
    tree = parse_net(listing("resnettiny_fewcombo.net")).tree
    assert len(tree.layers) == 32
    kinds = [layer.kind for layer in tree.layers]
    assert kinds[:6] == ["Normalize", "CorrMaxK", "Conv2D", "ReLU", "DecorrMin", "ParNet1"]
    par1, par2, parsum = tree.layers[5:8]
    assert [layer.kind for layer in par1.body] == ["Conv2D"]
    assert [layer.kind for layer in par2.body] == ["Conv2D", "ReLU", "Conv2D"]
    assert parsum.kind == "ParSum" and parsum.body == ()


def test_empty_branch_bodies_are_allowed():
    tree = parse_net(listing("densenet100_none.net")).tree
    skip1, skip2, cat = tree.layers[2:5]
    assert (skip1.kind, skip1.body) == ("SkipNet1", ())
    assert len(skip2.body) == 4
    assert cat.kind == "SkipCat" and cat.param("dim").value == A.Number(1)


def test_parameter_values_and_spans():
    text = "Conv2D, filters=16, kernel_size=[3, 3], stride=[1, 1], padding=1\nCorrMaxK only_train=True k=2\n"
    tree = parse_net(text).tree
    conv, corr = tree.layers
    assert conv.param("filters").value == A.Number(16)
    assert conv.param("kernel_size").value == A.ListExpr((A.Number(3), A.Number(3)))
    assert corr.param("only_train").value == A.Bool(True)
    span = conv.param("kernel_size").span
    assert (span.line, span.column, span.end_column) == (1, 21, 39)
    assert conv.kind_span.end_column == 7
    assert corr.span.line == 2


def test_schedule_values_in_deeploss():
    text = "DeepLoss only_train=True bw=Until(24, Lin(0,0.1,20,4), Lin(0.1,0,50,0)) act=relu\n"
    layer = parse_net(text).tree.layers[0]
    bw = layer.param("bw").value
    assert isinstance(bw, A.Call) and bw.func.dotted == "Until"
    assert bw.args[1] == A.Call(A.Name(("Lin",)), (A.Number(0), A.Number(0.1), A.Number(20), A.Number(4)))
    assert layer.param("act").value == A.Name(("relu",))


def test_skipnet18_combo_defects_are_precise():
    result = parse_net(listing("skipnet18_combo.net"))
    placeholder, function = result.diagnostics
    line = listing("skipnet18_combo.net").splitlines()[27]
    assert placeholder.span.line == 28
    assert line[placeholder.span.column - 1 : placeholder.span.end_column - 1] == "%s,%s,%s,%s"
    assert placeholder.message == "`%s` (4 times) is not a value"
    assert "bw=Until(90, Lin(0, 0.2, 50, 40), 0)" in placeholder.hint
    assert function.span.line == 28
    assert line[function.span.column - 1 : function.span.end_column - 1] == "<function relu at 0x10b94d620>"
    assert function.hint == "write the function's name: relu"
    # The rest of the file still parses: the layer keeps its valid parameters.
    (deeploss,) = [layer for layer in result.tree.layers if layer.kind == "DeepLoss"]
    assert deeploss.span.line == 28
    assert [p.name for p in deeploss.params] == ["only_train", "bw", "act"]
    assert deeploss.param("only_train").value == A.Bool(True)
    assert len(result.tree.layers) == 48


def test_comments_are_kept_out_of_the_tree_but_recorded():
    result = parse_net("# a net\nReLU  # after\n\n# end\n")
    assert [layer.kind for layer in result.tree.layers] == ["ReLU"]
    assert [c.text for c in result.tree.comments] == ["# a net", "# after", "# end"]


def test_indentation_errors():
    result = parse_net("ReLU\nParNet1\n        Conv2D filters=1\n    Linear out=3\n")
    (d,) = result.diagnostics
    assert (d.code.id, d.span.line, d.span.column) == ("E006", 4, 1)
    assert d.hint == "indent as far as one of the enclosing blocks: 0 or 8 characters"
    result = parse_net("    ReLU\n")
    assert [d.code.id for d in result.diagnostics] == ["E006"]


def test_mixed_tabs_and_spaces():
    result = parse_net("ParNet1\n    ReLU\n\tReLU\n")
    (d,) = result.diagnostics
    assert (d.code.id, d.span.line, d.message) == ("E007", 3, "indentation mixes tabs and spaces")


def test_each_broken_line_is_reported_and_the_rest_parses():
    result = parse_net("Conv2D filters=\nReLU\nLinear out=10 ]\nLinear out=)\n")
    assert [(d.code.id, d.span.line) for d in result.diagnostics] == [("E004", 1), ("E003", 3), ("E003", 4)]
    assert [layer.kind for layer in result.tree.layers] == ["ReLU"]
    assert result.diagnostics[1].message == "`]` closes nothing"
