"""Reading VNN-LIB properties: the boxes and output clauses of what daic exports and of hand-written
properties (disjunctions over inputs, conjunctions over outputs, linear terms), in exact rationals, and a
message with the line for what cannot be read."""

from __future__ import annotations

from fractions import Fraction

import pytest

from daic.compiler.exchange.vnnlib_in import PropertyError, parse_property
from daic.compiler.exchange.vnnlib_out import property_text


def declarations(inputs: int, outputs: int) -> str:
    return "".join(f"(declare-const X_{i} Real)\n" for i in range(inputs)) + "".join(
        f"(declare-const Y_{j} Real)\n" for j in range(outputs)
    )


def test_daics_robustness_property_reads_back_as_its_ball_and_one_clause_per_other_class():
    text = property_text([0.25, 0.5, 1.0], 1, 3, 0.1, (0.0, 1.0), "about")
    prop = parse_property(text)
    assert (prop.inputs, prop.outputs, len(prop.regions)) == (3, 3, 1)
    region = prop.regions[0]
    assert region.lower == [
        Fraction(0.25) - Fraction(0.1),
        Fraction(0.5) - Fraction(0.1),
        Fraction(1) - Fraction(0.1),
    ]
    assert region.upper == [Fraction(0.25) + Fraction(0.1), Fraction(0.5) + Fraction(0.1), Fraction(1)]
    # "Y_j >= Y_1" is Y_1 - Y_j <= 0: one clause of one constraint per other class.
    assert [[(a.coefficients, a.constant) for a in c.atoms] for c in region.clauses] == [
        [((("Y_0", -1), ("Y_1", 1)), 0)],
        [((("Y_1", 1), ("Y_2", -1)), 0)],
    ]


def test_a_disjunction_over_inputs_gives_a_region_per_box_and_linear_terms_are_read():
    text = (
        declarations(2, 2)
        + """
; two boxes, each with its own output constraint
(assert (or
    (and (>= X_0 0) (<= X_0 0.5) (>= X_1 -1) (<= X_1 1) (<= (+ Y_0 (* -2 Y_1)) 0.25))
    (and (>= X_0 0.5) (<= X_0 1) (>= X_1 -1) (<= X_1 1) (> (- Y_0 Y_1) 3) (<= Y_1 1e-1))
))
"""
    )
    prop = parse_property(text)
    assert [(r.lower, r.upper) for r in prop.regions] == [
        ([0, -1], [Fraction(1, 2), 1]),
        ([Fraction(1, 2), -1], [1, 1]),
    ]
    first, second = (r.clauses for r in prop.regions)
    assert [(a.coefficients, a.constant, a.strict) for a in first[0].atoms] == [
        ((("Y_0", 1), ("Y_1", -2)), Fraction(-1, 4), False)
    ]
    assert [(a.coefficients, a.constant, a.strict) for a in second[0].atoms] == [
        ((("Y_0", -1), ("Y_1", 1)), 3, True),
        ((("Y_1", 1),), Fraction(-1, 10), False),
    ]
    assert prop.satisfied_by([Fraction(1, 4), 0], [Fraction(1, 4), 0])
    assert not prop.satisfied_by([Fraction(1, 4), 0], [1, 0])


def test_conjunctions_of_disjunctions_multiply_out():
    text = declarations(1, 3) + "(assert (>= X_0 0))\n(assert (<= X_0 1))\n"
    text += "(assert (or (<= Y_0 Y_1) (<= Y_0 Y_2)))\n(assert (or (<= Y_1 0) (<= Y_2 0)))\n"
    (region,) = parse_property(text).regions
    assert len(region.clauses) == 4 and all(len(c.atoms) == 2 for c in region.clauses)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("(assert (<= X_0 1)", "<property>:3: an expression is never closed (a `)` is missing)"),
        ("(assert (<= X_0 1)))", "<property>:3: a `)` closes nothing"),
        ("(assert (<= X_7 1))", "<property>:3: `X_7` is neither a declared variable nor a number"),
        ("(assert (<= (+ X_0 Y_0) 1))", "<property>:3: a constraint on inputs and outputs together"),
        (
            "(assert (<= (* X_0 X_0) 1))",
            "<property>:3: `*`: a linear term is built with +, - and * by a number",
        ),
        ("(assert (>= X_0 0))", "<property>: X_0 has no lower or no upper bound in some case"),
        ("(assert (distinct X_0 1))", "<property>:3: `distinct`: daic reads and, or, <=, >=, < and >"),
        (
            "(assert (>= X_0 abc 0.0))",
            "<property>:3: `(>= ...)` compares 3 terms: daic reads a comparison of two, (>= a b)",
        ),
        ("(declare-const Z Real)", "<property>:3: `Z`: inputs are X_0, X_1, ... and outputs Y_0, Y_1, ..."),
        ("(declare-const X_0 Real)", "<property>:3: `X_0` is declared twice"),
    ],
)
def test_what_cannot_be_read_is_a_message_with_its_line(body, message):
    with pytest.raises(PropertyError) as caught:
        parse_property(declarations(1, 1) + body + "\n")
    assert message in str(caught.value)


def test_an_undeclared_gap_in_the_inputs_is_named():
    with pytest.raises(PropertyError, match="X_1 is not declared, but X_2 is"):
        parse_property("(declare-const X_0 Real)\n(declare-const X_2 Real)\n(declare-const Y_0 Real)\n")


def test_a_constraint_on_several_inputs_is_no_box():
    with pytest.raises(
        PropertyError, match=r"<property>:4: a constraint on several inputs: daic reads bounds"
    ):
        parse_property(declarations(2, 1) + "(assert (<= (+ X_0 X_1) 1))\n")
