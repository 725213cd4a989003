"""The run's tests on a network whose output is not a number: no image counts as classified, attacked or
verified (argmax takes a NaN for the highest score, which called such a network right on every image of
the class it points at)."""

from __future__ import annotations

import math

import torch

from daic.runtime import Linear, ReLU, Sequential
from daic.runtime.certification.evaluate import Accuracy, MIFGSMAccuracy, PGDAccuracy, Verify, evaluate
from daic.runtime.certification.verification import BoxBound


def test_a_network_whose_output_is_nan_passes_no_test():
    torch.manual_seed(0)
    net = Sequential(Linear(4, 8), ReLU(), Linear(8, 3))
    with torch.no_grad():
        net[2].bias[1] = math.nan
    x = torch.rand(30, 4)
    y = torch.zeros(30, dtype=torch.long)  # argmax of a NaN row is the NaN's class, 1: so test class 1 too
    y[15:] = 1
    tests = [Accuracy(), PGDAccuracy(k=5), MIFGSMAccuracy(k=5), Verify(BoxBound())]
    assert evaluate(net, tests, x, y, 0.1, (0.0, 1.0)) == {
        c: 0.0 for c in ("Acc", "PGD", "MI-FGSM", "Ver Box")
    }
