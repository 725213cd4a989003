"""The training loop: goals to losses, one optimizer step per batch, evaluation every N epochs.

Every random choice of an epoch (data order, augmentation, sampled goals, attacks' starts) comes from one
generator seeded by (seed, epoch), so an epoch is the same whether or not the run was resumed before it,
and (see `distributed`) whether one process trains or several.
The loss stays on the device between batches; it is read back only every `log_every` batches, so a step
on a GPU does not wait for the host.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from daic.runtime.certification.evaluate import evaluate
from daic.runtime.context import AbstractContext
from daic.runtime.data.augment import augment
from daic.runtime.data.tensors import TensorData
from daic.runtime.domains import Element
from daic.runtime.domains.balls import clipped_ball
from daic.runtime.layers.base import Pass, trace
from daic.runtime.layers.normalization import batch_norms, fixed_statistics, measure, reestimate_statistics
from daic.runtime.training.distributed import GlobalDraws, Group, evaluation_share, gather, local_batch, shard
from daic.runtime.training.goals import GoalEnv, schedule_values
from daic.runtime.training.regularisers import add_l1_gradient_, interval_relu_inputs, warmup_regulariser
from daic.runtime.training.schedules import as_schedule
from daic.runtime.training.scheme import Scheme

# `--amp` choices. bf16 keeps float32's exponent range, so it needs no loss scaling; fp16 does (GradScaler).
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


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


class _Autocast:
    """The network's concrete forward under autocast, returning float32 logits: what the goals' attacks
    (IFGSM) call. An attack only has to find a good point, so reduced precision cannot hurt soundness."""

    def __init__(self, model: nn.Module, dtype: torch.dtype) -> None:
        self.model, self.dtype = model, dtype

    def __call__(self, x: Tensor) -> Tensor:
        with torch.autocast(x.device.type, dtype=self.dtype):
            return self.model(x).float()


class LossModule(nn.Module):
    """The scheme's loss on one batch, as the `forward` of a module: its goal's and the warm-up
    regularisers' (the L1 penalty of the weights is the optimizer step's, `Trainer._step`).

    DistributedDataParallel only hooks `forward`: it readies its gradient all-reduce for the backward of
    what a forward returned. Abstract passes (`model.abstract(...)`) never call the network's own forward,
    so wrapping the network itself would miss them; wrapping this module puts every use of the parameters
    in a step, concrete and abstract, inside one forward.

    With `amp_dtype`, only concrete passes run under autocast. Abstract propagation stays in float32:
    bf16 keeps 8 significant bits, a relative rounding error of 0.4%, as large as a box of eps = 1/255 is
    wide, so bounds computed in it would train on rounding noise; and the interval and zonotope transformers
    are only sound for exact arithmetic, which float32 approximates far below any eps (certification
    itself reruns everything in float64; see `evaluate`).
    """

    def __init__(
        self,
        model: nn.Module,
        scheme: Scheme,
        value_range: tuple[float, float],
        amp_dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.scheme = scheme
        self.epsilon = as_schedule(scheme.epsilon)  # the training radius at time t
        self.value_range = value_range
        self.amp_dtype = amp_dtype
        self.normalised = bool(batch_norms(model))

    def concrete(self, x: Tensor) -> Tensor:
        if self.amp_dtype is None:
            return self.model(x)
        with torch.autocast(x.device.type, dtype=self.amp_dtype):
            return self.model(x).float()

    def output(self, value: Tensor | Element, ctx: AbstractContext) -> Pass:
        """The network's pass of a point (logits) or an abstract element (with what reached each layer)."""
        return Pass(self.concrete(value)) if isinstance(value, Tensor) else trace(self.model, value, ctx)

    def forward(
        self, x: Tensor, y: Tensor, t: float, generator: torch.Generator, draws: GlobalDraws | None = None
    ) -> Tensor:
        """The loss at training time t (fractional epoch); `draws` is entered while the goal samples."""
        with fixed_statistics(self.model):
            if self.normalised:  # every pass of the step, attacks too, with the clean batch's statistics
                measure(self.model, x, update=True, forward=self.concrete)
            return self._loss(x, y, t, generator, draws)

    def _loss(
        self, x: Tensor, y: Tensor, t: float, generator: torch.Generator, draws: GlobalDraws | None
    ) -> Tensor:
        eps = self.epsilon(t)
        lower, upper = clipped_ball(x, eps, self.value_range)
        attacked = self.model if self.amp_dtype is None else _Autocast(self.model, self.amp_dtype)
        env = GoalEnv(attacked, y, t, generator)
        with draws if draws is not None else nullcontext():
            parts = self.scheme.goal.parts(lower, upper, env)
        ctx = AbstractContext(training=True, t=t, relu=self.scheme.relu)
        warmup = self._warmup_box(lower, upper, eps)
        relu_inputs = None
        total = x.new_zeros(())
        centres = self.normalised and self.scheme.bn_stats == "centres"
        for part in parts:
            if centres:
                self._measure_centres(part.elements())
            trained = part.train(lambda value: self.output(value, ctx), y)
            total = total + part.weight * trained.loss
            for run in trained.passes:
                for loss in run.step_losses(ctx):
                    total = total + loss
            # The warm-up regularisers read the interval bounds of the epsilon-box's pass: a goal's part
            # that is that pass hands them on, instead of their being propagated a second time.
            if relu_inputs is None and warmup is not None and part.eps_box and eps > 0:
                relu_inputs = interval_relu_inputs(trained.passes[0], self.scheme.relu)
        if warmup is not None:
            weight = self.scheme.warmup_reg * (1 - eps / self.run_epsilon)
            total = total + weight * warmup_regulariser(self.model, *warmup, self.scheme.relu, relu_inputs)
        return total

    @property
    def run_epsilon(self) -> float:
        """The run's epsilon: the radius it tests and certifies at, and the one its checkpoints record; the
        epsilon schedule's value at the scheme's last epoch (training may reach it by a ramp)."""
        return self.epsilon(self.scheme.epochs)

    def _warmup_box(self, lower: Tensor, upper: Tensor, eps: float) -> tuple[Tensor, Tensor] | None:
        """The boxes the warm-up regularisers are computed for, while they act (during the ramp)."""
        if self.scheme.warmup_reg <= 0 or eps >= self.run_epsilon:
            return None
        if eps <= 0:  # the box is a point: a radius of 1e-6 gives the bounds the regularisers need
            return clipped_ball((lower + upper) / 2, 1e-6, self.value_range)
        return lower, upper

    def _measure_centres(self, elements: list[Element]) -> None:
        """BatchNorm's statistics for an abstract part: those of its boxes' centres (a point part keeps
        the clean batch's)."""
        if elements:
            measure(self.model, elements[0].centre().detach(), update=False, forward=self.concrete)


