"""Adversarial attacks inside a box [lower, upper]: iterated FGSM (training goals), PGD and MI-FGSM (tests),
and the targeted margin attack that certification runs before a complete search (`margin_attack`).

All are batched: one gradient per step for the whole batch, taken with `torch.autograd.grad` so the
network's parameter gradients are untouched. Randomness comes from an explicit generator (reproducible).
"""

from __future__ import annotations

import copy
import math
import time

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from daic.runtime.data.tensors import to_device
from daic.runtime.layers.base import placement


def _input_grad(model: nn.Module, x: Tensor, target: Tensor) -> Tensor:
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        loss = F.cross_entropy(model(x), target, reduction="sum")
        (grad,) = torch.autograd.grad(loss, x)
    return grad


def _clip(x: Tensor, lower: Tensor, upper: Tensor) -> Tensor:
    return torch.maximum(torch.minimum(x, upper), lower)


def ifgsm(model: nn.Module, lower: Tensor, upper: Tensor, target: Tensor, k: int) -> Tensor:
    """k steps of FGSM from the centre of the box, each of 2.5/k of its radius, clipped to the box."""
    x = (lower + upper) / 2
    step = (upper - lower) / 2 * (2.5 / k)
    for _ in range(k):
        x = _clip(x + step * _input_grad(model, x, target).sign(), lower, upper)
    return x.detach()


