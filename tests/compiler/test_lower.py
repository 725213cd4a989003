"""Lowering checked networks to the runtime: every stdlib network (at reduced width) builds, has the
parameters the checker counted, runs concretely, and its abstract bounds hold sampled concrete outputs."""

from importlib import resources
from pathlib import Path

import pytest
import torch

from daic.compiler.checking.network import analyze_net
from daic.compiler.lower import lower_network
from daic.dsl.parser import parse_net
from daic.runtime import AbstractContext, Box, HybridZonotope, ibp_init_
from tests.compiler.narrow import narrowed

NETS = sorted((Path(str(resources.files("daic.stdlib"))) / "nets").glob("*.net"))


def reduced(path: Path):
    tree = parse_net(path.read_text()).tree
    full = analyze_net(tree)
    network = analyze_net(narrowed(tree), input_shape=full.input_shape)
    assert network.diagnostics == [], network.diagnostics
    return network


# The TAPS variants of CNN7 are CNN7 with a layer that is the identity outside training: slow suite only.
@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=[pytest.mark.slow] if "taps" in p.stem else []) for p in NETS],
    ids=lambda p: p.stem,
)
def test_stdlib_network_lowers_and_is_sound(path):
    torch.manual_seed(0)
    network = reduced(path)
    model = lower_network(network)
    ibp_init_(model, seed=0)
    model = model.double().eval()
    assert sum(p.numel() for p in model.parameters()) == network.params
    x = torch.rand(2, *network.input_shape, dtype=torch.float64)
    eps = 0.02
    lower, upper = (x - eps).clamp(0, 1), (x + eps).clamp(0, 1)
    points = lower + (upper - lower) * torch.rand(64, *x.shape, dtype=torch.float64)
    points = torch.cat([points, lower[None], upper[None]])
    with torch.no_grad():
        outputs = model(points.flatten(0, 1)).reshape(points.shape[0], 2, -1)
        assert outputs.shape[-1] == (200 if "tinyimagenet" in path.stem else 10)
        values = [Box.from_bounds(lower, upper), HybridZonotope.from_bounds(lower, upper)]
        if x[0].numel() <= 1024:  # one correlated term per input dimension: affordable for small inputs
            values.append(HybridZonotope.exact_from_bounds(lower, upper))
        for value in values:
            for training in (True, False):
                ctx = AbstractContext(training=training)
                lo, hi = model.abstract(value, ctx).bounds()
                assert (outputs >= lo - 1e-9).all() and (outputs <= hi + 1e-9).all(), (type(value), training)
