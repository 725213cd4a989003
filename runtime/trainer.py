"""The training loop: goals to losses, one optimizer step per batch, evaluation every N epochs.

Every random choice of an epoch (data order, augmentation, sampled goals, attacks' starts) comes from one
generator seeded by (seed, epoch), so an epoch is the same whether or not the run was resumed before it.
The loss stays on the device between batches; it is read back only every `log_every` batches, so a step
on a GPU does not wait for the host.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .context import AbstractContext
from .data import TensorData, augment, batches
from .evaluate import evaluate
from .goals import GoalEnv, schedule_values
from .losses import worst_case_loss
from .schedules import as_schedule
from .scheme import Scheme


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + epoch)


@dataclass
class Progress:
    """What the display shows while an epoch runs."""

    batch: int
    batches: int
    examples: int
    seconds: float
    loss: float
    epsilon: float
    t: float
    schedules: dict[str, float]


class Trainer:
    def __init__(
        self,
        model: nn.Module,
        scheme: Scheme,
        data: TensorData,
        device: torch.device | str = "cpu",
        log_every: int = 10,
    ) -> None:
        self.model = model.to(device)
        self.scheme = scheme
        self.data = data
        self.device = torch.device(device)
        self.optimizer = scheme.optimizer.build(self.model.parameters())
        self.epsilon = as_schedule(scheme.epsilon)
        self.log_every = log_every

    def loss(self, x: Tensor, y: Tensor, t: float, generator: torch.Generator) -> Tensor:
        """The scheme's loss on one batch at training time t (fractional epoch)."""
        a, b = self.data.value_range
        eps = self.epsilon(t)
        lower, upper = (x - eps).clamp(min=a), (x + eps).clamp(max=b)
        env = GoalEnv(self.model, y, t, generator)
        ctx = AbstractContext(training=True, t=t, relu=self.scheme.relu)
        total = x.new_zeros(())
        for part in self.scheme.goal.parts(lower, upper, env):
            if isinstance(part.value, Tensor):
                part_loss = F.cross_entropy(self.model(part.value), y)
            else:
                part_loss = worst_case_loss(self.model.abstract(part.value, ctx), y).mean()
            total = total + part.weight * part_loss
        for deep in ctx.losses:
            total = total + deep
        return total

    def train_epoch(
        self, epoch: int, on_progress: Callable[[Progress], None] | None = None
    ) -> dict[str, float]:
        scheme, data = self.scheme, self.data
        self.model.train()
        base_lr = scheme.optimizer.lr
        lr = scheme.lr.apply(self.optimizer, base_lr, epoch) if scheme.lr else base_lr
        generator = epoch_generator(scheme.seed, epoch)
        n = len(data.train_y)
        count = math.ceil(n / scheme.batch)
        running = torch.zeros((), device=self.device)
        seen = 0
        started = time.perf_counter()
        for i, (x, y) in enumerate(batches(data.train_x, data.train_y, scheme.batch, generator)):
            x = augment(x.to(self.device, non_blocking=True), data_augment(scheme), generator)
            y = y.to(self.device, non_blocking=True)
            t = epoch + seen / n
            loss = self.loss(x, y, t, generator)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            running += loss.detach() * len(y)
            seen += len(y)
            if on_progress and ((i + 1) % self.log_every == 0 or i + 1 == count):
                on_progress(
                    Progress(
                        i + 1,
                        count,
                        seen,
                        time.perf_counter() - started,
                        float(running) / seen,
                        self.epsilon(t),
                        t,
                        schedule_values(scheme.goal, t),
                    )
                )
        seconds = time.perf_counter() - started
        return {
            "epoch": epoch + 1,
            "loss": float(running) / max(1, seen),
            "lr": lr,
            "epsilon": self.epsilon(epoch + 1),
            "seconds": seconds,
            "examples_per_s": seen / max(seconds, 1e-9),
        }

    def evaluate(
        self,
        epsilon: float | None = None,
        on_progress: Callable[[str, int, int], None] | None = None,
        batch: int | None = None,
    ) -> dict[str, float]:
        eps = self.epsilon(self.scheme.epochs) if epsilon is None else epsilon
        return evaluate(
            self.model,
            self.scheme.test,
            self.data.test_x,
            self.data.test_y,
            eps,
            self.data.value_range,
            batch or max(self.scheme.batch, 100),
            self.scheme.relu,
            on_progress,
        )


def data_augment(scheme: Scheme) -> list:
    return list(scheme.data.augment)
