"""Training goals (Table 2, Section 4.2): each is an abstraction function and a loss.

A goal turns the input box [l, u] of a batch into weighted *parts* (`parts.Part`): a point (trained with
cross-entropy on the network's output) or an abstract element (a hybrid zonotope, or the linear relaxation
of `CROWNIBP`, each part saying how its output is read), or a `JointPart` pair of them trained by one loss
of both outputs (`CCMix`, `ExpMix`). `Mix` is the Cartesian product, so each of its parts is propagated
once; `Sub`, `Sample` and `BiSample` change the box before handing it to the goal they wrap. Every float
parameter may be a schedule of the training time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from daic.runtime.certification.attacks import ifgsm, pgd_ce
from daic.runtime.data.tensors import to_device
from daic.runtime.domains import Element as AbstractElement
from daic.runtime.domains import HybridZonotope, Symbolic, Value
from daic.runtime.training.parts import FOLDED_INTERVALS, CROWNIBPReading, JointPart, Part, Reading
from daic.runtime.training.schedules import ScheduleLike, as_schedule

Element = Tensor | AbstractElement


@dataclass
class GoalEnv:
    """What a goal may use besides the box: the network (for attacks), the targets, the training time
    and the generator of all its randomness."""

    model: nn.Module
    target: Tensor
    t: float
    generator: torch.Generator


def _noise(like: Tensor, env: GoalEnv, kind: str) -> Tensor:
    shape = like.shape
    # CPU: drawn from the step's CPU generator, so that runs reproduce on any device; moved below
    if kind == "normal":
        sample = torch.randn(shape, generator=env.generator, dtype=like.dtype)
    else:
        sample = torch.rand(shape, generator=env.generator, dtype=like.dtype) * 2 - 1
    return to_device(sample, like.device)


class Goal:
    def alpha(self, lower: Tensor, upper: Tensor, env: GoalEnv) -> Element:
        """The abstract element (or point) this goal trains on, for the box [lower, upper]."""
        raise NotImplementedError

    def part(self, lower: Tensor, upper: Tensor, env: GoalEnv) -> Part:
        """Its one abstraction as a part, read as its domain bounds it (goals of two abstractions have
        no single part)."""
        return Part(self.alpha(lower, upper, env))

    def parts(self, lower: Tensor, upper: Tensor, env: GoalEnv) -> list[Part | JointPart]:
        return [self.part(lower, upper, env)]

    def __repr__(self) -> str:
        return type(self).__name__


class Point(Goal):
    """The centre of the box."""

    def alpha(self, lower, upper, env):
        return (lower + upper) / 2


class Normal(Goal):
    """A point drawn around the centre with the box's radius as standard deviation, clipped to the box.
    (Table 2's formula is garbled in print; this is the prose's "sampled from the normal distribution around
    the input box and clipped to that box".)"""

    def alpha(self, lower, upper, env):
        centre, radius = (lower + upper) / 2, (upper - lower) / 2
        return torch.clamp(centre + radius * _noise(lower, env, "normal"), lower, upper)


class Uniform(Goal):
    """A point drawn uniformly from the box."""

    def alpha(self, lower, upper, env):
        centre, radius = (lower + upper) / 2, (upper - lower) / 2
        return centre + radius * _noise(lower, env, "uniform")


class IFGSMPoint(Goal):
    """The point that k iterations of FGSM find inside the box."""

    def __init__(self, k: int) -> None:
        self.k = int(k)

    def alpha(self, lower, upper, env):
        return ifgsm(env.model, lower, upper, env.target, self.k)

    def __repr__(self) -> str:
        return f"IFGSM({self.k})"


class PGDPoint(Goal):
    """The point of highest cross-entropy that k steps of PGD find in the box from random starts (see
    `attacks.pgd_ce`): SABR's attack with its defaults (8 steps of half the radius, decayed), De Palma et
    al.'s with PGD(1, 10) (one step of ten radii from a random start, clipped to the box)."""

    def __init__(self, k: int = 8, step: float = 0.5, restarts: int = 1) -> None:
        self.k, self.step, self.restarts = int(k), float(step), int(restarts)

    def alpha(self, lower, upper, env):
        return pgd_ce(env.model, lower, upper, env.target, self.k, self.step, self.restarts, env.generator)

    def __repr__(self) -> str:
        return f"PGD({self.k}, {self.step:g}, {self.restarts})"


class EpsBox(Goal):
    """The box itself, as a hybrid zonotope with no correlated terms (abstract layers may add some), read
    as the paper reads it: the worst-case logits of the output's concretization.

    ``folded``: IBP as Gowal et al., CROWN-IBP, auto_LiRPA, CTBench and CTRAIN define it, the margins
    ``y_t - y_j`` folded into the layers after the last ReLU before intervals are taken there (the
    specification matrix ``e_t - e_j`` times the last linear layer): the interval pass of the linear
    relaxation (`Symbolic`, its Box companion alone), read by `FOLDED_INTERVALS`. Verification bounds
    the margins that way too. Abstract layers are the identity on that pass."""

    def __init__(self, folded: bool = False) -> None:
        self.folded = bool(folded)

    def alpha(self, lower, upper, env):
        if self.folded:
            return Symbolic.input(lower, upper)
        return HybridZonotope.from_bounds(lower, upper)

    def part(self, lower, upper, env):
        reading = FOLDED_INTERVALS if self.folded else Reading()
        return Part(self.alpha(lower, upper, env), reading=reading, eps_box=True)

    def __repr__(self) -> str:
        return "Box(folded=True)" if self.folded else "Box"  # as the language writes it


class CROWNIBP(Goal):
    """The box as the input of a linear relaxation: interval bounds through every layer, then the margins
    back-substituted through CROWN's relaxations built from them; the loss mixes the two margin lower
    bounds, ``beta * CROWN-IBP + (1 - beta) * IBP`` (Zhang et al., ICLR 2020). ``fused``: one row
    back-substituted instead of one per class, the loss being the log of a bound of the summed
    exponentials (`Symbolic.fused_loss`)."""

    def __init__(self, beta: ScheduleLike = 1.0, fused: bool = False) -> None:
        self.beta = as_schedule(beta)
        self.fused = bool(fused)

    def alpha(self, lower, upper, env):
        return Symbolic.input(lower, upper)

    def part(self, lower, upper, env):
        return Part(self.alpha(lower, upper, env), reading=CROWNIBPReading(self.beta(env.t), self.fused))

    def __repr__(self) -> str:
        return f"CROWNIBP({self.beta!r}{', fused=True' if self.fused else ''})"


class Mix(Goal):
    """Both goals' abstractions; loss (1 - weight) * loss_g1 + weight * loss_g2."""

    def __init__(self, g1: Goal, g2: Goal, weight: ScheduleLike) -> None:
        self.g1, self.g2, self.weight = g1, g2, as_schedule(weight)

    def alpha(self, lower, upper, env):
        raise ValueError("Mix has two abstractions; it cannot stand inside Sub, Sample or BiSample")

    def parts(self, lower, upper, env):
        w = self.weight(env.t)
        first = [p.weighted(1 - w) for p in self.g1.parts(lower, upper, env)]
        second = [p.weighted(w) for p in self.g2.parts(lower, upper, env)]
        return [p for p in first + second if p.weight != 0]

    def __repr__(self) -> str:
        return f"Mix({self.g1!r}, {self.g2!r}, {self.weight!r})"


class _JointMix(Goal):
    """Two goals of one abstraction each, trained by one loss of both outputs (`loss`), ``weight`` the
    schedule of the second's share."""

    def __init__(self, g1: Goal, g2: Goal, weight: ScheduleLike) -> None:
        self.g1, self.g2, self.weight = g1, g2, as_schedule(weight)

    def loss(
        self, parts: tuple[Part, Part], outputs: tuple[Value, Value], target: Tensor, weight: float
    ) -> Tensor:
        """One loss of both parts' outputs, each read as its part says."""
        raise NotImplementedError

    def alpha(self, lower, upper, env):
        raise ValueError(
            f"{type(self).__name__} has two abstractions; it cannot stand inside Sample or BiSample"
        )

    def parts(self, lower, upper, env):
        weight = self.weight(env.t)

        def combine(first: Part, second: Part, out1: Value, out2: Value, target: Tensor) -> Tensor:
            return self.loss((first, second), (out1, out2), target, weight)

        return [JointPart(self.g1.part(lower, upper, env), self.g2.part(lower, upper, env), combine)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.g1!r}, {self.g2!r}, {self.weight!r})"