def pgd(
    model: nn.Module,
    lower: Tensor,
    upper: Tensor,
    target: Tensor,
    k: int = 20,
    step: float | None = None,
    restarts: int = 1,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Projected gradient descent from random starts; returns, per example, a point that is misclassified
    if any restart found one (else the last restart's point)."""
    radius = (upper - lower) / 2
    alpha = radius * (2.5 / k) if step is None else torch.full_like(radius, step)
    best = (lower + upper) / 2
    for _ in range(restarts):
        noise = to_device(torch.rand(lower.shape, generator=generator, dtype=lower.dtype), lower.device)
        x = lower + (upper - lower) * noise
        for _ in range(k):
            x = _clip(x + alpha * _input_grad(model, x, target).sign(), lower, upper)
        with torch.no_grad():
            fooled = model(x).argmax(1) != target
        best = torch.where(fooled.view(-1, *[1] * (x.dim() - 1)), x, best)
    return best.detach()


def mifgsm(
    model: nn.Module,
    x: Tensor,
    lower: Tensor,
    upper: Tensor,
    target: Tensor,
    k: int = 20,
    mu: float = 0.8,
    step: float | None = None,
) -> Tensor:
    """Momentum iterative FGSM (Dong et al., 2018): g <- mu g + grad / |grad|_1; x <- clip(x + step sign(g)).

    The paper's setting: mu = 0.8, 20 iterations, step 0.0031373, which is eps / 10 at its CIFAR10 eps of
    8/255. Without ``step``, each image's step is eps / 10 (eps: how far its box reaches from ``x``), so
    that the attack reaches the edge of every ball, whatever its radius."""
    if step is None:
        reach = torch.maximum(x - lower, upper - x).flatten(1).amax(1)
        step = (reach / 10).view(-1, *[1] * (x.dim() - 1))
    momentum = torch.zeros_like(x)
    adv = x.detach()
    for _ in range(k):
        grad = _input_grad(model, adv, target)
        norm = grad.abs().flatten(1).sum(1).clamp_min(1e-12).view(-1, *[1] * (x.dim() - 1))
        momentum = mu * momentum + grad / norm
        adv = _clip(adv + step * momentum.sign(), lower, upper)
    return adv.detach()


def pgd_ce(
    model: nn.Module,
    lower: Tensor,
    upper: Tensor,
    target: Tensor,
    k: int = 8,
    step: float = 0.5,
    restarts: int = 1,
    generator: torch.Generator | None = None,
) -> Tensor:
    """The point of highest cross-entropy that PGD finds in the box (a training attack, as SABR's): from
    `restarts` uniform random starts, `k` signed-gradient steps of `step` times the box's radius (per
    dimension), the step a tenth as large from step ceil(k/2), again from ceil(0.8 k) and ceil(0.9 k);
    every iterate of every restart is a candidate."""
    radius = (upper - lower) / 2
    milestones = [math.ceil(f * k) for f in (0.5, 0.8, 0.9)]
    best = (lower + upper) / 2
    best_loss = torch.full(target.shape, -math.inf, device=lower.device, dtype=lower.dtype)
    for _ in range(restarts):
        noise = to_device(torch.rand(lower.shape, generator=generator, dtype=lower.dtype), lower.device)
        x = lower + (upper - lower) * noise
        for i in range(k):
            scale = step * 0.1 ** sum(i >= m for m in milestones)
            x = x.detach().requires_grad_(True)
            with torch.enable_grad():
                losses = F.cross_entropy(model(x), target, reduction="none")
                (grad,) = torch.autograd.grad(losses.sum(), x)
            better = losses.detach() > best_loss
            best = torch.where(better.view(-1, *[1] * (x.dim() - 1)), x.detach(), best)
            best_loss = torch.maximum(best_loss, losses.detach())
            x = _clip(x.detach() + scale * radius * grad.sign(), lower, upper)
        with torch.no_grad():
            losses = F.cross_entropy(model(x), target, reduction="none")
        better = losses > best_loss
        best = torch.where(better.view(-1, *[1] * (x.dim() - 1)), x, best)
        best_loss = torch.maximum(best_loss, losses)
    return best.detach()


MARGIN_FLOOR = -1e-5
"""A margin below this pushes a targeted trajectory no further: it has crossed (alpha-beta-CROWN's hinge)."""


def margin_attack(
    model: nn.Module,
    lower: Tensor,
    upper: Tensor,
    target: Tensor,
    steps: int,
    restarts: int,
    generator: torch.Generator | None = None,
    chunk: int = 512,
    deadline: float = math.inf,
) -> tuple[Tensor, Tensor]:
    """For each example, `restarts` trajectories per other class j, each pushing the margin
    ``y_t - y_j`` down (to just below zero) from a uniform start: sign steps of the gradient's running
    mean (momentum 0.9, bias-corrected) of ``eps / 4 * 0.99^s`` (``eps`` the box's largest half-width),
    as alpha-beta-CROWN attacks. A cross-entropy attack follows the likeliest wrong class; one trajectory
    per class also finds the class only a corner reaches. Returns, per example, the point of least margin
    ``min_j (y_t - y_j)`` seen at any step of any trajectory, and that margin; a chunk of trajectories
    (`chunk` per pass) stops once each of its examples has a point below zero, and every trajectory at
    `deadline` (a `time.perf_counter()` reading)."""
    classes = model(((lower + upper) / 2)[:1]).shape[1]
    n, per = len(target), (classes - 1) * restarts
    every = torch.arange(classes, device=target.device).expand(n, classes)
    others = every[every != target[:, None]].view(n, classes - 1)
    image = torch.arange(n, device=target.device).repeat_interleave(per)
    wrong = others.repeat_interleave(restarts, 1).flatten()
    found = []
    for k in range(0, len(image), chunk):
        mine = slice(k, k + chunk)
        found.append(
            _targeted(model, lower, upper, target, image[mine], wrong[mine], steps, generator, deadline)
        )
    points, margins = torch.cat([x for x, _ in found]), torch.cat([m for _, m in found])
    best = margins.view(n, per).argmin(1) + torch.arange(n, device=target.device) * per
    return points[best].detach(), margins[best]


def _targeted(
    model: nn.Module, lower: Tensor, upper: Tensor, target: Tensor, image: Tensor, wrong: Tensor,
    steps: int, generator: torch.Generator | None, deadline: float = math.inf,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """One chunk of `margin_attack`'s trajectories (of images `image`, towards classes `wrong`): each one's
    point of least margin over every class, and that margin."""
    low, high, y = lower[image], upper[image], target[image]
    eps = ((high - low) / 2).flatten(1).amax(1).view(-1, *[1] * (low.dim() - 1))
    noise = to_device(torch.rand(low.shape, generator=generator, dtype=low.dtype), low.device)
    x = low + (high - low) * noise
    best_x, best_m = x.clone(), torch.full(y.shape, math.inf, dtype=low.dtype, device=low.device)
    momentum = torch.zeros_like(x)
    slots = int(image.max()) + 1  # read once: the loop below waits for the device only for its stop test
    for s in range(steps + 1):
        x = x.detach().requires_grad_(True)
        with torch.enable_grad():
            logits = model(x)
            at_target = logits.gather(1, y[:, None]).squeeze(1)
            pushed = (at_target - logits.gather(1, wrong[:, None]).squeeze(1)).clamp(min=MARGIN_FLOOR)
            grad = torch.autograd.grad(pushed.sum(), x)[0] if s < steps else None
        least = (at_target[:, None] - logits.scatter(1, y[:, None], -math.inf)).amin(1).detach()
        better = least < best_m
        best_x = torch.where(better.view(-1, *[1] * (x.dim() - 1)), x.detach(), best_x)
        best_m = torch.minimum(best_m, least)
        if grad is None or time.perf_counter() > deadline or _every_image_fooled(image, best_m, slots):
            break
        momentum = 0.9 * momentum + 0.1 * grad
        size = eps / 4 * 0.99**s / (1 - 0.9 ** (s + 1))
        x = _clip(x.detach() - size * momentum.sign(), low, high)
    return best_x, best_m


def _every_image_fooled(image: Tensor, margins: Tensor, slots: int) -> bool:
    """Whether each image among `image` (numbers below `slots`) has a trajectory whose best margin is below
    zero."""
    fooled = torch.zeros(slots, device=image.device).index_add_(0, image, (margins < 0).float())
    return bool((fooled[image] > 0).all())


class Attacker:
    """PGD for certification, on a float32 copy of the certifying float64 network (made at its first
    attack): a point only has to be found, and it counts as a counterexample only if the float64 network
    misclassifies it (`certify.falsify`). Float64 convolutions run several times slower on the CPU (branch
    and bound's attack took 54 s of a 20 s search on an MNIST CNN7)."""

    def __init__(self, model: nn.Module) -> None:
        self.model, self._fast = model, None

    def float32(self) -> nn.Module:
        """The network as float32 runs it: the float32 copy of a float64 network, else the network."""
        if placement(self.model)[1] != torch.float64:
            return self.model
        if self._fast is None:
            self._fast = copy.deepcopy(self.model).float()
        return self._fast

    def pgd(
        self,
        lower: Tensor,
        upper: Tensor,
        y: Tensor,
        steps: int,
        generator: torch.Generator,
        restarts: int = 1,
    ) -> Tensor:
        """`pgd`'s points in [lower, upper], in the boxes' precision (clipped to them after float32 steps)."""
        if lower.dtype != torch.float64:
            return pgd(self.model, lower, upper, y, steps, None, restarts, generator)
        if self._fast is None:
            self._fast = copy.deepcopy(self.model).float()
        points = pgd(self._fast, lower.float(), upper.float(), y, steps, None, restarts, generator)
        return torch.maximum(torch.minimum(points.to(lower.dtype), upper), lower)

    def targeted(
        self, lower: Tensor, upper: Tensor, y: Tensor, steps: int, restarts: int, generator: torch.Generator,
        deadline: float = math.inf,
    ) -> Tensor:  # fmt: skip
        """`margin_attack`'s points in [lower, upper], in the boxes' precision (see `pgd`)."""
        if lower.dtype != torch.float64:
            points, _ = margin_attack(
                self.model, lower, upper, y, steps, restarts, generator, deadline=deadline
            )
            return points
        if self._fast is None:
            self._fast = copy.deepcopy(self.model).float()
        points = margin_attack(self._fast, lower.float(), upper.float(), y, steps, restarts, generator,
                               deadline=deadline)[0]  # fmt: skip
        return torch.maximum(torch.minimum(points.to(lower.dtype), upper), lower)
