"""What the benchmarks measure: the paper's networks (lowered from the stdlib `.net` files, so that the
benchmark times what `daic run` trains), their inputs, one training step per method, and the timers.

A training step is: forward (concrete logits, or bounds), the loss (cross-entropy; for the abstract methods
on the worst-case logits of the output), backward. Inputs are random images, which is all timing needs.
"""

from __future__ import annotations

import copy
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from daic.compiler.checking.network import analyze_net
from daic.compiler.lower import lower_network
from daic.dsl.parser import parse_net
from daic.runtime import AbstractContext, Box, HybridZonotope, ibp_init_, trace
from daic.runtime.certification.evaluate import Verify, evaluate
from daic.runtime.certification.verification import HBoxBound
from daic.runtime.domains import Symbolic
from daic.runtime.layers.normalization import batch_norms, fixed_statistics, measure
from daic.runtime.training.parts import FOLDED_INTERVALS, CROWNIBPReading, Reading

Step = Callable[[], None]


@dataclass(frozen=True)
class Workload:
    """A network of the paper at the batch size it was trained with, and the epsilon of its data set."""

    net_file: str
    shape: tuple[int, int, int]
    batch: int
    epsilon: float
    epoch_images: int  # training images per epoch of its data set


MNIST, CIFAR = ((1, 28, 28), 0.1, 60_000), ((3, 32, 32), 8 / 255, 50_000)
WORKLOADS: dict[str, Workload] = {
    "convsmall": Workload("mnist_convsmall.net", MNIST[0], 100, MNIST[1], MNIST[2]),
    "convbig": Workload("cifar10_convbig.net", CIFAR[0], 50, CIFAR[1], CIFAR[2]),
    "resnettiny": Workload("resnettiny_none.net", CIFAR[0], 50, CIFAR[1], CIFAR[2]),
    "resnettiny_fewcombo": Workload("resnettiny_fewcombo.net", CIFAR[0], 50, CIFAR[1], CIFAR[2]),
    "resnet18": Workload("resnet18_none.net", CIFAR[0], 50, CIFAR[1], CIFAR[2]),
    # CNN7 with BatchNorm, the network of the methods since 2021, at a quarter of CTBench's batch of 256:
    # one SABR step at 256 takes tens of seconds on two cores, and the ratios are what the table compares.
    "cnn7": Workload("mnist_cnn7.net", MNIST[0], 64, MNIST[1], MNIST[2]),
}
MAIN_NETS = ("convsmall", "convbig", "resnettiny", "cnn7")
"""The main table's networks: those of the targets against auto_LiRPA's steps (the paper's ConvSmall,
ConvBig and ResNet-Tiny, and CNN7, the network of the certified-training methods since 2021)."""

# glibc gives every freed block above 128 KiB back to the kernel, so each step re-faults all its fresh
# tensors (PyTorch's CPU allocator keeps no cache; the CUDA one does). These settings keep freed memory in
# the process. They apply to every method alike; glibc reads them at start-up only.
MALLOC_TUNING = {
    "MALLOC_MMAP_THRESHOLD_": str(32 * 2**20),
    "MALLOC_TRIM_THRESHOLD_": str(16 * 2**30),
    "MALLOC_TOP_PAD_": str(2**30),
}


def reexec_with_malloc_tuning() -> None:
    """Restarts this script under MALLOC_TUNING, unless it runs under it already."""
    if any(os.environ.get(k) != v for k, v in MALLOC_TUNING.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **MALLOC_TUNING})


def net_text(name: str) -> str:
    return (resources.files("daic.stdlib") / "nets" / WORKLOADS[name].net_file).read_text()


def build(name: str, text: str | None = None, seed: int = 0) -> nn.Module:
    """The network `name` (or the given `.net` text at its input shape), lowered and IBP-initialised."""
    work = WORKLOADS[name]
    parsed = parse_net(text if text is not None else net_text(name))
    model = lower_network(analyze_net(parsed.tree, work.shape, 10))
    return ibp_init_(model, seed=seed)


