"""auto_LiRPA 0.3, the peer: its IBP training step and its CROWN-IBP step ("tighter but slower") on a daic
network, when the benchmark runs in the environment `bench/peers_setup.sh` makes.

auto_LiRPA 0.3 pins torch<1.13 and numpy 1, so it is never one of daic's dependencies. On current torch it
needs three changes, made here at run time (`patch`); none touches site-packages.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def available() -> bool:
    # Importing auto_LiRPA itself fails on current torch until `patch` has run.
    return importlib.util.find_spec("auto_LiRPA") is not None


def patch() -> None:
    """The three changes auto_LiRPA 0.3 needs on current torch."""
    import torch.onnx.symbolic_helper as symbolic_helper
    from torch.onnx._internal.torchscript_exporter._globals import GLOBALS

    # 1. _set_opset_version is gone: the opset is now a field of the TorchScript exporter's GLOBALS.
    def _set_opset_version(version: int) -> None:
        GLOBALS.export_onnx_opset_version = version

    symbolic_helper._set_opset_version = _set_opset_version

    # 2. Graph nodes lost item access to their attributes; node[name] dispatched on the attribute's kind.
    torch._C.Node.__getitem__ = lambda node, key: getattr(node, node.kindOf(key))(key)

    from auto_LiRPA.bound_general import BoundedModule  # importable from here on (change 1)

    # 3. named_parameters() passes remove_duplicate, which BoundedModule._named_members does not accept.
    original = BoundedModule._named_members

    def _named_members(self, get_members_fn, prefix="", recurse=True, remove_duplicate=True):
        return original(self, get_members_fn, prefix, recurse)

    BoundedModule._named_members = _named_members


def steps(model: nn.Module, x: Tensor, y: Tensor, eps: float) -> dict[str, Callable[[], None]]:
    """auto_LiRPA's IBP and CROWN-IBP training steps: the lower bounds of the margins y_t - y_j, and
    cross-entropy on the worst-case logits they give (the loss daic's Box step takes)."""
    from auto_LiRPA import BoundedModule, BoundedTensor
    from auto_LiRPA.perturbations import PerturbationLpNorm

    lower, upper = (x - eps).clamp(0, 1), (x + eps).clamp(0, 1)
    bounded = BoundedModule(model, torch.zeros_like(x[:1]), device=str(x.device))
    eye = torch.eye(10, device=x.device)
    # The specification matrix of auto_LiRPA's examples: one row e_t - e_j per class j != t.
    c = (eye[y].unsqueeze(1) - eye.unsqueeze(0))[eye[y] == 0].view(len(y), 9, 10)
    zero = torch.zeros(len(y), dtype=torch.long, device=x.device)

    def step(method: str) -> Callable[[], None]:
        def run() -> None:
            bounded.zero_grad(set_to_none=True)
            ptb = PerturbationLpNorm(norm=float("inf"), eps=eps, x_L=lower, x_U=upper)
            lb, _ = bounded.compute_bounds(x=(BoundedTensor(x, ptb),), C=c, method=method, bound_upper=False)
            logits = torch.cat([torch.zeros_like(lb[:, :1]), -lb], dim=1)  # the target's logit first
            F.cross_entropy(logits, zero).backward()

        return run

    return {"LiRPA IBP": step("IBP"), "LiRPA CROWN-IBP": step("CROWN-IBP")}
