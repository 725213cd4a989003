"""TAPS in the language: a `.net` file with it checks and lowers to the runtime layer; only_train=False, a
second TAPS and one inside a branch are refused where they are written; a scheme trains through it, and
verification reads the trained network as if the layer were not there."""

from __future__ import annotations

import pytest
import torch

from daic.compiler.checking import codes as C
from daic.compiler.checking.network import analyze_net
from daic.compiler.jobs.run import plan_run
from daic.compiler.lower import lower_network, lower_value
from daic.dsl.parser import parse_net
from daic.runtime import TAPS
from daic.runtime.certification.evaluate import evaluate
from daic.runtime.layers import Latent
from tests.compiler.commands.test_run import Quiet, run_plan

torch.set_num_threads(1)

NET = """Normalize mean=[0.5] std=[0.5]
Linear out=64 input_shape=[8, 8, 1]
ReLU
TAPS steps=8 restarts=2 grad_scale=4 start=1%s
Linear out=32
ReLU
Linear out=10
"""


def check(text: str):
    return analyze_net(parse_net(text).tree, (1, 8, 8), 10)


def test_a_net_with_taps_checks_clean_and_lowers_to_the_layer():
    network = check(NET % "")
    assert network.diagnostics == []
    assert network.params == 64 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10  # TAPS has no parameters
    taps = [m for m in lower_network(network).modules() if isinstance(m, TAPS)]
    assert len(taps) == 1
    layer = taps[0]
    assert (layer.steps, layer.restarts, layer.grad_scale, layer.soft, layer.start) == (8, 2, 4.0, 0.5, 1.0)
    assert layer.only_train is True


def test_the_defaults_are_taps_papers():
    network = check("Linear out=16 input_shape=[8, 8, 1]\nReLU\nTAPS\nLinear out=10\n")
    assert network.diagnostics == []
    layer = lower_network(network)[2]
    assert (layer.steps, layer.restarts, layer.grad_scale, layer.soft, layer.start) == (20, 1, 5.0, 0.5, 0.0)


def test_only_train_false_is_refused_at_the_parameter():
    network = check(NET % " only_train=False")
    assert [d.code for d in network.diagnostics] == [C.TAPS_ONLY_TRAIN]
    d = network.diagnostics[0]
    assert d.is_error
    # Line 4, `only_train=False` after `TAPS steps=8 restarts=2 grad_scale=4 start=1 `.
    assert (d.span.line, d.span.column, d.span.end_line, d.span.end_column) == (4, 46, 4, 62)
    assert d.hint == "TAPS's bounds are estimates, not bounds: it may only shape training"
    assert check(NET % " only_train=True").diagnostics == []


def test_a_second_taps_is_refused():
    text = "Linear out=16 input_shape=[8, 8, 1]\nTAPS\nReLU\nTAPS\nLinear out=10\n"
    network = check(text)
    assert [d.code for d in network.diagnostics] == [C.TAPS_PLACEMENT]
    d = network.diagnostics[0]
    assert (d.span.line, d.span.column, d.span.end_column) == (4, 1, 5)
    assert "already split at line 2" in d.message


def test_taps_inside_a_branch_is_refused():
    text = (
        "Linear out=16 input_shape=[8, 8, 1]\n"
        "ReLU\n"
        "ParNet1\n"
        "    Linear out=16\n"
        "ParNet2\n"
        "    TAPS\n"
        "ParSum\n"
        "Linear out=10\n"
    )
    network = check(text)
    assert [d.code for d in network.diagnostics] == [C.TAPS_PLACEMENT]
    d = network.diagnostics[0]
    assert (d.span.line, d.span.column, d.span.end_column) == (6, 5, 9)
    assert d.message == "`TAPS` inside the `ParNet2` branch of the block at line 3"


SCHEME = """scheme Taps {
    net = "taps.net"
    data = Digits(subset=200)
    epsilon = 0.05
    goal = Box
    epochs = 2
    batch = 50
    optimizer = Adam(lr=0.003)
    test = [Accuracy, Verify(Box)]
}
"""


def test_a_scheme_trains_through_taps_and_verifies_as_without_it(tmp_path, monkeypatch):
    (tmp_path / "taps.net").write_text(NET % "")
    (tmp_path / "taps.dai").write_text(SCHEME)
    calls = []
    loss = Latent.worst_case_loss

    def counted(self, target):
        calls.append(target.shape[0])
        return loss(self, target)

    monkeypatch.setattr(Latent, "worst_case_loss", counted)
    summary = run_plan(tmp_path / "taps.dai", tmp_path / "run", Quiet())
    plan = plan_run(str(tmp_path / "taps.dai"), None, None)  # the trained network and scheme, to compare
    # start=1: the first epoch (4 steps) trains with plain IBP, the second with TAPS.
    assert len(calls) == 4
    assert 0 <= summary["Ver Box"] <= summary["Acc"] <= 100
    # The trained weights, without the layer: verification gives the same numbers.
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["model"]
    with_taps = lower_network(plan.network)
    with_taps.load_state_dict(state)
    without = lower_network(check(NET.replace("TAPS steps=8 restarts=2 grad_scale=4 start=1%s\n", "")))
    for mine, theirs in zip(without.parameters(), with_taps.parameters(), strict=True):
        mine.data.copy_(theirs.data)
    scheme = lower_value(plan.scheme.built)
    data = scheme.data.load()
    results = [
        evaluate(model, scheme.test, data.test_x, data.test_y, 0.05, data.value_range)
        for model in (with_taps, without)
    ]
    assert results[0] == results[1]
    assert results[0]["Ver Box"] == pytest.approx(summary["Ver Box"])
