"""The certified-training methods' steps: each method is its goal expression, checked and lowered as a
scheme's goal is, and one step is what `daic run`'s `Trainer` does for a batch (`LossModule`: BatchNorm's
statistics from the clean batch, the goal's parts, their losses, backward).

A method with an attack is also measured with its search aside: the same step with every attack's point
found once, before the timing, and handed back at each call (`freeze_searches`), so what is timed is the
method's step less its search, directly. What remains of MTL-IBP, CC-IBP and Exp-IBP is a concrete pass at
the attack's point and an IBP pass; of SABR, its IBP pass on the small box. TAPS's attack runs inside the
network (its latent PGD), so it has no such column.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import workloads as W
from torch import nn

from daic.compiler.checking.expressions import check_expression
from daic.compiler.lower import lower_value
from daic.compiler.types import GOAL
from daic.runtime.data.tensors import TensorData
from daic.runtime.training.goals import Goal, IFGSMPoint, PGDPoint
from daic.runtime.training.schedules import Lin
from daic.runtime.training.scheme import Scheme
from daic.runtime.training.trainer import LossModule


@dataclass(frozen=True)
class Method:
    name: str
    goal: str  # the goal expression, as a scheme writes it
    searches: bool = False  # it has an attack goal inside, whose search is also taken aside
    taps: bool = False  # the network gets a TAPS layer before its first Linear
    warmup: bool = False  # a step of the epsilon ramp, with Shi et al.'s warm-up regularisers (weight 0.5)


METHODS = (
    Method("concrete", "Point"),
    Method("IBP", "Box"),
    Method("IBP, warm-up", "Box", warmup=True),
    Method("CROWN-IBP", "CROWNIBP"),
    Method("CROWN-IBP fused", "CROWNIBP(fused=True)"),
    Method("SABR", "SmallBox(0.4, PGD(8, 0.5))", searches=True),
    Method("MTL-IBP", "Mix(PGD(1, 10), Box, 0.5)", searches=True),
    Method("CC-IBP", "CCMix(PGD(1, 10), Box, 0.5)", searches=True),
    Method("Exp-IBP", "ExpMix(PGD(1, 10), Box, 0.5)", searches=True),
    Method("TAPS", "Box", taps=True),
)
BASE, BOX = "concrete", "IBP"
ATTACKS = (PGDPoint, IFGSMPoint)
FROZEN = " (search aside)"


def _attacks(goal: Goal) -> list[Goal]:
    """The attack goals inside `goal`, wherever they are nested."""
    if isinstance(goal, ATTACKS):
        return [goal]
    return [a for part in vars(goal).values() if isinstance(part, Goal) for a in _attacks(part)]


def freeze_searches(goal: Goal) -> None:
    """Every attack inside `goal` searches once and then returns that point: a step of the goal is then
    the method's step without its search. (The benchmark never updates the weights, so it is the point the
    search would find each time.)"""
    for attack in _attacks(goal):
        search, found = attack.alpha, []

        def alpha(lower, upper, env, search=search, found=found):
            if not found:
                found.append(search(lower, upper, env).detach())
            return found[0]

        attack.alpha = alpha


def with_taps(text: str, steps: int) -> str:
    """The network with TAPS's split before its first Linear layer (the classifier after it)."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("Linear"))
    return "\n".join([*lines[:first], f"TAPS steps={steps}", *lines[first:]]) + "\n"


def goal_step(
    model: nn.Module, goal_text: str, x: torch.Tensor, y: torch.Tensor, eps: float, frozen: bool = False,
    warmup: bool = False,
) -> W.Step:  # fmt: skip
    """One training step of the goal, as `Trainer` takes it (without the optimizer's update); `frozen`:
    with its attacks' searches aside (`freeze_searches`); `warmup`: halfway up a ramp to 2 eps, with the
    warm-up regularisers."""
    goal = lower_value(check_expression(goal_text, GOAL))
    if frozen:
        freeze_searches(goal)
    data = TensorData(x[:1], y[:1], x[:1], y[:1], 10)
    ramp = {"epsilon": Lin(0, 2 * eps, 2, 0), "epochs": 2, "warmup_reg": 0.5}
    scheme = Scheme(data=data, goal=goal, batch=len(x), **(ramp if warmup else {"epsilon": eps, "epochs": 1}))
    module = LossModule(model, scheme, (0.0, 1.0))
    generator = torch.Generator().manual_seed(0)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        module(x, y, 1.0, generator).backward()

    return step


def steps(name: str, device: torch.device, taps_steps: int = 8) -> dict[str, W.Step]:
    """Every method's step, and with an attack, its step with the search aside (keyed `<method> (search
    aside)`), on network `name`."""
    work = W.WORKLOADS[name]
    model = W.build(name).to(device).train()
    tapped = W.build(name, with_taps(W.net_text(name), taps_steps)).to(device).train()
    x, y = (t.to(device) for t in W.inputs(name))
    found: dict[str, W.Step] = {}
    for method in METHODS:
        net = tapped if method.taps else model
        found[method.name] = goal_step(net, method.goal, x, y, work.epsilon, warmup=method.warmup)
        if method.searches:
            found[method.name + FROZEN] = goal_step(model, method.goal, x, y, work.epsilon, frozen=True)
    return found


def rows(name: str, seconds: dict[str, float]) -> list[list[str]]:
    """The table's rows: ms, x the concrete step, x the IBP step, and x IBP without the attack's search."""
    base, box = seconds[BASE], seconds[BOX]
    found = []
    for method in METHODS:
        s = seconds[method.name]
        aside = f"{seconds[method.name + FROZEN] / box:.2f}" if method.searches else "-"
        found.append(
            [name, str(W.WORKLOADS[name].batch), method.name, method.goal, f"{s * 1e3:.1f}",
             f"{s / base:.2f}", f"{s / box:.2f}", aside]
        )  # fmt: skip
    return found
