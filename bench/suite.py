"""daic's speed and memory against the plain network, against today's peers (auto_LiRPA 0.7 and CTRAIN
0.6, each handed the network as plain `torch.nn` modules), and as the work grows: one command, every figure
measured in the same run, printed as Markdown tables (bench/README.md holds them).

    bench/run.sh                      # makes the peers' environment once, then runs this script in it
    python bench/suite.py [--device cuda] [--reps 5] [--nets convsmall,convbig] [--sections main,hbox]

Sections (`--sections`; all by default, paper only on a GPU):
- main: per network, at the paper's batch size, the median time of a training step (forward, loss,
  backward) of the plain network, of daic's Box (the paper's reading), IBP (folded, the peers'), hybrid
  zonotope (HZ) and CROWN-IBP steps, and of auto_LiRPA's IBP, CROWN-IBP and loss-fused CROWN-IBP steps,
  interleaved within each repetition; the peak memory of each step; the ratios.
- trainer: daic's `Trainer` against CTRAIN's IBP trainer, seconds per batch on the same network, weights
  and batches (see `ctrain.py`).
- hbox: HBox certification (the exact input zonotope, float64) in images/s, against a batch-1 forward,
  and its peak memory over a set of images larger than its batches.
- crown: certification by CROWN and alpha-CROWN against auto_LiRPA's 'backward' and 'CROWN-Optimized' on
  the same images (see `crown.py`), and the peak memory of CROWN on one ResNet-Tiny image.
- processes: seconds per epoch of `Trainer` with the Box goal in 1 and 2 data-parallel processes (torchrun,
  gloo on the CPU, NCCL on GPUs), the same global batch, on as many cores (or GPUs) in all.
- scaling: seconds per epoch against the batch size (ResNet-Tiny FewCombo), and against the number k of
  correlated error terms made at the input by CorrMaxK (ConvBig), from the median step.
- methods: per network (ConvSmall, and CNN7 with BatchNorm), the step of each certified-training method
  (IBP, CROWN-IBP, SABR, MTL-IBP, CC-IBP, Exp-IBP, TAPS) as `daic run` takes it, from its goal expression,
  against the concrete step and the IBP step, and with the cost of its attack's search taken out (see
  `methods.py`).
- paper (by default on GPUs only): the paper's seconds per epoch of its schemes, trained as `daic run`
  trains them, and HBox certification of a 10,000-image test set, next to the paper's figures and the
  GPU targets (about ten times faster; see `paper.py`).

Without a peer importable its rows say why and everything else runs. On the CPU, timings run under glibc
settings that keep freed memory (see `workloads.MALLOC_TUNING`), and peak memory is measured in a fresh
process where glibc returns freed tensors at once, as the growth of the resident set during one step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from daic.runtime import native

sys.path.insert(0, str(Path(__file__).resolve().parent))

import crown as C
import ctrain
import lirpa
import methods as M
import paper
import workloads as W

SECTIONS = ("main", "trainer", "methods", "hbox", "crown", "processes", "scaling", "paper")
CPU_SECTIONS = SECTIONS[:-1]
LIRPA = ("LiRPA IBP", "LiRPA CROWN-IBP", "LiRPA CROWN-IBP fused")
CROWN_STEPS = ("daic CROWN-IBP", "daic CROWN-IBP fused", "LiRPA CROWN-IBP", "LiRPA CROWN-IBP fused")
DAIC_STEPS = ("concrete", "daic Box", "daic IBP", "daic HZ", "daic CROWN-IBP", "daic CROWN-IBP fused")


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def show(title: str, header: list[str], rows: list[list[str]]) -> None:
    print(f"\n### {title}\n\n{table(header, rows)}", flush=True)


def network_and_batch(name: str, device: torch.device, text: str | None = None, batch: int | None = None):
    """The network (or `text` at its input shape) and a batch of its inputs, on `device`."""
    model = W.build(name, text).to(device)
    x, y = (t.to(device) for t in W.inputs(name, batch))
    return model, x, y


def method_steps(model, x, y, eps: float, methods: set[str]) -> dict[str, W.Step]:
    """The training steps of `methods` on one network and batch (auto_LiRPA's only if asked for)."""
    steps = W.daic_steps(model, x, y, eps)
    if methods & set(LIRPA):
        steps |= lirpa.steps(model, x, y, eps)
    return {method: step for method, step in steps.items() if method in methods}


# --- peak memory --------------------------------------------------------------------------------------


def peak_child(name: str, method: str, device: torch.device) -> None:
    """In a fresh process (see `peak`): the peak memory of one method's two first steps, as JSON."""
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    model, x, y = network_and_batch(name, device)
    eps = W.WORKLOADS[name].epsilon
    print(
        json.dumps(
            {"peak_bytes": W.peak_bytes(lambda: method_steps(model, x, y, eps, {method})[method], device)}
        )
    )


def peak(name: str, method: str, device: torch.device, threads: int) -> int:
    """Bytes of peak memory one step of `method` needs, measured in a fresh process: nothing left over
    from other steps (auto_LiRPA keeps its last bounds in its modules) may count or hide."""
    return in_fresh_process(["--peak-child", f"{name}:{method}"], device, threads)["peak_bytes"]


def in_fresh_process(child: list[str], device: torch.device, threads: int) -> dict:
    """What a child of this script (`child`: its option and argument) prints as JSON, run in a fresh
    process with glibc set to return freed memory at once, so that the resident set tracks live tensors."""
    env = {k: v for k, v in os.environ.items() if k not in W.MALLOC_TUNING}
    # glibc's mmap threshold rises after the first large free, and freed tensors stay resident after that;
    # fixed at 128 KiB it stays there, and the resident set tracks live tensors.
    env |= {
        "MALLOC_MMAP_THRESHOLD_": "131072",
        "MALLOC_TRIM_THRESHOLD_": "131072",
        "BENCH_THREADS": str(threads),
    }
    command = [sys.executable, __file__, "--device", str(device), *child]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"measuring the peak memory of {' '.join(child)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- sections -------------------------------------------------------------------------------------------


def main_section(
    nets: list[str], device: torch.device, reps: int, crown_reps: int, threads: int, peer: str | None
) -> None:
    """`peer`: why auto_LiRPA's rows are empty, or None when they are measured."""
    rows, ratios = [], []
    for name in nets:
        methods = {*DAIC_STEPS, *(LIRPA if peer is None else ())}
        steps = method_steps(*network_and_batch(name, device), W.WORKLOADS[name].epsilon, methods)
        seconds, relative = step_seconds(steps, reps, crown_reps, device)
        del steps
        peaks = {method: peak(name, method, device, threads) for method in seconds}
        batch = str(W.WORKLOADS[name].batch)
        for method, s in seconds.items():
            rows.append([name, batch, method, f"{s * 1e3:.1f}", f"{relative[method]:.2f}",
                         f"{peaks[method] / 2**20:.0f}"])  # fmt: skip
        if peer is not None:
            rows += [[name, batch, method, peer, "", ""] for method in LIRPA]
        ratios.append([name, *ratio_cells(seconds, relative)])
    memory = "peak allocated MiB" if device.type == "cuda" else "peak RSS growth MiB"
    show(
        f"Training step, median of {reps} interleaved repetitions ({crown_reps} for CROWN-IBP, in a round of"
        " its own with the concrete step)",
        ["network", "batch", "method", "ms", "x concrete", memory],
        rows,
    )
    show(
        "Ratios (same run): daic's IBP and fused CROWN-IBP against the peer's, and each step against the"
        " concrete one",
        ["network", "daic IBP / LiRPA IBP", "daic Box / LiRPA IBP", "daic fused / LiRPA fused",
         "daic CROWN-IBP / LiRPA CROWN-IBP", "daic IBP / concrete", "daic Box / concrete",
         "daic HZ / concrete", "LiRPA IBP / concrete", "daic fused / concrete", "LiRPA fused / concrete"],
        ratios,
    )  # fmt: skip


def step_seconds(
    steps: dict[str, W.Step], reps: int, crown_reps: int, device: torch.device
) -> tuple[dict[str, float], dict[str, float]]:
    """Each step's median seconds, and its ratio to the concrete step of its round. CROWN-IBP is 5-25x
    slower: both tools' CROWN-IBP steps get their own, shorter round, against the concrete step again, so
    that the round of the others stays short enough for many repetitions."""
    crown_steps = {m: steps.pop(m) for m in CROWN_STEPS if m in steps}
    seconds = W.median_seconds(steps, reps, device)
    relative = {method: s / seconds["concrete"] for method, s in seconds.items()}
    crown = W.median_seconds({"concrete": steps["concrete"], **crown_steps}, crown_reps, device)
    for method in crown_steps:
        seconds[method] = crown[method]
        relative[method] = crown[method] / crown["concrete"]
    return seconds, relative


def ratio_cells(seconds: dict[str, float], relative: dict[str, float]) -> list[str]:
    """The ratios table's cells of one network ("-" where the peer's step was not measured)."""

    def ratio(ours: str, theirs: str) -> str:
        return f"{relative[ours] / relative[theirs]:.2f}" if theirs in relative else "-"

    def against_concrete(method: str) -> str:
        return f"{relative[method]:.2f}" if method in relative else "-"

    return [
        ratio("daic IBP", "LiRPA IBP"),
        ratio("daic Box", "LiRPA IBP"),
        ratio("daic CROWN-IBP fused", "LiRPA CROWN-IBP fused"),
        ratio("daic CROWN-IBP", "LiRPA CROWN-IBP"),
        *(against_concrete(m) for m in ("daic IBP", "daic Box", "daic HZ", "LiRPA IBP",
                                         "daic CROWN-IBP fused", "LiRPA CROWN-IBP fused")),
    ]  # fmt: skip


TRAINER_BATCH, TRAINER_EPS = 50, 0.3
"""The trainers' setting: CNN7 for MNIST at batch 50 and eps 0.3 after the ramp (the peers' comparison of
the issue that asked for it); other networks alike."""


def trainer_section(nets: list[str], device: torch.device, batches: int, reps: int, peer: str | None) -> None:
    """daic's Trainer against CTRAIN's IBP trainer, an epoch of `batches` batches each in turn (`peer`:
    why CTRAIN's column is empty, or None)."""
    rows, batch, eps = [], TRAINER_BATCH, TRAINER_EPS
    for name in nets:
        x, y = (t.to(device) for t in W.inputs(name, batch * batches))
        if peer is None:
            epochs = ctrain.epochs(W.build(name).to(device), x, y, eps, batch)
            for epoch in epochs.values():
                epoch()  # each once untimed (allocator, oneDNN's kernels)
            seconds = {k: [] for k in epochs}
            for _ in range(reps):
                for method, epoch in epochs.items():
                    seconds[method].append(epoch())
            ours, theirs = (sorted(v)[len(v) // 2] for v in seconds.values())
            rows.append(
                [name, str(batch), f"{eps:g}", f"{ours:.3f}", f"{theirs:.3f}", f"{ours / theirs:.2f}"]
            )
        else:
            rows.append([name, str(batch), f"{eps:g}", "-", peer, "-"])
    show(
        "Training: daic's Trainer (Box(folded=True)) against CTRAIN's ShiIBPModelWrapper, IBP after the"
        f" ramp, seconds per batch, median of {reps} interleaved epochs of {batches} batches",
        ["network", "batch", "eps", "daic s/batch", "CTRAIN s/batch", "daic / CTRAIN"],
        rows,
    )


def methods_section(nets: list[str], device: torch.device, reps: int) -> None:
    rows = []
    for name in nets:
        rows += M.rows(name, W.median_seconds(M.steps(name, device), reps, device))
    show(
        f"Certified-training methods: one step as `daic run` takes it, median of {reps} interleaved"
        " repetitions",
        ["network", "batch", "method", "goal", "ms", "x concrete", "x IBP", "x IBP, search aside"],
        rows,
    )


def hbox_section(
    nets: list[str], device: torch.device, images: int, reps: int, peak_nets: list[str], peak_images: int,
    threads: int,
) -> None:  # fmt: skip
    rows = []
    for name in nets:
        r = W.hbox_certification(name, images, reps, device)
        rows.append(
            [
                name,
                f"{1 / r['per_image_s']:.2f}",
                f"{r['per_image_s']:.3f}",
                f"{r['forward_s'] * 1e3:.2f}",
                f"{r['ratio']:.0f}",
                str(r["batch"]),
            ]
        )
    show(
        f"HBox certification (float64), {images} random images per run, median of {reps} runs",
        ["network", "images/s", "s/image", "batch-1 forward ms", "HBox / forward", "images per batch"],
        rows,
    )
    peaks = []
    for name in peak_nets:
        r = in_fresh_process(["--hbox-peak-child", f"{name}:{peak_images}"], device, threads)
        peaks.append([name, str(peak_images), str(r["batch"]), f"{r['peak_bytes'] / 2**20:.0f}"])
    memory = "peak allocated MiB" if device.type == "cuda" else "peak RSS growth MiB"
    show(
        f"HBox certification's peak memory, {peak_images} random images in batches planned for 2 GiB",
        ["network", "images", "images per batch", memory],
        peaks,
    )


CROWN_EPS = 0.004
"""The radius at which the initialised networks are certified: at the paper's radii nearly every neuron of
a network at its initialisation is unstable (a trained one has few), and full CROWN of one ResNet-Tiny
image then takes half an hour here."""


def crown_section(
    nets: list[str], images: int, reps: int, peer: str | None, peak_net: str, train_epochs: int,
    trained: list[C.Case], no_alpha: list[str],
) -> None:  # fmt: skip
    """`trained`: checkpoints of `daic run` with their images (`--crown-trained`), certified beside the
    digits network and the initialised ones; alpha-CROWN on the trained ones (on an initialised network it
    certifies nothing either way, and the peer's takes minutes per image there)."""
    cases = [C.trained_digits(train_epochs), *trained]
    cases += [C.random_case(name, images, CROWN_EPS) for name in nets]
    rows, alpha_rows = [], []
    for i, case in enumerate(cases):
        r = C.compare(case, min(images, len(case.x)), reps, peer is None)
        rows.append(crown_row(case.name, r))
        if i <= len(trained) and len(r["open"]) and not any(n in case.name for n in no_alpha):
            alpha_rows.append(alpha_row(C.compare_alpha(case, r["open"], peer is None)))
    show(
        f"CROWN certification, float64, the same images for both, median of {reps} runs",
        ["network", "images", "daic images/s", "LiRPA 'backward' images/s", "daic / LiRPA time",
         "bounds, daic - LiRPA", "daic certified", "LiRPA certified", "daic default images/s",
         "daic default certified"],
        rows,
    )  # fmt: skip
    show(
        "alpha-CROWN, 20 steps at rate 0.5, on the images daic's CROWN leaves open: daic's AlphaCROWN"
        ' (layers "output" and "all") against the peer\'s CROWN-Optimized; certified / summed margin bound /'
        " seconds",
        ["network", "images", 'daic "output"', 'daic "all"', "LiRPA CROWN-Optimized"],
        alpha_rows,
    )
    result = in_fresh_process(["--crown-peak-child", peak_net], torch.device("cpu"), os.cpu_count() or 1)
    show(
        f"Full CROWN of one {peak_net} image (float64, initialised, eps {CROWN_EPS}): peak memory",
        ["network", "peak RSS growth MiB", "seconds"],
        [[peak_net, f"{result['peak_bytes'] / 2**20:.0f}", f"{result['seconds']:.1f}"]],
    )


def alpha_row(r: dict) -> list[str]:
    def tool(key: str) -> str:
        if key not in r:
            return "-"
        certified, total, seconds = r[key]
        return f"{certified} / {total:.2f} / {seconds:.1f} s"

    return [r["case"], str(r["images"]), *(tool(f"daic {layers}") for layers in C.ALPHAS), tool("LiRPA")]


def cells(result: dict, *keys: str, form: str = "{}") -> list[str]:
    """The figures under `keys`, "-" for those the run did not measure (the peer's, without it)."""
    return [form.format(result[key]) if key in result else "-" for key in keys]


def crown_row(name: str, r: dict) -> list[str]:
    n = r["images"]
    rates = {key: n / r[key] for key in ("crown_s", "peer_crown_s", "crown_default_s") if key in r}
    time_ratio = r["crown_s"] / r["peer_crown_s"] if "peer_crown_s" in r else None
    return [
        name,
        str(n),
        *cells(rates, "crown_s", "peer_crown_s", form="{:.1f}"),
        "-" if time_ratio is None else f"{time_ratio:.2f}",
        "-" if "difference" not in r else "{:.1e} to {:.1e}".format(*r["difference"]),
        *cells(r, "crown_certified", "peer_crown_certified"),
        *cells(rates, "crown_default_s", form="{:.1f}"),
        *cells(r, "crown_default_certified"),
    ]


def ddp_child(name: str, steps: int) -> None:
    """Under torchrun: two epochs of the Box goal on random images; rank 0 prints the second's figures."""
    from daic.runtime.data.sets import Dataset
    from daic.runtime.data.tensors import TensorData
    from daic.runtime.training.distributed import join
    from daic.runtime.training.goals import EpsBox
    from daic.runtime.training.optim import SGD
    from daic.runtime.training.scheme import Scheme
    from daic.runtime.training.trainer import Trainer

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    group = join(os.environ.get("BENCH_DEVICE", "cpu"))
    work = W.WORKLOADS[name]
    x, y = W.inputs(name, work.batch * steps)
    data = TensorData(x, y, x[:1], y[:1], 10)
    dataset = Dataset(image=work.shape, classes=10)
    scheme = Scheme(dataset, work.epsilon, EpsBox(), 2, batch=work.batch, optimizer=SGD(lr=0.01))
    trainer = Trainer(W.build(name), scheme, data, group=group, log_every=10**9)
    trainer.train_epoch(0)
    result = trainer.train_epoch(1)
    if group.is_main:
        print(json.dumps(result))
    group.close()


def processes_section(nets: list[str], device: torch.device, threads: int, steps: int) -> None:
    rows = []
    counts = [1, 2] if device.type == "cpu" or torch.cuda.device_count() >= 2 else [1]
    for name in nets:
        base = None
        for n in counts:
            each = max(1, threads // n) if device.type == "cpu" else threads
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={n}",
                __file__,
                "--ddp-child",
                name,
                "--ddp-steps",
                str(steps),
                "--no-lirpa",
            ]
            env = {
                **os.environ,
                "OMP_NUM_THREADS": str(each),
                "BENCH_THREADS": str(each),
                "BENCH_DEVICE": device.type,
            }
            done = subprocess.run(command, capture_output=True, text=True, env=env)
            if done.returncode:
                raise RuntimeError(f"{n} processes on {name} failed:\n{done.stderr[-3000:]}")
            r = json.loads(done.stdout.strip().splitlines()[-1])
            base = base or r["examples_per_s"]
            per_epoch = W.WORKLOADS[name].epoch_images / r["examples_per_s"]
            rows.append(
                [
                    name,
                    str(n),
                    str(each) if device.type == "cpu" else "1 GPU",
                    f"{r['examples_per_s']:.0f}",
                    f"{per_epoch:.0f}",
                    f"{r['examples_per_s'] / base:.2f}",
                ]
            )
    show(
        f"Data-parallel training, Box goal, {steps} steps of the global batch per epoch",
        ["network", "processes", "threads each", "images/s", "s per epoch of the data set", "speed-up"],
        rows,
    )


def with_corr_max(text: str, k: int) -> str:
    """The network with `CorrMaxK k` right after its Normalize line (k = 0: none)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Normalize")) + 1
    extra = [f"CorrMaxK only_train=True num_correlate={k}"] if k else []
    return "\n".join(lines[:at] + extra + lines[at:]) + "\n"


def epoch_seconds(name: str, step_seconds: float, batch: int) -> float:
    return step_seconds * math.ceil(W.WORKLOADS[name].epoch_images / batch)


def scaling_section(device: torch.device, reps: int, batches: list[int], ks: list[int]) -> None:
    name = "resnettiny_fewcombo"
    rows = []
    for batch in batches:
        model, x, y = network_and_batch(name, device, batch=batch)
        s = W.median_seconds(W.daic_steps(model, x, y, W.WORKLOADS[name].epsilon), reps, device)
        epoch = {method: epoch_seconds(name, v, batch) for method, v in s.items()}
        rows.append(
            [
                str(batch),
                f"{epoch['concrete']:.0f}",
                f"{epoch['daic Box']:.0f}",
                f"{epoch['daic HZ']:.0f}",
                f"{s['daic HZ'] / s['concrete']:.2f}",
            ]
        )
    show(
        f"Seconds per epoch ({W.WORKLOADS[name].epoch_images:,} images) against batch size: {name}, from the "
        f"median of {reps} steps",
        ["batch", "concrete", "daic Box", "daic HZ", "HZ / concrete"],
        rows,
    )
    name, rows, first = "convbig", [], None
    batch = W.WORKLOADS[name].batch
    for k in ks:
        model, x, y = network_and_batch(name, device, with_corr_max(W.net_text(name), k))
        steps = W.daic_steps(model, x, y, W.WORKLOADS[name].epsilon)
        s = W.median_seconds({"concrete": steps["concrete"], "daic HZ": steps["daic HZ"]}, reps, device)
        first = first or s["daic HZ"]
        rows.append(
            [
                str(k),
                f"{epoch_seconds(name, s['concrete'], batch):.0f}",
                f"{epoch_seconds(name, s['daic HZ'], batch):.0f}",
                f"{s['daic HZ'] / s['concrete']:.2f}",
                f"{s['daic HZ'] / first:.2f}",
            ]
        )
    show(
        f"Seconds per epoch against correlated error terms: {name} with CorrMaxK k at its input, "
        f"batch {batch}, median of {reps} steps",
        ["k", "concrete", "daic HZ", "HZ / concrete", "HZ / HZ at first k"],
        rows,
    )


def paper_section(runs: list[str], device: torch.device, images: int, hbox_images: int) -> None:
    rows = []
    for name in runs:
        run = paper.PAPER_RUNS[name]
        r = paper.epoch_seconds(name, images, device)
        target = run.target_seconds
        rows.append(
            [
                run.network,
                run.scheme,
                str(r["batch"]),
                f"{r['seconds']:.3f}",
                f"{r['epoch_seconds']:.1f}",
                f"{run.paper_seconds:.0f}",
                "-" if target is None else f"{target:g}",
                "-" if target is None else ("yes" if r["epoch_seconds"] <= target else "no"),
            ]
        )
    show(
        f"The paper's schemes as `daic run` trains them: the last epoch over {images:,} random images, "
        f"scaled to {paper.CIFAR10_EPOCH:,}",
        ["network", "scheme", "batch", "s measured", "s per epoch", "paper (RTX 2080 Ti)", "target", "met"],
        rows,
    )
    if hbox_images:
        r = paper.test_set_certification(hbox_images, device)
        limit = paper.TEST_SET_SECONDS
        show(
            f"HBox certification by ResNet-Tiny (Baseline) as `daic run` tests: {hbox_images:,} random "
            f"images, scaled to the test set's {paper.CIFAR10_TEST:,}",
            ["s measured", "s per test set", "target", "met", "verified %"],
            [
                [
                    f"{r['seconds']:.3f}",
                    f"{r['test_set_seconds']:.0f}",
                    f"{limit}",
                    "yes" if r["test_set_seconds"] <= limit else "no",
                    f"{r['verified']:.1f}",
                ]
            ],
        )


def describe(device: torch.device, threads: int, peers: dict[str, str | None]) -> None:
    """The run's first line: the machine, torch, each peer (its version, or why it is left out)."""
    if device.type == "cuda":
        machine = f"{torch.cuda.get_device_name(device)} ({torch.cuda.device_count()} visible)"
    else:
        machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {threads} threads"
    found = {"auto_LiRPA": lirpa.version, "CTRAIN": ctrain.version}
    states = [f"{name} {found[name]() if why is None else why}" for name, why in peers.items()]
    malloc = "glibc keeps freed memory" if device.type == "cpu" else "caching allocator"
    parts = [f"machine: {machine}", f"torch {torch.__version__}", *states, malloc]
    if device.type == "cpu":
        parts.append(f"daic's native kernels {native.status()}")
    print("; ".join(parts))


def peers_here(left_out: bool) -> dict[str, str | None]:
    """Each peer and why it cannot be measured here (None: it can)."""
    if left_out:
        return {"auto_LiRPA": "left out (--no-lirpa)", "CTRAIN": "left out (--no-lirpa)"}
    return {"auto_LiRPA": lirpa.why_not(), "CTRAIN": ctrain.why_not()}


def trained_cases(
    parser: argparse.ArgumentParser, given: list[str], data: str | None, images: int
) -> list[C.Case]:
    """The checkpoints of `--crown-trained` as certification cases, each option checked first."""
    if given and not data:
        parser.error("--crown-trained needs --crown-data (the MNIST folder of the test images)")
    cases = []
    for text in given:
        parts = text.split(",")
        if len(parts) not in (3, 4) or not all(Path(p).is_file() for p in parts[:2]):
            parser.error(f"--crown-trained: NET,CHECKPOINT,EPS[,IMAGES], both files present; got {text!r}")
        try:
            eps = float(parts[2])
            count = int(parts[3]) if len(parts) == 4 else images
        except ValueError:
            parser.error(f"--crown-trained: EPS or IMAGES is not a number in {text!r}")
        cases.append(C.trained_case(parts[0], parts[1], eps, data, count))
    return cases


def names(text: str) -> list[str]:
    """A comma-separated option's items."""
    return [item for item in text.split(",") if item]


def arguments() -> argparse.ArgumentParser:
    """The suite's options (`--help`)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="CPU threads in all")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--crown-reps", type=int, default=3, help="repetitions of CROWN's rounds")
    parser.add_argument("--nets", default=",".join(W.MAIN_NETS))
    parser.add_argument("--method-nets", default="convsmall,cnn7", help="networks of the methods table")
    parser.add_argument("--method-reps", type=int, default=5)
    parser.add_argument("--sections", help=f"default: {','.join(CPU_SECTIONS)}, and paper on a GPU")
    parser.add_argument("--hbox-nets", default="convsmall,convbig,resnettiny,resnettiny_fewcombo")
    parser.add_argument("--hbox-images", type=int, default=4)
    parser.add_argument("--hbox-reps", type=int, default=3)
    parser.add_argument("--hbox-peak-nets", default="convsmall,convbig", help="HBox's peak memory measured")
    parser.add_argument("--hbox-peak-images", type=int, default=256)
    # Not ConvBig by default: at its initialisation full CROWN of 20 images takes 272 s a tool and repetition
    # here, an hour of the suite's run for bounds that say nothing of robustness.
    parser.add_argument("--crown-nets", default="convsmall", help="initialised networks certified")
    parser.add_argument("--crown-images", type=int, default=20)
    parser.add_argument("--crown-peak-net", default="resnettiny")
    parser.add_argument("--crown-train-epochs", type=int, default=15, help="epochs of the digits network")
    parser.add_argument("--ddp-nets", default="convbig,resnettiny")
    parser.add_argument("--ddp-steps", type=int, default=10)
    parser.add_argument("--batches", default="25,50,100,200")
    parser.add_argument("--ks", default="0,8,32,128")
    parser.add_argument("--paper-runs", default=",".join(paper.PAPER_RUNS))
    parser.add_argument("--paper-images", type=int, help="images per timed epoch (GPU 10000, CPU 100)")
    parser.add_argument("--paper-hbox-images", type=int, help="images certified (GPU 1000, CPU 4)")
    parser.add_argument(
        "--crown-trained", action="append", default=[], metavar="NET,CHECKPOINT,EPS[,IMAGES]",
        help="a `daic run` checkpoint of an MNIST network to certify at EPS on its first IMAGES test images"
        " (default --crown-images; repeatable; needs --crown-data)",
    )  # fmt: skip
    parser.add_argument("--crown-data", help="the MNIST folder whose test images --crown-trained certifies")
    parser.add_argument(
        "--crown-no-alpha",
        default="",
        help="trained networks (names, comma-separated) left out of alpha-CROWN",
    )
    parser.add_argument("--trainer-nets", default="cnn7", help="networks of the trainers' table")
    parser.add_argument("--trainer-batches", type=int, default=6, help="batches per timed epoch")
    parser.add_argument("--trainer-reps", type=int, default=5, help="timed epochs of each trainer")
    parser.add_argument("--no-lirpa", action="store_true", help="leave the peers out even if installed")
    parser.add_argument("--peak-child", help=argparse.SUPPRESS)
    parser.add_argument("--ddp-child", help=argparse.SUPPRESS)
    parser.add_argument("--crown-peak-child", help=argparse.SUPPRESS)
    parser.add_argument("--hbox-peak-child", help=argparse.SUPPRESS)
    return parser


def run_child(args: argparse.Namespace) -> bool:
    """The measurement a child process was started for, if it was one (True then)."""
    if args.peak_child:
        name, method = args.peak_child.split(":")
        peak_child(name, method, torch.device(args.device))
        return True
    if args.hbox_peak_child:
        name, images = args.hbox_peak_child.split(":")
        torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
        print(json.dumps(W.hbox_peak(name, int(images), torch.device(args.device))))
        return True
    if args.ddp_child:
        ddp_child(args.ddp_child, args.ddp_steps)
        return True
    if args.crown_peak_child:
        torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
        start = time.perf_counter()
        peak_bytes = C.crown_peak_child(args.crown_peak_child, CROWN_EPS)
        print(json.dumps({"peak_bytes": peak_bytes, "seconds": time.perf_counter() - start}))
        return True
    return False


def checked(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[set[str], torch.device]:
    """The sections to run and the device, every option checked first (a mistake is one message)."""
    on_gpu = args.device.startswith("cuda")
    sections = set((args.sections or ",".join(SECTIONS if on_gpu else CPU_SECTIONS)).split(","))
    unknown = sections - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    for option in (
        "nets",
        "method_nets",
        "hbox_nets",
        "hbox_peak_nets",
        "ddp_nets",
        "crown_nets",
        "trainer_nets",
    ):
        unknown = set(names(getattr(args, option))) - set(W.WORKLOADS)
        if unknown:
            flag = "--" + option.replace("_", "-")
            parser.error(f"{flag}: unknown networks {sorted(unknown)}; choose from {', '.join(W.WORKLOADS)}")
    unknown = set(names(args.paper_runs)) - set(paper.PAPER_RUNS)
    if unknown:
        known = ", ".join(paper.PAPER_RUNS)
        parser.error(f"--paper-runs: unknown runs {sorted(unknown)}; choose from {known}")
    for option, gpu, cpu, least in (("paper_images", 10_000, 100, 1), ("paper_hbox_images", 1000, 4, 0)):
        value = getattr(args, option)
        if value is None:
            setattr(args, option, gpu if on_gpu else cpu)
        elif value < least:
            parser.error(f"--{option.replace('_', '-')}: too few images: {value}")
    for option in ("batches", "ks"):
        if not all(item.isdigit() for item in names(getattr(args, option))):
            parser.error(
                f"--{option}: a comma-separated list of whole numbers, got {getattr(args, option)!r}"
            )
    try:
        device = torch.device(args.device)
    except RuntimeError:
        parser.error(f"--device: not a device: {args.device!r} (cpu, cuda, cuda:1, ...)")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device is available here")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device {args.device}: the suite measures on cpu or cuda")
    if device.type == "cpu":
        W.reexec_with_malloc_tuning()  # after the checks, so that a mistake is reported once
    return sections, device


def main() -> None:
    parser = arguments()
    args = parser.parse_args()
    if run_child(args):
        return
    sections, device = checked(parser, args)
    peers = peers_here(args.no_lirpa)
    peer = peers["auto_LiRPA"]
    torch.set_num_threads(args.threads)
    describe(device, args.threads, peers)
    if "main" in sections:
        main_section(names(args.nets), device, args.reps, args.crown_reps, args.threads, peer)
    if "trainer" in sections:
        trainer_section(names(args.trainer_nets), device, args.trainer_batches, args.trainer_reps,
                        peers["CTRAIN"])  # fmt: skip
    if "methods" in sections:
        methods_section(names(args.method_nets), device, args.method_reps)
    if "hbox" in sections:
        hbox_section(names(args.hbox_nets), device, args.hbox_images, args.hbox_reps,
                     names(args.hbox_peak_nets), args.hbox_peak_images, args.threads)  # fmt: skip
    if "crown" in sections:
        crown_section(
            names(args.crown_nets),
            args.crown_images,
            args.crown_reps,
            peer,
            args.crown_peak_net,
            args.crown_train_epochs,
            trained_cases(parser, args.crown_trained, args.crown_data, args.crown_images),
            names(args.crown_no_alpha),
        )
    if "processes" in sections:
        processes_section(names(args.ddp_nets), device, args.threads, args.ddp_steps)
    if "paper" in sections:
        paper_section(names(args.paper_runs), device, args.paper_images, args.paper_hbox_images)
    if "scaling" in sections:
        scaling_section(
            device,
            max(3, args.reps // 2),
            [int(b) for b in names(args.batches)],
            [int(k) for k in names(args.ks)],
        )


if __name__ == "__main__":
    main()
