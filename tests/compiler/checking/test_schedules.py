"""When a scheme's schedules settle, read from its checked values: ramps, Until, learning-rate steps and
schedules inside goals; `daic run --epochs` warns when it stops sooner (`daic check`'s W203 is a golden
case)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from daic.compiler.checking.expressions import check_expression
from daic.compiler.checking.schedules import settles
from daic.compiler.commands.cli import main
from daic.compiler.types import GOAL, LR_SCHEDULE, SCHEDULE


@pytest.mark.parametrize(
    ("text", "kind", "epoch"),
    [
        ("0.1", SCHEDULE, 0),
        ("Lin(0, 0.1, 20, 1)", SCHEDULE, 21),
        ("Smooth(0, 1, 30)", SCHEDULE, 30),
        ("Until(10, Lin(0, 1, 50, 0), Lin(1, 2, 5, 3))", SCHEDULE, 18),  # `first` is cut at 10
        ("Steps(at=[10, 20, 250, 300])", LR_SCHEDULE, 300),
        ("Mix(Point, Box, Lin(0, 1, 40, 10))", GOAL, 50),
        ("Mix(Point, Sub(Lin(0, 1, 150, 10), Box), Lin(0.5, 0.2, 100, 50))", GOAL, 160),
    ],
)
def test_a_value_settles_when_its_latest_schedule_does(text, kind, epoch):
    assert settles(check_expression(text, kind)) == epoch


def test_run_with_fewer_epochs_than_the_ramp_says_so(tmp_path):
    scheme = tmp_path / "s.dai"
    scheme.write_text(
        'scheme S { net = "n.net" data = Digits epsilon = Lin(0, 0.1, 3, 1) goal = Box epochs = 4 '
        "batch = 100 test = [Accuracy] }\n"
    )
    (tmp_path / "n.net").write_text("Linear out=10 input_shape=[8, 8, 1]\n")
    result = CliRunner().invoke(main, ["run", str(scheme), "--epochs", "2", "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert (
        "daic: warning: --epochs 2 ends before the scheme's schedules settle (epsilon until epoch 4): the "
        "run never trains on their final values"
    ) in result.stderr
    again = CliRunner().invoke(main, ["run", str(scheme), "--out", str(tmp_path / "r2")])
    assert again.exit_code == 0 and "warning" not in again.stderr
