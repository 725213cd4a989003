"""Where a paper scheme's training step spends its time on the device: torch.profiler over a few steps of
`Trainer` (as `bench/paper.py` trains: the scheme lowered as `daic run` lowers it, random CIFAR10-shaped
images), its busiest operators and the kernels launched a step. On a GPU a step of a few milliseconds is
bound by its launches (the first GPU run: ResNet-Tiny's Baseline took 20 ms a step at batch 50, its
concrete step 5.2 ms); this says how many there are and which operators make them.

    python bench/profile_step.py --device cuda --runs resnettiny_baseline,densenet100_adv5islpa [--steps 4]
"""

from __future__ import annotations

import argparse
import time

import paper
import torch
import workloads as W
from torch.profiler import ProfilerActivity, profile

from daic.runtime.data.tensors import TensorData
from daic.runtime.training.trainer import Trainer


def profiled(name: str, steps: int, device: torch.device, rows: int) -> str:
    """The profile of `steps` training steps of the paper run `name` (after an untimed epoch of as many)."""
    scheme, model = paper.lowered(paper.PAPER_RUNS[name])
    x, y = W.inputs("resnettiny", steps * scheme.batch)
    trainer = Trainer(model, scheme, TensorData(x, y, x[:1], y[:1], 10), device=device)
    last = scheme.epochs - 1
    trainer.train_epoch(last, on_progress=lambda progress: None)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    began = time.perf_counter()
    with profile(activities=activities) as prof:
        trainer.train_epoch(last, on_progress=lambda progress: None)
    seconds = time.perf_counter() - began
    averages = prof.key_averages()
    on_device = [e for e in averages if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
    launches = sum(e.count for e in on_device) / steps
    sort = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    head = (
        f"## {name} ({scheme.batch} a batch, {steps} steps, {seconds / steps * 1000:.1f} ms a step profiled; "
        f"{launches:.0f} kernels a step on the device)\n\n"
    )
    return head + averages.table(sort_by=sort, row_limit=rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--runs", default="resnettiny_baseline", help=f"from {', '.join(paper.PAPER_RUNS)}")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rows", type=int, default=30, help="operators in each table")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    unknown = set(args.runs.split(",")) - set(paper.PAPER_RUNS)
    if unknown:
        parser.error(f"--runs: unknown runs {sorted(unknown)}; choose from {', '.join(paper.PAPER_RUNS)}")
    torch.set_num_threads(args.threads)
    for name in args.runs.split(","):
        print(profiled(name, args.steps, torch.device(args.device), args.rows), flush=True)


if __name__ == "__main__":
    main()
