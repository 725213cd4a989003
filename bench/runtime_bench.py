"""Speed and memory of one training step: concrete vs Box vs hybrid zonotope, on the paper's networks.

    python bench/runtime_bench.py [--device cuda] [--reps 7] [--nets convsmall,convbig,...]

Per network and mode, a step is: forward, the loss (cross-entropy; for Box/HZ on the worst-case logits of
the interval concretization), backward. Modes are interleaved within each repetition (so that drift in
machine load hits them alike) and the median is printed, with the ratio to the concrete step. The ratio's
denominator, ``concrete``, is the plain network (an ordinary ``nn.Module``, NCHW). For reference,
``concrete_cl`` is the same network and input converted to channels-last, the layout PyTorch's CPU
convolutions compute in (the abstract passes use it for their maps on the CPU, see ``layers.affine``); it is
not a denominator.

CPU allocations: PyTorch's CPU allocator has no cache, and glibc returns every large block to the kernel on
free, so each step pays page faults for all its fresh tensors (the GPU's caching allocator does not). On the
CPU the benchmark therefore re-runs itself with glibc told to keep freed memory (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_``; ``--no-malloc-tuning`` turns this off). It applies to all
modes alike; without it the abstract modes, which allocate more, look up to 1.5x slower relative to concrete.

HBox certification (``--hbox-nets``): seconds per image of `evaluate` with ``Verify(HBoxDomain())`` (the
exact input zonotope, one correlated term per input dimension, on the float64 copy evaluate makes), and the
ratio to one batch-1 concrete forward of the float32 network without gradients, timed around each
certification run (interleaved as well). The images are random, like the training inputs.

Peak memory: on CUDA, ``torch.cuda.max_memory_allocated`` around each step (in the same run). On the CPU
there is no allocator statistic, so each (network, mode) runs two steps in a fresh subprocess and reports
the growth of the peak resident set (VmHWM) over the resident set just before the first step.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from daic.runtime import (
    AbstractContext,
    Box,
    Concretize,
    Conv2D,
    CorrelateAll,
    CorrelateMax,
    DecorrelateMin,
    HybridZonotope,
    Linear,
    Normalize,
    ReLU,
    Residual,
    Sequential,
    ibp_init_,
)
from daic.runtime.evaluate import HBoxDomain, Verify, evaluate

CIFAR_MEAN, CIFAR_STD = [0.4914, 0.4822, 0.4465], [0.2023, 0.1994, 0.201]


def conv_small() -> Sequential:
    return Sequential(
        Normalize([0.1307], [0.3081]),
        Conv2D(1, 16, 4, stride=2),
        ReLU(),
        Conv2D(16, 32, 4, stride=2),
        ReLU(),
        Linear(32 * 5 * 5, 100),
        ReLU(),
        CorrelateAll(only_train=False),
        Linear(100, 10),
    )


def conv_big() -> Sequential:
    return Sequential(
        Normalize(CIFAR_MEAN, CIFAR_STD),
        Conv2D(3, 32, 3, stride=1, padding=1),
        ReLU(),
        Conv2D(32, 32, 4, stride=2, padding=1),
        ReLU(),
        Conv2D(32, 64, 3, stride=1, padding=1),
        ReLU(),
        Conv2D(64, 64, 4, stride=2, padding=1),
        ReLU(),
        Linear(64 * 8 * 8, 512),
        ReLU(),
        Linear(512, 512),
        ReLU(),
        CorrelateAll(only_train=False),
        Linear(512, 10),
    )


def wide_block(cin: int, cout: int) -> Residual:
    """ParNet1: a 1x1 conv; ParNet2: 3x3 conv, ReLU, 3x3 conv (resnettiny_*.net)."""
    return Residual(
        [Conv2D(cin, cout, 1)],
        [Conv2D(cin, cout, 3, padding=1), ReLU(), Conv2D(cout, cout, 3, padding=1)],
    )


def resnet_tiny(few_combo: bool) -> Sequential:
    """ResNet-Tiny as in resnettiny_none.net / resnettiny_fewcombo.net."""
    layers: list[torch.nn.Module] = [Normalize(CIFAR_MEAN, CIFAR_STD)]
    if few_combo:
        layers.append(CorrelateMax(32, only_train=True))
    layers += [Conv2D(3, 16, 3, padding=1), ReLU()]
    if few_combo:
        layers.append(DecorrelateMin(8, num_to_keep=True, only_train=True))
    layers += [wide_block(16, 16), ReLU()]
    if few_combo:
        layers.append(DecorrelateMin(4, num_to_keep=True, only_train=True))
    layers += [wide_block(16, 32), ReLU()]
    if few_combo:
        layers.append(Concretize(only_train=True))
    for _ in range(3):
        layers += [wide_block(32, 32), ReLU()]
    if few_combo:
        layers.append(CorrelateMax(10, only_train=True))
    layers += [Linear(32 * 32 * 32, 500), ReLU(), CorrelateAll(only_train=False), Linear(500, 10)]
    return Sequential(*layers)


NETS: dict[str, tuple[Callable[[], Sequential], tuple[int, int, int], int, float]] = {
    # name: (builder, input shape, batch, epsilon)
    "convsmall": (conv_small, (1, 28, 28), 100, 0.1),
    "convbig": (conv_big, (3, 32, 32), 50, 8 / 255),
    "resnettiny": (lambda: resnet_tiny(False), (3, 32, 32), 50, 8 / 255),
    "resnettiny_fewcombo": (lambda: resnet_tiny(True), (3, 32, 32), 50, 8 / 255),
}
MODES = ("concrete", "concrete_cl", "box", "hz")


def worst_case_loss(lower: torch.Tensor, upper: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the logits most adverse to the target within the bounds."""
    is_target = F.one_hot(target, lower.shape[1]).bool()
    return F.cross_entropy(torch.where(is_target, lower, upper), target)