class Trainer:
    """Trains `model` with `scheme` on `data`, alone or as one process of a `group` (then `device` is the
    group's). Every process holds the whole data set and trains on its share of each global batch."""

    def __init__(
        self,
        model: nn.Module,
        scheme: Scheme,
        data: TensorData,
        device: torch.device | str = "cpu",
        log_every: int = 10,
        group: Group | None = None,
        amp: str | None = None,
    ) -> None:
        self.group = group or Group(device=torch.device(device))
        self.device = self.group.device
        self.model = model.to(self.device)
        self.scheme = scheme
        self.data = data
        self.log_every = log_every
        self.local_batch = local_batch(scheme.batch, self.group.world)
        self.loss_module = LossModule(self.model, scheme, data.value_range, AMP_DTYPES[amp] if amp else None)
        self.step_module = self._data_parallel(self.loss_module) if self.group.active else self.loss_module
        self.optimizer = scheme.optimizer.build(self.model.parameters())
        # fp16 overflows where float32 does not: scale the loss up, and skip steps whose gradients overflowed.
        self.scaler = torch.amp.GradScaler(self.device.type) if amp == "fp16" else None
        self.epsilon = self.loss_module.epsilon

    @property
    def run_epsilon(self) -> float:
        """The radius the run tests and certifies at (see `LossModule.run_epsilon`)."""
        return self.loss_module.run_epsilon

    def _data_parallel(self, module: nn.Module) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(
            module,
            device_ids=[self.device.index] if self.device.type == "cuda" else None,
            # Every parameter gets a gradient in every step: each part of a goal runs the whole network,
            # concretely or abstractly, and abstract layers and DeepLoss own no parameters. So DDP need not
            # walk the autograd graph after each forward looking for unused ones.
            find_unused_parameters=False,
            **({} if self.loss_module.normalised else _no_buffer_sync()),
        )

    def loss(self, x: Tensor, y: Tensor, t: float, generator: torch.Generator) -> Tensor:
        """The scheme's loss on one batch at training time t (fractional epoch), in this process, without
        the L1 penalty of the weights (the step adds its gradient)."""
        return self.loss_module(x, y, t, generator)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint holds: the plain (unwrapped) network's state, so that a run may be resumed by
        any number of processes, and the optimizer's (and the loss scaler's, with fp16)."""
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])

    def train_epoch(
        self, epoch: int, on_progress: Callable[[Progress], None] | None = None
    ) -> dict[str, float]:
        scheme, data, group = self.scheme, self.data, self.group
        self.model.train()
        base_lr = scheme.optimizer.lr
        lr = scheme.lr.apply(self.optimizer, base_lr, epoch) if scheme.lr else base_lr
        generator = epoch_generator(scheme.seed, epoch)
        n = len(data.train_y)
        # CPU: the epoch's order from its CPU generator (the same on any device), picking from host data
        mine = shard(torch.randperm(n, generator=generator), group.rank, group.world)
        steps = math.ceil(len(mine) / self.local_batch)
        draws = GlobalDraws(generator, group.rank, group.world) if group.active else None
        transforms = data_augment(scheme)
        running = torch.zeros((), device=self.device)  # this process's sum of loss x examples
        seen = 0  # examples of all processes so far
        t = float(epoch)
        started = time.perf_counter()
        for i in range(steps):
            pick = mine[i * self.local_batch : (i + 1) * self.local_batch]
            x, y = self._batch(pick, transforms, generator, draws)
            t = epoch + seen / n
            loss = self._step(x, y, t, generator, draws)
            running += loss.detach() * len(pick)
            seen += len(pick) * group.world
            if (i + 1) % self.log_every == 0 or i + 1 == steps:
                self._progress(on_progress, running, seen, i + 1, steps, started, t)
        if scheme.precise_bn:  # every process measures the whole training set: all agree
            reestimate_statistics(self.model, data.train_x, max(scheme.batch, 100))
        # Reading the loss waits for the device: on a GPU the host runs ahead of the kernels it queued, so
        # the clock stops only once every step of the epoch has run.
        loss = float(group.sum(running)) / max(1, seen)
        seconds = time.perf_counter() - started
        # The schedules' values as the epoch's last step trained with them (at the epoch's end a step
        # function such as Until may already have moved on).
        schedules = schedule_values(scheme.goal, t)
        row = {
            "epoch": epoch + 1,
            "loss": loss,
            "lr": lr,
            "train_epsilon": self.epsilon(t),
            "schedules": schedules,
        }
        return row | {"seconds": seconds, "examples_per_s": seen / max(seconds, 1e-9)}

    def _batch(
        self, pick: Tensor, transforms: list, generator: torch.Generator, draws: GlobalDraws | None
    ) -> tuple[Tensor, Tensor]:
        """The examples `pick` of the training set on the device, augmented (with draws shared by every
        process, in a distributed run)."""
        data = self.data
        x, y = gather(data.train_x, pick, self.device), gather(data.train_y, pick, self.device)
        if draws is not None:
            draws.local = len(pick)
        with draws if draws is not None else nullcontext():
            x = augment(x, transforms, generator)
        return x, y

    def _progress(
        self, on_progress: Callable[[Progress], None] | None, running: Tensor, seen: int, step: int,
        steps: int, started: float, t: float,
    ) -> None:  # fmt: skip
        """The epoch's progress so far, to `on_progress`; every process joins the reduction (a collective),
        even those that show nothing."""
        if on_progress is None and not self.group.active:
            return
        total = self.group.sum(running)
        if on_progress is not None:
            loss_so_far = float(total) / seen  # read first: it waits for the device (see train_epoch)
            values = schedule_values(self.scheme.goal, t)
            elapsed = time.perf_counter() - started
            on_progress(Progress(step, steps, seen, elapsed, loss_so_far, self.epsilon(t), t, values))

    def _step(
        self, x: Tensor, y: Tensor, t: float, generator: torch.Generator, draws: GlobalDraws | None
    ) -> Tensor:
        """One optimizer step, and the loss it took, the L1 penalty included; under DDP the backward also
        averages the gradients over the processes (each loss is its process's mean over equally many
        examples, so the average is the global batch's mean). The L1 penalty's gradient is added after the
        backward, as weight decay is (`add_l1_gradient_`): the same on every process, it needs no
        averaging."""
        loss = self.step_module(x, y, t, generator, draws)
        self.optimizer.zero_grad(set_to_none=True)
        clip, l1 = self.scheme.grad_clip, self.scheme.l1
        if self.scaler is None:
            loss.backward()
            penalty = add_l1_gradient_(self.model, l1) if l1 > 0 else None
            if clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            self.optimizer.step()
        else:
            # GradScaler.step reads back whether any gradient overflowed: one wait per step, the price of
            # fp16 (bf16 needs no scaler).
            self.scaler.scale(loss).backward()
            if clip or l1 > 0:
                self.scaler.unscale_(self.optimizer)
            penalty = add_l1_gradient_(self.model, l1) if l1 > 0 else None
            if clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        return loss if penalty is None else loss.detach() + penalty

    def evaluate(
        self,
        epsilon: float | None = None,
        on_progress: Callable[[str, int, int], None] | None = None,
        batch: int | None = None,
    ) -> dict[str, float]:
        """Percent of test images passing each test; several processes each test a share and add up."""
        eps = self.run_epsilon if epsilon is None else epsilon
        share = evaluation_share(len(self.data.test_y), self.group.rank, self.group.world)
        x, y = self.data.test_x[share], self.data.test_y[share]
        results = evaluate(
            self.model,
            self.scheme.test,
            x,
            y,
            eps,
            self.data.value_range,
            batch or max(self.scheme.batch, 100),
            self.scheme.relu,
            on_progress,
        )
        if not self.group.active:
            return results
        # evaluate() gives percentages of this share; the counts behind them are integers, recovered exactly
        # by rounding (100 * k / n * n / 100 is within a few ulps of k).
        counts = [round(p * len(y) / 100) for p in results.values()] + [len(y)]
        totals = self.group.sum(torch.tensor(counts, dtype=torch.int64, device=self.device)).tolist()
        n = max(1, totals[-1])
        return {column: 100.0 * k / n for column, k in zip(results, totals[:-1], strict=True)}


def _no_buffer_sync() -> dict[str, bool]:
    """DDP's option not to broadcast buffers before each forward, for networks without BatchNorm: nothing
    else changes its buffers while training (Normalize's mean and std are constants). With BatchNorm, DDP
    keeps rank 0's running statistics everywhere. Newer PyTorch renames the option."""
    from torch.nn.parallel import DistributedDataParallel

    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


def data_augment(scheme: Scheme) -> list:
    return list(scheme.data.augment)