class CCMix(_JointMix):
    """One cross-entropy on the convex combination (1 - weight) * m_g1 + weight * m_g2 of both goals'
    bounds of the margins (CC-IBP)."""

    def loss(self, parts, outputs, target, weight):
        # margin_upper bounds y_j - y_t from above (0 at t): the worst-case logits, shifted by y_t.
        first, second = (
            part.reading.margin_upper(out, target) for part, out in zip(parts, outputs, strict=True)
        )
        return F.cross_entropy((1 - weight) * first + weight * second, target)


class ExpMix(_JointMix):
    """The product of powers loss_g1 ** (1 - weight) * loss_g2 ** weight of the goals' batch losses
    (Exp-IBP)."""

    def loss(self, parts, outputs, target, weight):
        first, second = (
            part.reading.loss(out, target).mean() for part, out in zip(parts, outputs, strict=True)
        )
        return first ** (1 - weight) * second**weight


def _scaled(lower: Tensor, upper: Tensor, delta: float) -> tuple[Tensor, Tensor]:
    """The box scaled by delta about its centre: l' = (u + l - delta (u - l)) / 2, u' likewise."""
    centre, half = (lower + upper) / 2, (upper - lower) / 2 * delta
    return centre - half, centre + half


class Sub(Goal):
    """g on the box scaled by delta about its centre."""

    def __init__(self, delta: ScheduleLike, g: Goal) -> None:
        self.delta, self.g = as_schedule(delta), g

    def alpha(self, lower, upper, env):
        return self.g.alpha(*_scaled(lower, upper, self.delta(env.t)), env)

    def part(self, lower, upper, env):
        return self.g.part(*_scaled(lower, upper, self.delta(env.t)), env).moved()

    def parts(self, lower, upper, env):
        return [p.moved() for p in self.g.parts(*_scaled(lower, upper, self.delta(env.t)), env)]

    def __repr__(self) -> str:
        return f"Sub({self.delta!r}, {self.g!r})"


