"""The linear-relaxation domain and CROWN-IBP from the language: the checker, `daic doc`, `daic verify
--domain` and a `daic run` that trains with `CROWNIBP` and certifies with `Verify(CROWN)`."""

import json
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

from daic.compiler.checking.program import Program
from daic.compiler.commands.cli import main
from daic.compiler.lower import lower_value

STDLIB = Path(str(resources.files("daic.stdlib")))


def checked(text: str):
    return Program().check_text(text, None)


def scheme(goal: str, tests: str) -> str:
    return f"scheme S {{ data = Digits goal = {goal} epochs = 20 epsilon = 0.1 test = [{tests}] }}\n"


def test_the_domains_and_the_goal_check_and_lower():
    module = checked(
        scheme(
            "Mix(Point, CROWNIBP(Lin(1, 0, 10, 2)), 0.5)",
            'Verify(CROWN), Verify(AlphaCROWN(steps=5)), Verify(CROWN(intermediate="best")), Verify(Box)',
        )
    )
    assert [d.message for d in module.diagnostics] == []
    lowered = lower_value(module.schemes["S"].built)
    assert [t.column for t in lowered.test] == [
        "Ver CROWN",
        "Ver AlphaCROWN(steps=5)",
        'Ver CROWN(intermediate="best")',
        "Ver Box",
    ]
    assert repr(lowered.goal.g2) == "CROWNIBP(Lin(1.0, 0.0, 10.0, 2.0))"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ('Verify(CROWN(intermediate="ibp"))', 'must be one of "crown", "box", "hbox", "best"'),
        ("Verify(AlphaCROWN(steps=-1))", "steps"),
        ("Verify(AlphaCROWN(lr=0))", "lr"),
    ],
)
def test_domain_arguments_are_checked(expression, message):
    module = checked(scheme("Box", expression))
    assert len(module.diagnostics) == 1 and message in module.diagnostics[0].message


def test_beta_is_a_weight_in_zero_one():
    module = checked(scheme("CROWNIBP(1.5)", "Accuracy"))
    (problem,) = module.diagnostics
    assert "beta" in problem.message and "1.5" in problem.message


def test_doc_names_the_domains():
    result = CliRunner().invoke(main, ["doc", "CROWN"])
    assert result.exit_code == 0
    assert "CROWN(intermediate: Str = crown) -> Domain" in result.output
    assert "Zhang et al. 2018" in result.output
    assert "AlphaCROWN" in CliRunner().invoke(main, ["doc"]).output


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A digits network trained one epoch with CROWN-IBP mixed with points, certified by CROWN."""
    folder = tmp_path_factory.mktemp("crownibp")
    source = folder / "s.dai"
    source.write_text(
        f'scheme S {{ net = "{STDLIB / "nets" / "digits_ffnn.net"}" data = Digits epsilon = 0.05 '
        "goal = Mix(Point, CROWNIBP(0.5), 0.5) epochs = 1 batch = 50 "
        "test = [Accuracy, Verify(Box), Verify(CROWN)] }\n"
    )
    out = folder / "run"
    result = CliRunner().invoke(main, ["run", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_a_run_trains_with_crown_ibp_and_certifies_with_crown(trained):
    summary = json.loads((trained / "summary.json").read_text())
    assert 0 <= summary["Ver Box"] <= summary["Acc"] <= 100
    assert summary["Ver Box"] <= summary["Ver CROWN"] <= summary["Acc"]


def test_verify_takes_domains_as_the_language_writes_them(trained):
    net = STDLIB / "nets" / "digits_ffnn.net"
    weights = trained / "checkpoint.pt"
    result = CliRunner().invoke(
        main,
        ["verify", str(net), "--weights", str(weights), "--no-attack", "--limit", "20", "--domain", "crown",
         "--domain", "AlphaCROWN(steps=3)", "--domain", "hbox"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "cascade CROWN > AlphaCROWN(steps=3) > HBox" in result.output
    for label in ("CROWN", "AlphaCROWN(steps=3)", "HBox"):
        assert f"verified by {label} " in result.output


@pytest.mark.parametrize(
    ("domain", "message"),
    [
        ("Crwon", "unknown name `Crwon`"),
        ("AlphaCROWN(steps=", "column 17: unexpected end of the text"),
        ("Point", "expected a Domain, found a Goal `Point`"),
    ],
)
def test_verify_refuses_what_is_not_a_domain(trained, domain, message):
    net = STDLIB / "nets" / "digits_ffnn.net"
    result = CliRunner().invoke(
        main, ["verify", str(net), "--weights", str(trained / "checkpoint.pt"), "--domain", domain]
    )
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.output
