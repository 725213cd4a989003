"""The certified-training methods' steps: each method is its goal expression, checked and lowered as a
scheme's goal is, and one step is what `daic run`'s `Trainer` does for a batch (`LossModule`: BatchNorm's
statistics from the clean batch, the goal's parts, their losses, backward).

A method with an attack is also measured without its search: the attack goal alone (`PGD(...)` trains on
the point it finds) costs the search plus one concrete pass, so the search costs that step less the
concrete one, and "search aside" is the method's step less that. What remains of MTL-IBP, CC-IBP and
Exp-IBP is a concrete pass at the attack's point and an IBP pass, so their floor is (concrete + IBP) / IBP;
SABR's is its IBP pass on the small box. TAPS's attack runs inside the network (its latent PGD), so it has
no such column.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import workloads as W
from torch import nn

from daic.compiler.expressions import check_expression
from daic.compiler.lower import lower_value
from daic.compiler.types import GOAL
from daic.runtime.data import TensorData
from daic.runtime.scheme import Scheme
from daic.runtime.trainer import LossModule


@dataclass(frozen=True)
class Method:
    name: str
    goal: str  # the goal expression, as a scheme writes it
    attack: str | None = None  # the attack goal inside it, timed alone
    taps: bool = False  # the network gets a TAPS layer before its first Linear


METHODS = (
    Method("concrete", "Point"),
    Method("IBP", "Box"),
    Method("CROWN-IBP", "CROWNIBP"),
    Method("CROWN-IBP fused", "CROWNIBP(fused=True)"),
    Method("SABR", "SmallBox(0.4, PGD(8, 0.5))", "PGD(8, 0.5)"),
    Method("MTL-IBP", "Mix(PGD(1, 10), Box, 0.5)", "PGD(1, 10)"),
    Method("CC-IBP", "CCMix(PGD(1, 10), Box, 0.5)", "PGD(1, 10)"),
    Method("Exp-IBP", "ExpMix(PGD(1, 10), Box, 0.5)", "PGD(1, 10)"),
    Method("TAPS", "Box", taps=True),
)
BASE, BOX = "concrete", "IBP"


def with_taps(text: str, steps: int) -> str:
    """The network with TAPS's split before its first Linear layer (the classifier after it)."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("Linear"))
    return "\n".join([*lines[:first], f"TAPS steps={steps}", *lines[first:]]) + "\n"


def goal_step(model: nn.Module, goal_text: str, x: torch.Tensor, y: torch.Tensor, eps: float) -> W.Step:
    """One training step of the goal, as `Trainer` takes it (without the optimizer's update)."""
    goal = lower_value(check_expression(goal_text, GOAL))
    data = TensorData(x[:1], y[:1], x[:1], y[:1], 10)
    scheme = Scheme(data=data, epsilon=eps, goal=goal, epochs=1, batch=len(x))
    module = LossModule(model, scheme, (0.0, 1.0))
    generator = torch.Generator().manual_seed(0)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        module(x, y, 1.0, generator).backward()

    return step


def steps(name: str, device: torch.device, taps_steps: int = 8) -> dict[str, W.Step]:
    """Every method's step, and each attack's alone (keyed `attack <goal>`), on network `name`."""
    work = W.WORKLOADS[name]
    model = W.build(name).to(device).train()
    tapped = W.build(name, with_taps(W.net_text(name), taps_steps)).to(device).train()
    x, y = (t.to(device) for t in W.inputs(name))
    found: dict[str, W.Step] = {}
    for method in METHODS:
        found[method.name] = goal_step(tapped if method.taps else model, method.goal, x, y, work.epsilon)
        if method.attack and f"attack {method.attack}" not in found:
            found[f"attack {method.attack}"] = goal_step(model, method.attack, x, y, work.epsilon)
    return found


def rows(name: str, seconds: dict[str, float]) -> list[list[str]]:
    """The table's rows: ms, x the concrete step, x the IBP step, and x IBP without the attack's search."""
    base, box = seconds[BASE], seconds[BOX]
    found = []
    for method in METHODS:
        s = seconds[method.name]
        aside = "-"
        if method.attack:
            search = max(seconds[f"attack {method.attack}"] - base, 0.0)
            aside = f"{(s - search) / box:.2f}"
        found.append(
            [name, str(W.WORKLOADS[name].batch), method.name, method.goal, f"{s * 1e3:.1f}",
             f"{s / base:.2f}", f"{s / box:.2f}", aside]
        )  # fmt: skip
    return found