def make_step(name: str, device: str) -> tuple[Callable[[str], None], Sequential]:
    builder, shape, batch, eps = NETS[name]
    net = ibp_init_(builder(), seed=0).to(device)
    g = torch.Generator().manual_seed(0)
    x = torch.rand((batch, *shape), generator=g).to(device)
    target = torch.randint(0, 10, (batch,), generator=g).to(device)
    lower, upper = (x - eps).clamp(0, 1), (x + eps).clamp(0, 1)
    net_cl = copy.deepcopy(net).to(memory_format=torch.channels_last)
    x_cl = x.contiguous(memory_format=torch.channels_last)

    def step(mode: str) -> None:
        net.zero_grad(set_to_none=True)
        net_cl.zero_grad(set_to_none=True)
        if mode == "concrete":
            loss = F.cross_entropy(net(x), target)
        elif mode == "concrete_cl":
            loss = F.cross_entropy(net_cl(x_cl), target)
        else:
            ctx = AbstractContext(training=True, t=0.0, relu="hybrid")
            value = (
                Box.from_bounds(lower, upper) if mode == "box" else HybridZonotope.from_bounds(lower, upper)
            )
            out = net.abstract(value, ctx)
            loss = worst_case_loss(*out.bounds(), target)
            for extra in ctx.losses:
                loss = loss + extra
        loss.backward()

    return step, net


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def cpu_peak_child(name: str, mode: str) -> None:
    """Runs in a fresh process: prints the peak RSS growth (bytes) of two steps."""
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    step, _ = make_step(name, "cpu")
    before = rss_kib("VmRSS")
    step(mode)
    step(mode)
    print(json.dumps({"peak_bytes": (rss_kib("VmHWM") - before) * 1024}))


MALLOC_TUNING = {
    "MALLOC_MMAP_THRESHOLD_": str(32 * 2**20),
    "MALLOC_TRIM_THRESHOLD_": str(16 * 2**30),
    "MALLOC_TOP_PAD_": str(2**30),
}


