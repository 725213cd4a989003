"""Certification of a test set image by image: an attack to falsify cheaply, then domains, cheapest first.

Each image ends in exactly one of four states, kept strictly apart:

- ``verified``: a domain proved every margin ``y_t - y_j`` positive over the clipped eps-ball (``by`` names
  the first that did; ``margin`` is its least lower bound);
- ``falsified``: a point of the ball that the network misclassifies (``by`` names what found it: the
  image itself, the attack, or branch and bound; ``margin`` is that point's least margin, <= 0). Only a
  witness counts: float32 numbers inside the ball, misclassified in exact arithmetic and by the network's
  float32 copy (`witness`); a candidate that fails is no answer, and the steps go on;
- ``unknown``: no step decided (a complete step's time limit passed: ``timed_out``; or only incomplete
  ones ran; or a search ended with nothing left to try, ``message`` says why); ``margin`` is the best
  lower bound any step found, never a point's value;
- ``error``: a step failed on the image (``message`` says how); the others go on.

Steps run on batches of the images still undecided (`Step.decide`), so a cheap domain settles most images
at batch speed and the expensive ones (branch and bound) see only the rest.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from daic.runtime.certification.attacks import Attacker
from daic.runtime.certification.witness import Misclassified, Witnesses
from daic.runtime.domains.balls import certified_balls
from daic.runtime.domains.element import margin_others
from daic.runtime.domains.rounding import outward_rounding
from daic.runtime.layers.base import placement

STATUSES = ("verified", "falsified", "unknown", "error")
CLEAN = "clean"  # what falsified a misclassified image: the image itself
# Images per batch when the cascade has a complete step: its search takes up to its timeout per image, so
# outcomes reach the record (and the progress line) every few images, and a kill loses little search.
COMPLETE_BATCH = 8
GPU_SHARE, GPU_MOST_BYTES = 4, 16 * 2**30


def memory_budget(device: torch.device, host_bytes: int) -> int:
    """Bytes one batch of a certification step may take on `device`: `host_bytes` on the CPU; on a GPU a
    quarter of the memory free when it is planned, at least `host_bytes` and at most 16 GiB (so that a few
    processes sharing a card do not take it all, and a large card plans the same batches whatever else
    holds part of it)."""
    if device.type != "cuda":
        return host_bytes
    free, _ = torch.cuda.mem_get_info(device)
    return min(GPU_MOST_BYTES, max(host_bytes, free // GPU_SHARE))


@dataclass
class Outcome:
    """What certification concluded about one image (see the module docstring)."""

    index: int
    label: int
    status: str = "unknown"
    by: str | None = None
    margin: float | None = None
    seconds: float = 0.0
    message: str | None = None
    witness: Tensor | None = None  # falsified: the point (an input of the network) that falsified it
    timed_out: bool = False  # unknown: a search stopped at its time limit (else `message` says why it ended)
    search: dict[str, object] | None = None  # a complete step's effort (`search.BranchAndBound`'s)

    def record(self) -> dict[str, object]:
        """The outcome as one JSON object (a line of `daic verify --out`)."""
        row: dict[str, object] = {"index": self.index, "label": self.label, "status": self.status}
        row |= {"domain": self.by, "margin": self.margin, "seconds": round(self.seconds, 6)}
        if self.message is not None:
            row["message"] = self.message
        if self.timed_out:
            row["timed_out"] = True
        if self.search is not None:
            row["search"] = self.search
        return row


@dataclass
class Batch:
    """The images a step sees: their inputs, labels, boxes and the outcomes to fill in.

    ``lower``/``upper`` contain each image's clipped eps-ball (bounds hold over them);
    ``inner_lower``/``inner_upper`` lie inside it (counterexamples must): the same box but where rounding
    makes them differ (see `balls`). ``attacker`` is the steps' attack on the network (`certify_batch`
    makes one if none was given; `certify` gives one for all its batches, so its float32 copy is made
    once). ``witnesses`` decides which points falsify (`witnesses_of`: a `Misclassified` where none was
    given; a property gives its own)."""

    x: Tensor
    y: Tensor
    lower: Tensor
    upper: Tensor
    outcomes: list[Outcome]
    relu: str = "hybrid"
    inner_lower: Tensor | None = None
    inner_upper: Tensor | None = None
    attacker: Attacker | None = None
    witnesses: Witnesses | None = None
    best: Tensor = field(init=False)  # the best lower bound of each image's least margin so far

    def witnesses_of(self, model: nn.Module) -> Witnesses:
        """`witnesses`, a `Misclassified` of the certifying `model` where none was given."""
        if self.witnesses is None:
            if self.attacker is None:
                self.attacker = Attacker(model)
            self.witnesses = Misclassified(model, self.attacker.float32(), self.y, self.relu)
        return self.witnesses

    def __post_init__(self) -> None:
        # CPU: each image's best margin so far, host bookkeeping read and written one image at a time
        self.best = torch.full((len(self.outcomes),), -torch.inf, dtype=torch.float64)
        if self.inner_lower is None:
            self.inner_lower, self.inner_upper = self.lower, self.upper


@contextmanager
def exact_float():
    """TF32 off for the duration (PyTorch enables it for cuDNN convolutions by default)."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


