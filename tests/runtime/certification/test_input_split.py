"""Branch and bound over the input box (InputSplit) against exact answers: on small networks of two inputs
the least margin over each box, minimised by a linear program per activation pattern, says which images are
robust; the search agrees on every one, with bounds on the right side of it."""

from __future__ import annotations

import pytest
import torch

from daic.runtime.certification.certify import certify
from daic.runtime.certification.search import InputSplit
from tests.runtime.certification.test_complete import EPS, blob_network, exact_least_margin

torch.set_num_threads(1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_input_split_agrees_with_every_activation_pattern(seed):
    net = blob_network(seed)
    x = torch.rand(12, 2, generator=torch.Generator().manual_seed(seed + 10), dtype=torch.float64)
    with torch.no_grad():
        y = net(x).argmax(1)
    outcomes = certify(net, [InputSplit(timeout=30, batch=64)], x, y, EPS, (0.0, 1.0))
    for outcome, xi, yi in zip(outcomes, x, y, strict=True):
        lower, upper = (xi - EPS).clamp(0, 1), (xi + EPS).clamp(0, 1)
        truth = exact_least_margin(net, lower, upper, int(yi))
        assert outcome.status in ("verified", "falsified"), outcome.record()
        assert (outcome.status == "verified") == (truth > 0), (outcome.record(), truth)
        if outcome.status == "verified":
            assert 0 < outcome.margin <= truth + 1e-9
        else:
            assert truth - 1e-9 <= outcome.margin <= 0
            assert torch.all(outcome.witness >= lower) and torch.all(outcome.witness <= upper)


def test_a_search_past_its_time_limit_is_unknown_and_labelled_with_its_arguments():
    net = blob_network(0)
    x = torch.full((1, 2), 0.5, dtype=torch.float64)
    with torch.no_grad():
        y = net(x).argmax(1)
    search = InputSplit(timeout=1e-6, batch=1)
    (outcome,) = certify(net, [search], x, y, 0.5, (0.0, 1.0))
    assert search.label == "InputSplit(timeout=1e-06, batch=1)"
    assert outcome.status == "unknown" and outcome.witness is None  # the time was up before the first box
    assert InputSplit().label == "InputSplit"