def cpu_peak(name: str, mode: str, threads: int) -> int:
    # Without the malloc tuning: freed blocks go back to the kernel, so VmHWM tracks live tensors.
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_TUNING}
    env["BENCH_THREADS"] = str(threads)
    out = subprocess.run(
        [sys.executable, __file__, "--peak-child", f"{name}:{mode}"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return int(json.loads(out.stdout.strip().splitlines()[-1])["peak_bytes"])


def bench(name: str, device: str, reps: int, threads: int) -> dict[str, dict[str, float]]:
    step, _ = make_step(name, device)
    times: dict[str, list[float]] = {m: [] for m in MODES}
    peaks: dict[str, int] = dict.fromkeys(MODES, 0)
    for mode in MODES:  # warm-up: allocator, kernels, lazy init
        step(mode)
    sync(device)
    for _ in range(reps):
        for mode in MODES:
            if device.startswith("cuda"):
                torch.cuda.reset_peak_memory_stats()
            sync(device)
            start = time.perf_counter()
            step(mode)
            sync(device)
            times[mode].append(time.perf_counter() - start)
            if device.startswith("cuda"):
                peaks[mode] = max(peaks[mode], torch.cuda.max_memory_allocated())
    if not device.startswith("cuda"):
        peaks = {mode: cpu_peak(name, mode, threads) for mode in MODES}
    base = statistics.median(times["concrete"])
    return {
        mode: {
            "median_s": statistics.median(times[mode]),
            "ratio": statistics.median(times[mode]) / base,
            "peak_bytes": float(peaks[mode]),
        }
        for mode in MODES
    }


def bench_hbox(name: str, device: str, reps: int, images: int) -> dict[str, float]:
    """Seconds per image of HBox certification, and the ratio to one batch-1 concrete forward."""
    builder, shape, _, eps = NETS[name]
    net = ibp_init_(builder(), seed=0).to(device).eval()
    exact = copy.deepcopy(net).double()  # what evaluate() verifies on; made once, outside the timing
    g = torch.Generator().manual_seed(0)
    x = torch.rand((images, *shape), generator=g).to(device)
    y = torch.randint(0, 10, (images,), generator=g).to(device)
    one = x[:1]

    def concrete_forward() -> float:
        with torch.no_grad():
            sync(device)
            start = time.perf_counter()
            net(one)
            sync(device)
        return time.perf_counter() - start

    def certify() -> float:
        sync(device)
        start = time.perf_counter()
        evaluate(exact, [Verify(HBoxDomain())], x, y, eps, (0.0, 1.0), batch=images)
        sync(device)
        return (time.perf_counter() - start) / images

    for _ in range(5):
        concrete_forward()
    certify()  # warm-up
    forward_times: list[float] = []
    certify_times: list[float] = []
    for _ in range(reps):
        forward_times += [concrete_forward() for _ in range(20)]
        certify_times.append(certify())
    forward_times += [concrete_forward() for _ in range(20)]
    per_image, forward = statistics.median(certify_times), statistics.median(forward_times)
    batch = Verify(HBoxDomain()).batch_size(exact, shape, images)
    return {"per_image_s": per_image, "forward_s": forward, "ratio": per_image / forward, "batch": batch}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--nets", default=",".join(NETS))
    parser.add_argument("--hbox-nets", default="convbig,resnettiny", help="HBox certification; '' skips")
    parser.add_argument("--hbox-images", type=int, default=4, help="images per certification run")
    parser.add_argument("--hbox-reps", type=int, default=3)
    parser.add_argument("--no-malloc-tuning", action="store_true", help="CPU: keep glibc's defaults")
    parser.add_argument("--peak-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak_child:
        name, mode = args.peak_child.split(":")
        cpu_peak_child(name, mode)
        return
    tuned = all(os.environ.get(k) == v for k, v in MALLOC_TUNING.items())
    if args.device == "cpu" and not args.no_malloc_tuning and not tuned:
        # glibc reads these only at start-up, hence the re-exec.
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **MALLOC_TUNING})
    torch.set_num_threads(args.threads)
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"cpu x{args.threads}"
    allocator = "glibc keeps freed memory" if tuned else "glibc defaults"
    if args.device != "cpu":
        allocator = "caching allocator"
    print(f"device: {device_name}; torch {torch.__version__}; {allocator}")
    print(f"{args.reps} interleaved repetitions per mode, median step time")
    memory = "peak allocated" if args.device.startswith("cuda") else "peak RSS growth"
    print(f"{'network':<22}{'mode':<10}{'step ms':>10}{'x concrete':>12}{memory:>18}")
    for name in filter(None, args.nets.split(",")):
        results = bench(name, args.device, args.reps, args.threads)
        for mode, r in results.items():
            print(
                f"{name:<22}{mode:<10}{r['median_s'] * 1e3:>10.1f}{r['ratio']:>12.2f}"
                f"{r['peak_bytes'] / 2**20:>15.0f} MiB"
            )
        sys.stdout.flush()
    hbox_nets = [n for n in args.hbox_nets.split(",") if n]
    if hbox_nets:
        runs = f"{args.hbox_images} random images per run, median of {args.hbox_reps} runs"
        print(f"\nHBox certification (float64), {runs}")
        header = f"{'network':<22}{'s/image':>10}{'images/s':>10}{'batch-1 fwd ms':>16}{'x fwd':>10}"
        print(f"{header}{'batch':>7}")
    for name in hbox_nets:
        r = bench_hbox(name, args.device, args.hbox_reps, args.hbox_images)
        print(
            f"{name:<22}{r['per_image_s']:>10.3f}{1 / r['per_image_s']:>10.2f}{r['forward_s'] * 1e3:>16.2f}"
            f"{r['ratio']:>10.0f}{r['batch']:>7}"
        )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
