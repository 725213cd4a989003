"""Regroup: a permutation of the values, followed exactly by every domain: the concrete function is torch's
reshape and permute, Box and hybrid zonotope bounds contain every sampled output, and CROWN bounds the
margins of a network with regroupings exactly as it bounds the same network with the permutation folded
into its weights."""

from __future__ import annotations

import torch

from daic.runtime import (
    AbstractContext,
    Box,
    Conv2D,
    Flatten,
    HybridZonotope,
    Linear,
    Regroup,
    ReLU,
    Sequential,
    trace,
)
from daic.runtime.certification.verification import CROWNBound
from tests.runtime.helpers import assert_contains, run_points, sample_points
from tests.runtime.networks import input_box, randomize

torch.set_num_threads(1)


def regrouped() -> Sequential:
    """A vector regrouped into a 2x4x4 image, convolved, its rows and columns swapped, and flattened."""
    return Sequential(
        Linear(5, 32), ReLU(), Regroup([4, 4, 2], in_shape=(32,)), Conv2D(2, 3, 3, padding=1), ReLU(),
        Regroup([4, 4, 3], view=(3, 4, 4), axes=(0, 2, 1), in_shape=(3, 4, 4)), Flatten(), Linear(48, 4),
    )  # fmt: skip


def test_regroup_computes_torchs_reshape_and_permute():
    layer = Regroup([3, 2, 4], view=(4, 2, 3), axes=(0, 2, 1), in_shape=(24,))
    x = torch.arange(48.0).reshape(2, 24)
    assert torch.equal(layer(x), x.reshape(2, 4, 2, 3).permute(0, 1, 3, 2).reshape(2, 4, 3, 2))
    assert torch.equal(layer(x).flatten(1)[:, layer.inverse], x)  # the inverse undoes it


def test_every_domain_contains_the_outputs_of_a_regrouped_network():
    net = regrouped()
    randomize(net, 3)
    net = net.double()
    lower, upper = input_box((5,), batch=2, seed=3, device="cpu")
    outputs = run_points(net, sample_points(lower, upper, 64, torch.Generator().manual_seed(4)))
    values = {"box": Box.from_bounds(lower, upper), "hz": HybridZonotope.from_bounds(lower, upper),
              "hz_exact": HybridZonotope.exact_from_bounds(lower, upper)}  # fmt: skip
    for name, value in values.items():
        lo, hi = trace(net, value, AbstractContext(training=False)).output.bounds()
        assert_contains(lo, hi, outputs, 1e-9)
        assert lo.shape == outputs.shape[1:], name


def test_crown_bounds_a_regrouped_network_as_the_same_network_with_the_permutation_in_its_weights():
    net = regrouped()
    randomize(net, 5)
    net = net.double()
    folded = Sequential(Linear(5, 32), ReLU(), Regroup([4, 4, 2], in_shape=(32,)), Conv2D(2, 3, 3, padding=1),
                        ReLU(), Flatten(), Linear(48, 4)).double()  # fmt: skip
    with torch.no_grad():
        for k in (0, 3):
            folded[k].load_state_dict(net[k].state_dict())
        folded[6].weight.copy_(net[7].weight[:, net[5].inverse])  # the transposition, in the last weights
        folded[6].bias.copy_(net[7].bias)
    lower, upper = input_box((5,), batch=3, seed=5, device="cpu")
    target = torch.tensor([0, 1, 2])
    with torch.no_grad():
        assert torch.allclose(net(lower), folded(lower), atol=1e-12)
        ours = CROWNBound().margins(net, lower, upper, target, "hybrid")
        theirs = CROWNBound().margins(folded, lower, upper, target, "hybrid")
    assert torch.allclose(ours, theirs, atol=1e-9)
    points = sample_points(lower, upper, 64, torch.Generator().manual_seed(6))
    logits = run_points(net, points)  # (N, B, classes)
    margins = logits.gather(2, target.view(1, 3, 1).expand(len(points), 3, 1)) - logits
    others = [[j for j in range(4) if j != t] for t in target.tolist()]
    sampled = torch.stack([margins[:, b, others[b]] for b in range(3)], 1)
    assert bool((ours <= sampled.amin(0) + 1e-9).all())
