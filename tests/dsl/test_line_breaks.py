"""One rule for where lines end (`\r\n`, a lone `\r`, `\n`, as the Language Server Protocol counts them),
shared by the parsers, the spans and the formatter."""

import pytest

from daic.dsl.format import format_tree
from daic.dsl.parser import parse_dai, parse_net
from daic.dsl.source import LineIndex

BREAKS = pytest.mark.parametrize("end", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])


@BREAKS
def test_a_comment_ends_at_any_line_break(end):
    dai = parse_dai(f"let a  =  Box  # x{end}let b = a{end}")
    assert dai.diagnostics == ()
    assert [s.name for s in dai.tree.statements] == ["a", "b"]
    assert [s.span.line for s in dai.tree.statements] == [1, 2]
    net = parse_net(f"ReLU  # x{end}Linear  out=10{end}")
    assert net.diagnostics == ()
    assert [(layer.kind, layer.span.line) for layer in net.tree.layers] == [("ReLU", 1), ("Linear", 2)]


@BREAKS
def test_the_formatter_keeps_each_line_once(end):
    assert format_tree(parse_dai(f"let a  =  Box  # x{end}let b = a{end}").tree) == (
        "let a = Box  # x\nlet b = a\n"
    )
    assert format_tree(parse_net(f"ParNet1{end}    ReLU  # x{end}ParNet2{end}ParSum{end}").tree) == (
        "ParNet1\n    ReLU  # x\nParNet2\nParSum\n"
    )


def test_a_string_ends_at_a_lone_carriage_return():
    result = parse_dai('let a = "abc\rlet b = 1\n')
    assert [d.code.id for d in result.diagnostics] == ["E012"]
    assert [s.name for s in result.tree.statements] == ["b"]


def test_line_index_counts_every_line_break():
    index = LineIndex("a\rb\r\nc\nd")
    assert index.line_count == 4
    assert [index.line_text(n) for n in range(1, 5)] == ["a", "b", "c", "d"]
    assert index.position(4) == (2, 2)  # between `\r` and `\n`: the end of line 2
    assert index.offset(2, 99) == 3
