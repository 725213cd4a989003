"""The .dai parser: statements, expressions, Table 3's goals, and its errors."""

from importlib import resources

import pytest

from daic.dsl import ast as A
from daic.dsl.parser import parse_dai


def num(v):
    return A.Number(v)


def name(*parts):
    return A.Name(parts)


def call(fn, *args, **kwargs):
    return A.Call(name(fn), tuple(args), tuple(A.Keyword(k, v) for k, v in kwargs.items()))


def value_of(text: str) -> A.Expr:
    result = parse_dai(f"let x = {text}\n")
    assert result.diagnostics == ()
    return result.tree.statements[0].value


def test_numbers_arithmetic_and_precedence():
    assert value_of("8/255") == A.BinOp("/", num(8), num(255))
    assert value_of("3e-4") == num(0.0003)
    assert value_of("-0.5") == num(-0.5)
    assert value_of("1 + 2 * 3") == A.BinOp("+", num(1), A.BinOp("*", num(2), num(3)))
    assert value_of("(1 + 2) * 3") == A.BinOp("*", A.BinOp("+", num(1), num(2)), num(3))
    assert value_of("-(1 - 2)") == A.Neg(A.BinOp("-", num(1), num(2)))
    assert isinstance(value_of("42").value, int) and isinstance(value_of("42.").value, float)


def test_literals_names_lists_and_calls():
    assert value_of("True") == A.Bool(True)
    assert value_of('"nets/mine.net"') == A.String("nets/mine.net")
    assert value_of(r'"a \"q\" b"') == A.String('a "q" b')
    assert value_of("schemes.Baseline") == name("schemes", "Baseline")
    assert value_of("[1, 2,]") == A.ListExpr((num(1), num(2)))
    assert value_of("MIFGSM(k=20, mu=0.8)") == call("MIFGSM", k=num(20), mu=num(0.8))
    assert value_of("Sample(Lin(0, 1, 150, 10), 0.5, Normal, Box)") == call(
        "Sample", call("Lin", num(0), num(1), num(150), num(10)), num(0.5), name("Normal"), name("Box")
    )


def test_statements_and_spans():
    text = (
        'import stdlib.goals\nimport "mine.dai" as mine\nlet r = 1\n'
        "scheme S extends mine.Base {\n  epsilon = 0.1\n}\n"
    )
    result = parse_dai(text)
    assert result.diagnostics == ()
    imp1, imp2, let, scheme = result.tree.statements
    assert imp1 == A.Import(name("stdlib", "goals"))
    assert imp2 == A.Import(A.String("mine.dai"), "mine")
    assert let == A.Let("r", num(1))
    assert (let.name_span.line, let.name_span.column) == (3, 5)
    assert scheme.name == "S" and scheme.base == name("mine", "Base")
    (field,) = scheme.fields
    assert (field.name, field.value, field.span.line, field.span.column) == ("epsilon", num(0.1), 5, 3)
    assert (scheme.span.line, scheme.span.end_line) == (4, 6)


def test_every_table3_goal_parses():
    text = resources.files("daic.stdlib").joinpath("goals.dai").read_text()
    result = parse_dai(text)
    assert result.diagnostics == ()
    names = [s.name for s in result.tree.statements]
    assert names == [
        "Baseline", "InSamp", "InSampLPA", "Adv1IS", "Adv1ISLPA", "Adv3ISLPA", "Adv1ISLPAUS", "Baseline_S18",
        "InSamp_S18", "Adv5IS_S18", "Adv5ISLPA_R18", "InSampLPA_R34", "Adv5ISLPA_D100", "BiAdv_L",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "code", "line", "column", "message"),
    [
        ("let x = f(a=1, 2)\n", "E011", 1, 16, "positional argument after the keyword argument `a`"),
        ("let x = [1,, 2]\n", "E003", 1, 12, "unexpected `,`"),
        ("let = 3\n", "E003", 1, 5, "unexpected `=`; expected a name"),
        ("scheme S {\n  goal = Box\n  epsilon 0.1\n}\n", "E003", 3, 11, "unexpected `0.1`; expected `=`"),
        ("let x = 'single'\n", "E002", 1, 9, "unexpected character `'`"),
        ("let x = 1e400\n", "E010", 1, 9, "number `1e400` is too large for a float"),
        ("let x = Lin(%s, 1)\n", "E009", 1, 13, "`%s` is not a value"),
    ],
)
def test_errors_point_at_the_offending_token(text, code, line, column, message):
    (d,) = parse_dai(text).diagnostics
    assert (d.code.id, d.span.line, d.span.column) == (code, line, column)
    assert d.message.startswith(message)


def test_truncated_goal_names_the_unclosed_bracket():
    (d,) = parse_dai("let g = Mix(Point, Sub(Lin(0, 1, 150, 10)").diagnostics
    assert d.code.id == "E005"
    assert d.message == "unexpected end of the file; expected `)` or `,`"
    assert d.hint == "the `(` at 1:23 is never closed"


def test_a_bare_expression_is_explained():
    (d,) = parse_dai("Mix(Point, Sub(Lin(0, 1, 150, 10)").diagnostics
    assert (d.span.line, d.span.column, d.span.end_column) == (1, 1, 4)
    assert "`let goal = Mix(Point, Box, 0.5)`" in d.hint


def test_one_broken_statement_does_not_hide_the_next():
    text = "let a = (1\nlet b = 2\nscheme S {\n  x = ]\n}\nlet c = 3\n"
    result = parse_dai(text)
    assert [(d.code.id, d.span.line) for d in result.diagnostics] == [("E005", 1), ("E003", 4)]
    assert [s.name for s in result.tree.statements] == ["b", "c"]