def inputs(name: str, batch: int | None = None, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Random images in [0, 1] and random labels."""
    work = WORKLOADS[name]
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand((batch or work.batch, *work.shape), generator=generator)
    return x, torch.randint(0, 10, (len(x),), generator=generator)


def daic_steps(model: nn.Module, x: Tensor, y: Tensor, eps: float) -> dict[str, Step]:
    """The concrete step and daic's abstract training steps: Box (the paper's reading, the worst-case
    logits), IBP (the interval pass with the margins folded into the last layer, `Box(folded=True)`: the
    peers' IBP), the hybrid zonotope started from the input box with the network's abstract layers in
    training mode, and CROWN-IBP (the `CROWNIBP` goal at beta = 1: interval bounds, then the margins
    back-substituted once; fused: one row, auto_LiRPA's loss fusion). With BatchNorm an abstract step
    first fixes the clean batch's statistics, as `daic run`'s trainer does."""
    lower, upper = (x - eps).clamp(0, 1), (x + eps).clamp(0, 1)
    normalised = bool(batch_norms(model))

    def concrete() -> None:
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()

    def abstract(make: Callable[[Tensor, Tensor], object], reading: Reading | None = None) -> Step:
        read = reading or Reading()

        def step() -> None:
            model.zero_grad(set_to_none=True)
            ctx = AbstractContext(training=True, t=0.0)
            with fixed_statistics(model):
                if normalised:
                    measure(model, x, update=True)
                run = trace(model, make(lower, upper), ctx)
                loss = read.loss(run.output, y).mean()
                for extra in run.step_losses(ctx):
                    loss = loss + extra
            loss.backward()

        return step

    return {
        "concrete": concrete,
        "daic Box": abstract(Box.from_bounds),
        "daic IBP": abstract(Symbolic.input, FOLDED_INTERVALS),
        "daic HZ": abstract(HybridZonotope.from_bounds),
        "daic CROWN-IBP": abstract(Symbolic.input, CROWNIBPReading(1.0)),
        "daic CROWN-IBP fused": abstract(Symbolic.input, CROWNIBPReading(1.0, fused=True)),
    }


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(steps: dict[str, Step], reps: int, device: torch.device) -> dict[str, float]:
    """Median seconds per call of each step after one warm-up call each. The steps are interleaved within
    each repetition, so that drifting machine load falls on all of them alike."""
    for step in steps.values():
        step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(reps):
        for name, step in steps.items():
            sync(device)
            start = time.perf_counter()
            step()
            sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def hbox_certification(name: str, images: int, reps: int, device: torch.device) -> dict[str, float]:
    """Seconds per image of HBox certification (`evaluate` with `Verify(HBoxBound())`: the exact input
    zonotope, one correlated term per input dimension, in float64) and of one batch-1 concrete forward of
    the float32 network without gradients, timed in alternation."""
    model = build(name).to(device).eval()
    float64 = copy.deepcopy(model).double()  # the copy evaluate() makes; made once, outside the timing
    x, y = (t.to(device) for t in inputs(name, images, seed=1))
    eps = WORKLOADS[name].epsilon

    def forward() -> float:
        with torch.no_grad():
            sync(device)
            start = time.perf_counter()
            model(x[:1])
            sync(device)
        return time.perf_counter() - start

    def certify() -> float:
        sync(device)
        start = time.perf_counter()
        evaluate(float64, [Verify(HBoxBound())], x, y, eps, (0.0, 1.0), batch=images)
        sync(device)
        return (time.perf_counter() - start) / images

    with torch.no_grad():  # warm-up of the float64 kernels and the allocator, cheaper than a certification
        float64(x.double())
    forwards = [forward() for _ in range(20)]
    certifications = []
    for _ in range(reps):
        certifications.append(certify())
        forwards += [forward() for _ in range(20)]
    batch = Verify(HBoxBound()).batch_size(float64, WORKLOADS[name].shape, images)
    per_image, fwd = statistics.median(certifications), statistics.median(forwards)
    return {"per_image_s": per_image, "forward_s": fwd, "ratio": per_image / fwd, "batch": batch}


def hbox_peak(name: str, images: int, device: torch.device) -> dict[str, int]:
    """Peak memory of HBox certification of `images` random images as `evaluate` runs it (in batches that
    its planner sizes to a 2 GiB budget), over the float64 network and the images."""
    float64 = build(name).to(device).eval().double()
    x, y = (t.to(device) for t in inputs(name, images, seed=1))
    eps = WORKLOADS[name].epsilon

    def make() -> Step:
        return lambda: evaluate(float64, [Verify(HBoxBound())], x, y, eps, (0.0, 1.0), batch=images)

    batch = Verify(HBoxBound()).batch_size(float64, WORKLOADS[name].shape, images)
    return {"peak_bytes": peak_bytes(make, device, calls=1), "batch": batch}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} is not in /proc/self/status")


def peak_bytes(make_step: Callable[[], Step], device: torch.device, calls: int = 2) -> int:
    """How far making a step and calling it `calls` times raise the memory in use: what a method needs on
    top of the network and the batch, its own structures (auto_LiRPA's bounded module) and lazily made
    kernels included.

    On the CPU (Linux), the resident set: writing 5 to clear_refs resets its peak (VmHWM) to the current
    size. Meant for a fresh process in which glibc returns freed tensors to the kernel at once, so that
    the resident set tracks live tensors. On CUDA, the caching allocator's own count of allocated bytes."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    else:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        before = _status_kib("VmRSS") * 1024
    step = make_step()
    for _ in range(calls):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    return _status_kib("VmHWM") * 1024 - before
