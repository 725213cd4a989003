"""Elaboration of expressions: constant arithmetic, through the checker's public entry (`Program`)."""

import pytest

from daic.compiler.checking.program import Program


def checked(text: str):
    return Program().check_text(text, None)


def test_lets_that_name_numbers_take_part_in_arithmetic():
    module = checked("let a = 8/255\nlet b = a * 2\nlet c = -a + 1\nlet n = 3\nlet m = n * n - 1\n")
    assert module.diagnostics == []
    assert module.symbols["b"].value == pytest.approx(16 / 255)
    assert module.symbols["c"].value == pytest.approx(1 - 8 / 255)
    assert module.symbols["m"].value == 8
    assert str(module.symbols["m"].type) == "Int"


def test_a_scheme_field_folds_a_let_in_arithmetic():
    fields = "data = Digits goal = Box epochs = 1 epsilon = eps / 2"
    module = checked(f"let eps = 0.1\nscheme S {{ {fields} }}\n")
    assert [d.message for d in module.diagnostics if d.is_error] == []
    assert module.schemes["S"].built.args["epsilon"] == pytest.approx(0.05)


@pytest.mark.parametrize(
    ("line", "kind", "column"),
    [("let d = g * 2", "Goal", 9), ("let d = 2 - True", "Bool", 13), ('let d = "s" + 1', "Str", 9)],
)
def test_arithmetic_on_other_types_is_reported_at_the_operand(line, kind, column):
    module = checked(f"let g = Box\n{line}\n")
    (problem,) = module.diagnostics
    assert problem.code.id == "E107"
    assert problem.message == f"arithmetic takes numbers, not a {kind}"
    assert (problem.span.line, problem.span.column) == (2, column)


def fields(extra: str) -> str:
    return f"scheme S {{ data = Digits goal = Box epochs = 9 {extra} }}\n"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "epsilon = Until(0, 0.1, -0.2)",
            "`epsilon` must be >= 0 at every epoch; this schedule reaches -0.2",
        ),
        (
            "epsilon = Lin(0.1, -0.5, 1, 0)",
            "`epsilon` must be >= 0 at every epoch; this schedule reaches -0.5",
        ),
        ("epsilon = 0.1 goal = Mix(Point, Box, Lin(0, 2, 1, 0))", "`weight` must be <= 1 at every epoch"),
        ("epsilon = 1e308 * 10", "the result is too large for a number"),
    ],
)
def test_schedules_and_arithmetic_stay_in_the_fields_range(extra, message):
    module = checked(fields(extra).replace("goal = Box ", "" if "goal" in extra else "goal = Box "))
    assert [d.code.id for d in module.diagnostics] == ["E108"]
    assert module.diagnostics[0].message.startswith(message)


def test_a_ramp_from_zero_is_a_valid_epsilon():
    module = checked(fields("epsilon = Until(5, Lin(0, 8/255, 5, 0), 8/255)"))
    assert module.diagnostics == []


def test_chains_too_deep_to_check_are_one_diagnostic(tmp_path):
    from daic.compiler.checking.check import check_path

    lets = tmp_path / "lets.dai"
    lets.write_text("".join(f"let a{i} = a{i - 1}\n" for i in range(600, 0, -1)) + "let a0 = 1\n")
    for i in range(500):
        text = f'import "m{i + 1}.dai" as n\nlet x = n.x\n' if i < 499 else "let x = 1\n"
        (tmp_path / f"m{i}.dai").write_text(text)
    for path in (lets, tmp_path / "m0.dai"):
        (problem,) = check_path(str(path)).diagnostics
        assert (problem.code.id, problem.span.line, problem.span.column) == ("E008", 1, 1)
        assert problem.message.startswith("this file's definitions or imports chain too deeply")
    # Short chains check as before.
    assert check_path(str(tmp_path / "m400.dai")).diagnostics == ()


def test_imports_of_networks_and_folders_say_what_import_takes(tmp_path):
    from daic.compiler.checking.check import check_path

    (tmp_path / "n.net").write_text("Linear out=10\n")
    (tmp_path / "lib").mkdir()
    main = tmp_path / "main.dai"
    main.write_text('import "n.net"\nimport "lib" as lib\n')
    messages = [d.message for d in check_path(str(main)).diagnostics]
    assert messages == [
        "`n.net` is a network; import takes .dai files",
        "`lib` is a folder; import takes .dai files",
    ]
