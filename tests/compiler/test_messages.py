"""Messages that say what is wrong and how to fix it: suggestions as the file must write them, numbers as
a person writes them, hints that fit the case, and one error for one mistake."""

from daic.compiler.check import check_source
from daic.compiler.sources import Source


def problems(text: str, language: str = "dai") -> list[tuple[str, str, str | None]]:
    report = check_source(Source(f"a.{language}", language, text))
    return [(d.code.id, d.message, d.hint) for d in report.diagnostics]


def test_a_name_from_an_import_with_as_is_suggested_qualified():
    found = problems(
        "import stdlib.schemes as s\nimport stdlib.goals as g\n"
        "scheme Mine extends Baseline {\n    epochs = 1\n}\nlet x = InSampLPA\n"
    )
    assert found == [
        ("E101", "unknown scheme `Baseline`", "did you mean `s.Baseline`?"),
        ("E101", "unknown name `InSampLPA`", "did you mean `g.InSampLPA`?"),
    ]


def test_range_errors_show_numbers_without_float_noise():
    found = problems(
        "let a = Mix(Point, Box, 0.2 - 0.3)\nlet b = Mix(Point, Box, Lin(0.2 - 0.3, 1, 3, 1))\n"
        "let c = Mix(Point, Box, 1 + 2e-16)\n"
    )
    assert [message for _, message, _ in found] == [
        "`weight` must be in [0, 1], got -0.1",
        "`weight` must be >= 0 at every epoch; this schedule reaches -0.1",
        # Rounded, it would be 1, which is in range: then every digit is shown.
        "`weight` must be in [0, 1], got 1.0000000000000002",
    ]


def test_concatenating_vectors_gets_no_hint_about_height_and_width():
    found = problems(
        "Linear out=100 input_shape=[8]\nSkipNet1\n    Linear out=10\nSkipNet2\nSkipCat dim=1\n", "net"
    )
    assert found == [
        (
            "E132",
            "cannot concatenate branches of shapes [10] and [100] along the channels",
            "`SkipCat` joins the channels of images ([height, width, channels]); a branch that ends in a "
            "vector has none",
        )
    ]


def test_positional_arguments_after_a_keyword_are_one_error():
    assert problems("let g = Mix(g1=Point, Box, 0.5)\n") == [
        (
            "E011",
            "positional arguments after the keyword argument `g1`",
            "put positional arguments first, or name these too",
        )
    ]
    # A mistake of its own inside such a call is still reported.
    assert [code for code, _, _ in problems("let g = Mix(Point, weight=0.5, Boxx)\n")] == ["E011", "E101"]


def test_a_goal_of_several_abstractions_where_one_is_taken_is_a_type_error():
    """Sample's g_s, BiSample's g1 and the expressive losses' goals take one abstraction: a Mix there,
    or a goal that hands a Mix's parts on, would fail at run time."""
    found = problems(
        "let a = Sample(0.5, Mix(Point, Box, 0.5), Box)\n"
        "let b = BiSample(Sub(0.5, CCMix(Point, Box, 0.5)), Box)\n"
        "let c = ExpMix(Point, Sample(0.5, Point, Mix(Point, Box, 0.1)), 0.5)\n"
        # Where the parts are handed on, a goal of several abstractions is fine.
        "let d = Mix(Sub(0.5, CCMix(IFGSM(1), Box, 0.5)), Sample(0.5, Point, ExpMix(Point, Box, 0.5)), 0.5)\n"
        "let e = BiSample(Point, Mix(Point, Box, 0.5))\n"
    )
    assert found == [
        ("E107", "`g_s` takes a goal of one abstraction; `Mix` trains on several",
         "give `g_s` one of the `Mix`'s goals, or put the `Mix` outside"),
        ("E107", "`g1` takes a goal of one abstraction; `Sub` trains on the several of the `CCMix` inside it",
         "give `g1` one of the `CCMix`'s goals, or put the `CCMix` outside"),
        ("E107",
         "`g2` takes a goal of one abstraction; `Sample` trains on the several of the `Mix` inside it",
         "give `g2` one of the `Mix`'s goals, or put the `Mix` outside"),
    ]  # fmt: skip
