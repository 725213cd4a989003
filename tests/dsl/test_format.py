"""The formatter: canonical output, comments kept, idempotent, and parse(format(x)) == parse(x)."""

from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given, settings

from daic.dsl.format import format_dai, format_net
from daic.dsl.parser import parse_dai, parse_net

from .strategies import dai_files, nets

LISTINGS = Path(__file__).parents[1] / "data" / "listings"


@pytest.mark.parametrize("path", sorted(LISTINGS.glob("*.net")), ids=lambda p: p.stem)
def test_listings_round_trip(path):
    tree = parse_net(path.read_text()).tree
    once = format_net(tree)
    assert parse_net(once).tree == tree
    assert format_net(parse_net(once).tree) == once


def test_canonical_net_layout_keeps_comments_and_single_blank_lines():
    text = (
        "# ResNet block\nConv2D, filters=16, kernel_size=[3,3],padding=1   # first\n\n\n"
        "ParNet1\n\n    # shortcut\n    Conv2D filters=16\nParNet2\nParSum\n# end\n"
    )
    assert format_net(parse_net(text).tree) == (
        "# ResNet block\nConv2D filters=16 kernel_size=[3, 3] padding=1  # first\n\n"
        "ParNet1\n    # shortcut\n    Conv2D filters=16\nParNet2\nParSum\n# end\n"
    )


def test_canonical_dai_layout_breaks_long_calls():
    text = (
        "import stdlib.goals\nlet eps=8/255\nscheme S extends B { # the scheme\n"
        "goal=Mix(Sub(Lin(0, 1, 20, 20), IFGSM(5)), "
        "Sub(Lin(0,1,150,10),Sample(Lin(0, 1, 150, 10), 1, Uniform, Box)), Lin(0, 0.5, 150, 10))\n"
        "  epochs = 10 # short\n}\n"
    )
    assert format_dai(parse_dai(text).tree) == (
        "import stdlib.goals\nlet eps = 8 / 255\n\nscheme S extends B {  # the scheme\n"
        "    goal = Mix(\n"
        "        Sub(Lin(0, 1, 20, 20), IFGSM(5)),\n"
        "        Sub(Lin(0, 1, 150, 10), Sample(Lin(0, 1, 150, 10), 1, Uniform, Box)),\n"
        "        Lin(0, 0.5, 150, 10),\n"
        "    )\n"
        "    epochs = 10  # short\n}\n"
    )


def test_parentheses_only_where_precedence_needs_them():
    tree = parse_dai("let a = (1 - (2 - 3)) * -(4 / (5 * 6))\nlet b = ((1 + 2))\n").tree
    assert format_dai(tree) == "let a = (1 - (2 - 3)) * -(4 / (5 * 6))\nlet b = 1 + 2\n"


def test_stdlib_is_formatted():
    for entry in resources.files("daic.stdlib").iterdir():
        if entry.name.endswith(".dai"):
            text = entry.read_text()
            assert format_dai(parse_dai(text).tree) == text, entry.name


@settings(max_examples=150, deadline=None)
@given(nets)
def test_net_trees_round_trip(tree):
    text = format_net(tree)
    result = parse_net(text)
    assert result.diagnostics == ()
    assert result.tree == tree
    assert format_net(result.tree) == text


@settings(max_examples=150, deadline=None)
@given(dai_files)
def test_dai_trees_round_trip(tree):
    text = format_dai(tree)
    result = parse_dai(text)
    assert result.diagnostics == ()
    assert result.tree == tree
    assert format_dai(result.tree) == text