def _centre(element: Element) -> Tensor:
    return element if isinstance(element, Tensor) else element.centre()


def _upper(element: Element) -> Tensor:
    return element if isinstance(element, Tensor) else element.bounds()[1]


class Sample(Goal):
    """b = centre of g_s on the box scaled by 1 - r * delta; then g_t on the box of width delta * (u - l)
    around b."""

    def __init__(self, delta: ScheduleLike, r: ScheduleLike, g_s: Goal, g_t: Goal) -> None:
        self.delta, self.r, self.g_s, self.g_t = as_schedule(delta), as_schedule(r), g_s, g_t

    def _box(self, lower, upper, env):
        delta, r = self.delta(env.t), self.r(env.t)
        b = _centre(self.g_s.alpha(*_scaled(lower, upper, 1 - r * delta), env))
        half = (upper - lower) * (0.5 * delta)
        return b - half, b + half

    def alpha(self, lower, upper, env):
        return self.g_t.alpha(*self._box(lower, upper, env), env)

    def part(self, lower, upper, env):
        return self.g_t.part(*self._box(lower, upper, env), env).moved()

    def parts(self, lower, upper, env):
        return [p.moved() for p in self.g_t.parts(*self._box(lower, upper, env), env)]

    def __repr__(self) -> str:
        return f"Sample({self.delta!r}, {self.r!r}, {self.g_s!r}, {self.g_t!r})"


class SmallBox(Goal):
    """SABR (Müller et al., ICLR 2023): g on the box of `size` times the input box's radius around the
    point the attack finds in the whole box, moved (per dimension) as little as needed to lie inside it."""

    def __init__(self, size: ScheduleLike, attack: Goal | None = None, g: Goal | None = None) -> None:
        self.size = as_schedule(size)
        self.attack = attack if attack is not None else PGDPoint()
        self.g = g if g is not None else EpsBox()

    def _box(self, lower, upper, env):
        half = (upper - lower) * (0.5 * self.size(env.t))
        point = _centre(self.attack.alpha(lower, upper, env))
        centre = torch.minimum(torch.maximum(point, lower + half), upper - half)
        return centre - half, centre + half

    def alpha(self, lower, upper, env):
        return self.g.alpha(*self._box(lower, upper, env), env)

    def part(self, lower, upper, env):
        return self.g.part(*self._box(lower, upper, env), env).moved()

    def parts(self, lower, upper, env):
        return [p.moved() for p in self.g.parts(*self._box(lower, upper, env), env)]

    def __repr__(self) -> str:
        return f"SmallBox({self.size!r}, {self.attack!r}, {self.g!r})"


class BiSample(Goal):
    """g2 on the box centred on the input whose radius is how far g1's abstraction reaches:
    l', u' = c -/+ |UB(alpha_g1(l, u)) - c| with c the centre."""

    def __init__(self, g1: Goal, g2: Goal) -> None:
        self.g1, self.g2 = g1, g2

    def _box(self, lower, upper, env):
        centre = (lower + upper) / 2
        reach = (_upper(self.g1.alpha(lower, upper, env)) - centre).abs()
        return centre - reach, centre + reach

    def alpha(self, lower, upper, env):
        return self.g2.alpha(*self._box(lower, upper, env), env)

    def part(self, lower, upper, env):
        return self.g2.part(*self._box(lower, upper, env), env).moved()

    def parts(self, lower, upper, env):
        return [p.moved() for p in self.g2.parts(*self._box(lower, upper, env), env)]

    def __repr__(self) -> str:
        return f"BiSample({self.g1!r}, {self.g2!r})"


def schedule_values(goal: Goal, t: float) -> dict[str, float]:
    """The current value of every schedule inside a goal, named by the goal and parameter that hold it
    (`Mix.weight`, `Sub.delta`); where a goal holds two of a kind, by the path of parameters to each
    (`g1.Sub.delta`, `g2.Sub.delta`)."""
    from daic.runtime.training.schedules import Const, Schedule

    found: list[tuple[str, str, Schedule]] = []  # (path, name, schedule), outermost first
    work: list[tuple[str, Goal]] = [("", goal)]
    while work:
        path, node = work.pop(0)
        for attribute, value in vars(node).items():
            if isinstance(value, Schedule) and not isinstance(value, Const):
                found.append((path, f"{type(node).__name__}.{attribute}", value))
            elif isinstance(value, Goal):
                work.append((f"{path}{attribute}.", value))
    repeated = Counter(name for _, name, _ in found)
    return {(path + name if repeated[name] > 1 else name): schedule(t) for path, name, schedule in found}
