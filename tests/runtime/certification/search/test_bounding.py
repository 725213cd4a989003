"""Bounding a batch of subdomains (`search/bounding.py`), through `Bounder.bound`."""

from __future__ import annotations

import itertools
import math

import torch

from daic.runtime.certification.search import bounding
from daic.runtime.certification.search.bounding import Bounder, Work
from tests.runtime.certification.test_complete import blob_network

torch.set_num_threads(1)


def _children_of_an_open_image() -> tuple[Bounder, Work, bounding.Warm]:
    """An image of a blob network that CROWN and alpha-CROWN leave open at eps 0.12, and its 8 children split
    on three unstable neurons of the first layer, warm-started from the root's slopes."""
    net = blob_network(5, width=6)
    x = torch.rand(20, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)[11:12]
    y = net(x).argmax(1)
    lower, upper = (x - 0.12).clamp(0, 1), (x + 0.12).clamp(0, 1)
    bounder = Bounder(net, None, "hybrid", steps=20, lr_alpha=0.1, lr_beta=0.05)
    root = bounder.bound(Work(lower, upper, y, torch.arange(2)[None]), math.inf)
    assert not bool((root.lower > 0).all())
    layout = bounder.layout
    low, up = root.split_inputs[layout.inputs[0]]
    unstable = ((low < 0) & (up > 0)).flatten().nonzero().squeeze(1)[:3]
    signs = torch.zeros(8, layout.size, dtype=torch.int8)
    for row, pattern in enumerate(itertools.product([1, -1], repeat=3)):
        signs[row, layout.offsets[0] + unstable] = torch.tensor(pattern, dtype=torch.int8)
    work = Work(lower.expand(8, -1), upper.expand(8, -1), y.expand(8), torch.arange(2).expand(8, -1), signs)
    warm = ({key: a.expand(8, *a.shape[1:]) for key, a in root.alphas.items()}, {})
    return bounder, work, warm


def test_children_their_warm_start_proves_leave_the_optimisation_and_the_rest_bound_as_before(monkeypatch):
    """3 of the 8 children are proved by their parent's slopes alone: the other 5 are optimised in a batch of
    their own, and their bounds, slopes and multipliers equal what optimising all 8 together gives (a row's
    optimisation depends on its own parameters only); the 3 stay proved."""
    bounder, work, warm = _children_of_an_open_image()
    narrowed: list[list[int]] = []
    original = Bounder._narrowed

    def spied(self, start, work, companions, rest):
        narrowed.append(rest.tolist())
        return original(self, start, work, companions, rest)

    monkeypatch.setattr(Bounder, "_narrowed", spied)
    apart = bounder.bound(work, math.inf, warm=warm)
    monkeypatch.setattr(bounding, "NARROW_SHARE", 2.0)  # never: all 8 optimised together
    together = bounder.bound(work, math.inf, warm=warm)
    assert narrowed == [[0, 1, 2, 4, 5]]
    rest, proved = torch.tensor(narrowed[0]), torch.tensor([3, 6, 7])
    assert bool((apart.lower[proved] > 0).all()) and bool((together.lower[proved] > 0).all())
    assert int((apart.lower[rest] > 0).all(1).sum()) == 1  # one more proved by the optimisation
    torch.testing.assert_close(apart.lower[rest], together.lower[rest], rtol=0, atol=1e-12)
    assert apart.alphas.keys() == together.alphas.keys() and apart.betas.keys() == together.betas.keys()
    for ours, theirs in [(apart.alphas, together.alphas), (apart.betas, together.betas),
                         (apart.coefficients, together.coefficients)]:  # fmt: skip
        for key in ours:
            torch.testing.assert_close(ours[key][rest], theirs[key][rest], rtol=0, atol=1e-12)
    torch.testing.assert_close(apart.corners[rest], together.corners[rest], rtol=0, atol=0)
