"""Networks of the activation family written in plain PyTorch, exported by `torch.onnx.export`, import into
daic and verify VNN-LIB properties, with every verdict checked against sampling and PGD: an unsat property
has no sampled or attacked point that violates it, a sat one's witness violates it in the network itself."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import daic


class AbsModule(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.abs()


FAMILIES = {
    "sigmoid": lambda: [nn.Sigmoid(), nn.Sigmoid()],
    "tanh": lambda: [nn.Tanh(), nn.Tanh()],
    "leaky_abs_hardtanh": lambda: [nn.LeakyReLU(0.1), AbsModule(), nn.Hardtanh()],
}


def trained(activations: list[nn.Module], seed: int) -> nn.Sequential:
    """A network of two inputs and three classes trained briefly on three blobs, the `activations`
    after its hidden layers."""
    g = torch.Generator().manual_seed(seed)
    layers: list[nn.Module] = []
    width = 2
    for act in activations:
        layers += [nn.Linear(width, 12), act]
        width = 12
    model = nn.Sequential(*layers, nn.Linear(width, 3))
    centres = torch.tensor([[0.25, 0.3], [0.7, 0.35], [0.5, 0.75]])
    y = torch.arange(3).repeat(100)
    x = centres[y] + 0.12 * torch.randn(300, 2, generator=g)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(150):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model.eval()


def exported(model: nn.Module, path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.rand(1, 2),), str(path), dynamo=False, input_names=["x"])
    return path


def robustness(path: Path, centre: list[float], eps: float, label: int) -> Path:
    """The property "some other class scores at least `label`'s" over the box around `centre`."""
    lines = [f"(declare-const X_{i} Real)" for i in range(2)] + [
        f"(declare-const Y_{j} Real)" for j in range(3)
    ]
    for i, c in enumerate(centre):
        lines += [f"(assert (>= X_{i} {c - eps!r}))", f"(assert (<= X_{i} {c + eps!r}))"]
    others = " ".join(f"(and (>= Y_{j} Y_{label}))" for j in range(3) if j != label)
    lines.append(f"(assert (or {others}))")
    path.write_text("\n".join(lines) + "\n")
    return path


def least_margin(model: nn.Module, lower: torch.Tensor, upper: torch.Tensor, label: int) -> float:
    """The least margin of `label` the network shows at 20,000 sampled points and 40 PGD trajectories."""
    model = copy.deepcopy(model).double()
    g = torch.Generator().manual_seed(0)
    points = lower + (upper - lower) * torch.rand(20_000, 2, generator=g, dtype=torch.float64)
    x = (lower + (upper - lower) * torch.rand(40, 2, generator=g, dtype=torch.float64)).requires_grad_(True)
    for _ in range(50):
        margin = _margins(model, x, label).sum()
        (grad,) = torch.autograd.grad(margin, x)
        x = torch.minimum(torch.maximum(x - 0.02 * (upper - lower) * grad.sign(), lower), upper).detach()
        x.requires_grad_(True)
    with torch.no_grad():
        return float(torch.cat([_margins(model, points, label), _margins(model, x, label)]).min())


def _margins(model: nn.Module, x: torch.Tensor, label: int) -> torch.Tensor:
    out = model(x)
    others = torch.cat([out[:, :label], out[:, label + 1 :]], 1)
    return (out[:, label : label + 1] - others).amin(1)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_plain_pytorch_networks_of_the_family_import_and_verify_as_sampling_and_pgd_say(family, tmp_path):
    model = trained(FAMILIES[family](), seed=1)
    onnx_path = exported(model, tmp_path / f"{family}.onnx")
    _, _, gap = daic.write_import(onnx_path, tmp_path / f"{family}.net")
    assert gap < 1e-5
    verdicts = {"unsat": 0, "sat": 0}
    for k, (centre, eps) in enumerate([([0.25, 0.3], 0.05), ([0.48, 0.42], 0.1), ([0.5, 0.6], 0.15),
                                       ([0.3, 0.5], 0.2), ([0.7, 0.35], 0.02)]):  # fmt: skip
        with torch.no_grad():
            label = int(model(torch.tensor([centre])).argmax())
        prop = robustness(tmp_path / f"p{k}.vnnlib", centre, eps, label)
        found = daic.verify_vnnlib(onnx_path, prop, timeout=20)
        middle = torch.tensor(centre, dtype=torch.float64)
        lower, upper = middle - eps, middle + eps
        truth = least_margin(model, lower, upper, label)
        assert found["result"] in ("unsat", "sat"), found
        verdicts[found["result"]] += 1
        if found["result"] == "unsat":
            assert truth > 0, (found, truth)
        else:  # the witness lies in the box and violates the property in the network itself
            x = torch.tensor(found["witness"]["X"], dtype=torch.float32).view(1, 2)
            assert bool(((x.double() >= lower) & (x.double() <= upper)).all())
            with torch.no_grad():
                assert float(_margins(model, x, label)[0]) <= 0
    assert verdicts["unsat"] and verdicts["sat"], verdicts
