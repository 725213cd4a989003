"""The cascade (`certification/certify.py`), through `certify`."""

from __future__ import annotations

import pytest
import torch

from daic.runtime.certification.certify import Step, certify
from tests.runtime.certification.test_complete import blob_network

torch.set_num_threads(1)


class _Seeing(Step):
    """A step that records which parameters take a gradient while it runs, then fails if told to."""

    label = "seeing"

    def __init__(self, fail: bool) -> None:
        self.fail, self.seen = fail, []

    def decide(self, model, batch, pending) -> None:
        self.seen.append([p.requires_grad for p in model.parameters()])
        if self.fail:
            raise RuntimeError("this step cannot run")


@pytest.mark.parametrize("fail", [False, True])
def test_no_weight_takes_a_gradient_during_a_cascade_and_each_is_as_it_was_after(fail):
    """Bounds never carry the weights' history (a search's optimisation differentiates towards slopes and
    multipliers only); the user's choices come back afterwards, a failing step included."""
    net = blob_network(3)
    net[0].weight.requires_grad_(False)  # the user's own: stays frozen
    x = torch.tensor([[0.3, 0.3], [0.7, 0.4]], dtype=torch.float64)
    y = net(x).argmax(1)
    step = _Seeing(fail)
    outcomes = certify(net, [step], x, y, 0.05, (0.0, 1.0))
    assert step.seen == [[False] * 6]
    assert [p.requires_grad for p in net.parameters()] == [False, True, True, True, True, True]
    assert [o.status for o in outcomes] == ["error" if fail else "unknown"] * 2
