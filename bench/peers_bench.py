"""daic against auto_LiRPA 0.3, side by side in one process: the IBP (Box) training step, and auto_LiRPA's
CROWN-IBP step as the "tighter but slower" reference, on the same networks and batches.

auto_LiRPA 0.3 pins torch<1.13 and numpy 1, so it lives in its own environment, never in daic's
dependencies. `bench/peers_setup.sh` makes it (bench/.venv-peers: the same torch as daic, numpy<2,
auto_LiRPA installed without its pins, and daic itself); then:

    bench/.venv-peers/bin/python bench/peers_bench.py [--reps 7] [--nets convsmall,convbig,resnettiny]

Three runtime patches make auto_LiRPA 0.3 run on current torch (see `patch_auto_lirpa`); none touches
site-packages. Both sides run under the same allocator settings: the script re-executes itself with glibc
told to keep freed memory (large tensors are otherwise re-faulted on every call).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "17179869184"}
ROOT = Path(__file__).resolve().parents[1]

# (stdlib network, input shape, batch): the paper's batch sizes and the reference figures' settings.
NETS = {
    "convsmall": ("mnist_convsmall.net", (1, 28, 28), 100),
    "convbig": ("cifar10_convbig.net", (3, 32, 32), 50),
    "resnettiny": ("resnettiny_none.net", (3, 32, 32), 50),
}


def patch_auto_lirpa() -> None:
    """The three changes auto_LiRPA 0.3 needs on current torch, made at run time."""
    import torch
    import torch.onnx.symbolic_helper as symbolic_helper
    from torch.onnx._internal.torchscript_exporter._globals import GLOBALS

    # 1. _set_opset_version moved: the opset is now a property of the TorchScript exporter's GLOBALS.
    def _set_opset_version(version: int) -> None:
        GLOBALS.export_onnx_opset_version = version

    symbolic_helper._set_opset_version = _set_opset_version

    # 2. graph nodes lost item access to attributes; node[name] dispatched on the attribute's kind.
    def _getitem(node, key):
        return getattr(node, node.kindOf(key))(key)

    torch._C.Node.__getitem__ = _getitem

    # 3. named_parameters() passes remove_duplicate, which BoundedModule._named_members does not accept.
    from auto_LiRPA.bound_general import BoundedModule

    original = BoundedModule._named_members

    def _named_members(self, get_members_fn, prefix="", recurse=True, remove_duplicate=True):
        return original(self, get_members_fn, prefix, recurse)

    BoundedModule._named_members = _named_members


def build(net_file: str, shape: tuple[int, ...]):
    """The stdlib network, lowered by daic (one seed, so both sides train the same weights)."""
    from daic.compiler.lower import lower_network
    from daic.compiler.network import analyze_net
    from daic.dsl.parser import parse_net
    from daic.runtime import ibp_init_

    text = (ROOT / "stdlib" / "nets" / net_file).read_text()
    model = lower_network(analyze_net(parse_net(text).tree, shape, 10))
    ibp_init_(model, seed=0)
    return model


def steps(model, x, y, eps: float) -> dict[str, Callable[[], None]]:
    """One training step per method: forward (bounds), loss, backward."""
    import torch
    import torch.nn.functional as F
    from auto_LiRPA import BoundedModule, BoundedTensor
    from auto_LiRPA.perturbations import PerturbationLpNorm

    from daic.runtime import Box
    from daic.runtime.losses import worst_case_loss

    lower, upper = (x - eps).clamp(0, 1), (x + eps).clamp(0, 1)
    bounded = BoundedModule(model, torch.zeros_like(x[:1]), device="cpu")
    classes = 10
    # The margin specification y_t - y_j for every j != t, as auto_LiRPA's examples build it.
    eye = torch.eye(classes)
    c = eye[y].unsqueeze(1) - eye.unsqueeze(0)
    keep = eye[y] == 0
    c = c[keep].view(x.shape[0], classes - 1, classes)

    def concrete():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()

    def daic_box():
        model.zero_grad(set_to_none=True)
        worst_case_loss(model.abstract(Box.from_bounds(lower, upper), ctx), y).mean().backward()

    def lirpa(method: str):
        def step():
            bounded.zero_grad(set_to_none=True)
            ptb = PerturbationLpNorm(norm=float("inf"), eps=eps, x_L=lower, x_U=upper)
            lb, _ = bounded.compute_bounds(x=(BoundedTensor(x, ptb),), C=c, method=method, bound_upper=False)
            # Cross-entropy on the worst-case logits: -lb of the margins, 0 for the target (as daic does).
            logits = torch.cat([torch.zeros(len(y), 1), -lb], dim=1)
            F.cross_entropy(logits, torch.zeros(len(y), dtype=torch.long)).backward()

        return step

    from daic.runtime import AbstractContext

    ctx = AbstractContext(training=True)
    return {
        "concrete": concrete,
        "daic Box": daic_box,
        "LiRPA IBP": lirpa("IBP"),
        "LiRPA CROWN-IBP": lirpa("CROWN-IBP"),
    }


def measure(functions: dict[str, Callable[[], None]], reps: int) -> dict[str, float]:
    """Median seconds per call, the methods interleaved so that machine load falls on all alike."""
    for fn in functions.values():
        fn()  # warm-up (allocations, auto_LiRPA's first-call work)
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(reps):
        for name, fn in functions.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--nets", default=",".join(NETS))
    parser.add_argument("--no-malloc-tuning", action="store_true")
    args = parser.parse_args()
    if not args.no_malloc_tuning and any(os.environ.get(k) != v for k, v in ALLOCATOR.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **ALLOCATOR})

    import torch

    torch.set_num_threads(args.threads)
    patch_auto_lirpa()
    print(
        f"torch {torch.__version__}, {args.threads} threads, median of {args.reps} interleaved steps, "
        f"allocator: {'tuned' if not args.no_malloc_tuning else 'default'}"
    )
    header = f"{'net':<12}{'batch':>6}{'concrete':>11}{'daic Box':>11}{'LiRPA IBP':>11}{'CROWN-IBP':>11}"
    header += f"{'Box/conc':>10}{'Box/IBP':>9}{'CROWN/conc':>12}"
    print(header)
    for key in args.nets.split(","):
        net_file, shape, batch = NETS[key]
        model = build(net_file, shape)
        generator = torch.Generator().manual_seed(0)
        x = torch.rand(batch, *shape, generator=generator)
        y = torch.randint(0, 10, (batch,), generator=generator)
        t = measure(steps(model, x, y, eps=8 / 255 if shape[0] == 3 else 0.1), args.reps)
        ms = {k: 1000 * v for k, v in t.items()}
        print(
            f"{key:<12}{batch:>6}{ms['concrete']:>9.1f}ms{ms['daic Box']:>9.1f}ms{ms['LiRPA IBP']:>9.1f}ms"
            f"{ms['LiRPA CROWN-IBP']:>9.1f}ms{t['daic Box'] / t['concrete']:>10.2f}"
            f"{t['daic Box'] / t['LiRPA IBP']:>9.2f}{t['LiRPA CROWN-IBP'] / t['concrete']:>12.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