class Step:
    """One stage of the cascade: everything a cascade holds is one (an attack, a bound, a search).
    ``complete``: it decides every image it is given time for; ``verifies``: it can prove an image (an
    attack only falsifies); ``cheap``: it costs less than an attack (a cascade attacks only what its
    leading cheap steps leave: an image one of them verifies cannot be falsified)."""

    label = ""
    complete = False
    verifies = True
    cheap = False
    times_each = False  # whether `decide` adds each image's own seconds (else they share the step's)
    until = math.inf
    """A `time.perf_counter()` reading the step works no further past: a VNN-LIB property's limit covers
    the whole cascade. A search stops there; a bound that would pass it bounds what is left more loosely
    (CROWN keeps the companion domains' bounds of the neurons it has not reached)."""

    def decide(self, model: nn.Module, batch: Batch, pending: Tensor) -> None:
        """Settles what it can of the images ``pending`` (indices into the batch), in their outcomes."""
        raise NotImplementedError

    def batch_size(self, model: nn.Module, shape: tuple[int, ...], default: int) -> int:
        """Images per batch it can take (one whose memory grows with the input may take fewer)."""
        return default


def least_margins(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    """``(B,)``: ``min_j (y_t - y_j)`` of the network at the points ``x``, computed by running it."""
    with torch.no_grad():
        logits = model(x)
    rows, _ = margin_others(y, logits.shape[1], logits.dtype)
    return torch.einsum("bsc,bc->bs", rows, logits).amin(1)


class Attack(Step):
    """Projected gradient descent with random restarts (on a float32 copy of a float64 network: `Attacker`);
    an image is falsified when the network misclassifies the point found (run again on it, in the
    certifying network's precision)."""

    label = "PGD"
    verifies = False

    def __init__(self, steps: int = 40, restarts: int = 2, seed: int = 0) -> None:
        self.steps, self.restarts, self.seed = steps, restarts, seed

    def decide(self, model, batch, pending):
        generator = torch.Generator().manual_seed(self.seed)
        x = batch.attacker.pgd(batch.inner_lower[pending], batch.inner_upper[pending], batch.y[pending],
                               self.steps, generator, self.restarts)  # fmt: skip
        falsify(model, batch, pending, x, least_margins(model, x, batch.y[pending]), self.label)


def falsify(
    model: nn.Module, batch: Batch, pending: Tensor, points: Tensor, margins: Tensor, by: str
) -> None:
    """Marks falsified the images `pending` whose candidate `points` (margins at or below zero in the
    certifying `model`) lead to a witness (`Batch.witnesses`); the others stay as they were."""
    # CPU: which candidates to check, read on the host (one read for the whole batch)
    chosen = torch.tensor([k for k, margin in enumerate(margins.tolist()) if margin <= 0], dtype=torch.long)
    if len(chosen) == 0:
        return
    images = pending[chosen]
    lower, upper = batch.inner_lower[images], batch.inner_upper[images]
    candidates = points[chosen.to(points.device)].detach()
    found, ok = batch.witnesses_of(model).admit(model, candidates, images, lower, upper, batch.y[images])
    if not bool(ok.any()):
        return
    at = least_margins(model, found, batch.y[images]).clamp(max=0.0)
    for k, (i, accepted) in enumerate(zip(images.tolist(), ok.tolist(), strict=True)):
        if accepted:
            outcome = batch.outcomes[i]
            outcome.status, outcome.by, outcome.margin = "falsified", by, float(at[k])
            outcome.witness = found[k]


def cascade(methods: Sequence[Step], attack: bool = False) -> list[Step]:
    """The steps `methods` in order, with an attack when asked for or when a method is complete (branch and
    bound would otherwise search until it finds the counterexample the attack finds in a few steps): after
    the leading cheap steps, before the first that costs more than it. On MNIST ConvSmall's VNN-LIB
    properties, an attack before Box took 0.27 s of a Box-verified property's 0.43 s."""
    steps = list(methods)
    if attack or any(step.complete for step in steps):
        leading = next((k for k, step in enumerate(steps) if not step.cheap), len(steps))
        steps.insert(leading, Attack())
    return steps


def certify_batch(
    model: nn.Module, steps: Sequence[Step], batch: Batch, outward: bool = True
) -> list[Outcome]:
    """Runs the cascade on one batch: misclassified images are falsified by themselves, then each step
    sees the images still undecided. Every image's seconds are its share of each step it went through (its
    own time in a step that works image by image).
    With `outward`, bounds are rounded outward (`domains.rounding`): they hold in exact arithmetic."""
    with outward_rounding() if outward else nullcontext(), frozen(model):
        return _certify_batch(model, steps, batch)


@contextmanager
def frozen(model: nn.Module) -> Iterator[None]:
    """Within it, the model's parameters take no gradient. Certification differentiates towards slopes,
    multipliers and inputs only; a weight that takes one makes every bound carry its history back to the
    weights, and the back-substitution's own backward passes compute weight gradients nobody reads (a
    sixth of branch and bound's rounds on an MNIST ConvSmall)."""
    taking = [parameter for parameter in model.parameters() if parameter.requires_grad]
    for parameter in taking:
        parameter.requires_grad_(False)
    try:
        yield
    finally:
        for parameter in taking:
            parameter.requires_grad_(True)


def _certify_batch(model: nn.Module, steps: Sequence[Step], batch: Batch) -> list[Outcome]:
    if batch.attacker is None:
        batch.attacker = Attacker(model)
    outcomes = batch.outcomes
    started = time.perf_counter()
    margins = least_margins(model, batch.x, batch.y)
    # CPU: image numbers, read on the host; a CUDA tensor may be indexed by them as they are
    everyone = torch.arange(len(outcomes))
    _refuse_not_a_number(outcomes, margins)
    falsify(model, batch, everyone, batch.x, margins, CLEAN)
    _charge(outcomes, everyone, time.perf_counter() - started)
    for step in steps:
        # CPU: image numbers, read on the host; a CUDA tensor may be indexed by them as they are
        pending = torch.tensor([i for i, o in enumerate(outcomes) if o.status == "unknown"], dtype=torch.long)
        if len(pending) == 0:
            break
        started = time.perf_counter()
        try:
            step.decide(model, batch, pending)
        except (RuntimeError, ValueError, ArithmeticError) as exc:  # a step that cannot run on these images
            for i in pending.tolist():
                outcomes[i].status, outcomes[i].by = "error", step.label
                outcomes[i].message = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        if not step.times_each:
            _charge(outcomes, pending, time.perf_counter() - started)
    for i, outcome in enumerate(outcomes):
        if outcome.status == "unknown" and bool(torch.isfinite(batch.best[i])):
            outcome.margin = float(batch.best[i])
    return outcomes


def _refuse_not_a_number(outcomes: list[Outcome], margins: Tensor) -> None:
    """An image where the network's output is not a number (NaN weights, an overflow) is an error: it is
    neither classified nor misclassified, and no bound over its box means anything."""
    for outcome, margin in zip(outcomes, margins.tolist(), strict=True):
        if math.isnan(margin):
            outcome.status, outcome.by = "error", CLEAN
            outcome.message = "the network's output at the image is not a number (NaN): nothing to certify"


def _charge(outcomes: list[Outcome], images: Tensor, seconds: float) -> None:
    for i in images.tolist():
        outcomes[i].seconds += seconds / max(1, len(images))


def _balls(
    x: Tensor, y: Tensor, names: Sequence[int], epsilon: float, value_range: tuple[float, float], relu: str,
    attacker: Attacker,
) -> Batch:  # fmt: skip
    """The images `x` (labels `y`, named by `names`) with their clipped eps-balls, every outcome unknown."""
    lower, upper, inner_lower, inner_upper = certified_balls(x, epsilon, value_range)
    outcomes = [Outcome(name, int(label)) for name, label in zip(names, y.tolist(), strict=True)]
    return Batch(x, y, lower, upper, outcomes, relu, inner_lower, inner_upper, attacker)


def certify(
    model: nn.Module,
    steps: Sequence[Step],
    x: Tensor,
    y: Tensor,
    epsilon: float,
    value_range: tuple[float, float],
    indices: Sequence[int] | None = None,
    batch: int = 100,
    relu: str = "hybrid",
    on_outcome: Callable[[Outcome], None] | None = None,
    outward: bool = True,
) -> list[Outcome]:
    """Certifies the images ``x`` (labels ``y``) at radius `epsilon` with the cascade `steps` (each image
    first checked by running the network on it); `indices` name the images in outcomes (default 0, 1, ...).
    `model` is the certifying network (float64, see `evaluate`). Outcomes are handed to `on_outcome` as each
    batch finishes (of at most `COMPLETE_BATCH` images with a complete step). `outward`: bounds hold in
    exact arithmetic (see `certify_batch`)."""
    if not epsilon >= 0:  # an inverted box would "certify" everything
        raise ValueError(f"certify needs epsilon >= 0, got {epsilon}")
    if any(step.complete for step in steps):
        batch = min(batch, COMPLETE_BATCH)
    names = list(range(len(y))) if indices is None else list(indices)
    device, dtype = placement(model)
    attacker = Attacker(model)
    done: list[Outcome] = []
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(y), batch):
            xb = x[start : start + batch].to(device=device, dtype=dtype)
            yb, named = y[start : start + batch].to(device), names[start : start + batch]
            work = _balls(xb, yb, named, epsilon, value_range, relu, attacker)
            for outcome in certify_batch(model, steps, work, outward):
                done.append(outcome)
                if on_outcome is not None:
                    on_outcome(outcome)
    finally:
        model.train(was_training)
    return done
