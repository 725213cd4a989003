"""auto_LiRPA 0.7, the peer (its repository, in the peers' environment of `bench/peers_setup.sh`): its
training steps and its certifying bounds, each on the network as plain `torch.nn` modules (`plain.py`)
and configured as its own examples configure it, unpatched.

- IBP: ``compute_bounds(method="IBP", C=spec)``, the specification ``e_t - e_j`` folded into the last
  linear layer, cross-entropy on ``[0, -lb]`` (examples/vision/cifar_training.py without loss fusion).
- CROWN-IBP: ``method="CROWN-IBP"`` with the same specification (interval intermediate bounds, then the
  margins back-substituted), the same loss.
- CROWN-IBP fused: its loss fusion, the network wrapped in `CrossEntropyWrapper` and bounded with
  ``bound_opts={"loss_fusion": True}``: a forward, the interval bounds, then the upper bound of the summed
  exponentials back-substituted once; the loss ``log ub + max_input`` (as cifar_training.py trains).
- With BatchNorm, each step first runs the clean batch forward, whose statistics auto_LiRPA's BatchNorm
  uses while bounding in training mode (as CTRAIN's steps do; daic's measures them the same way).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import torch
import torch.nn.functional as F
from plain import plain_network
from torch import Tensor, nn

OLDEST = (0, 7)


def why_not() -> str | None:
    """Why auto_LiRPA's rows cannot be measured here, or None when they can."""
    if importlib.util.find_spec("auto_LiRPA") is None:
        return "not installed"
    import auto_LiRPA

    version = tuple(int(part) for part in auto_LiRPA.__version__.split(".")[:2])
    if version < OLDEST:
        return f"{auto_LiRPA.__version__} installed, 0.7 or later needed"
    return None


def version() -> str:
    import auto_LiRPA

    return auto_LiRPA.__version__


def specification(y: Tensor, classes: int = 10) -> Tensor:
    """``(B, C - 1, C)``: rows ``e_t - e_j`` for every class ``j != t`` (its examples' `get_spec_matrix`)."""
    eye = torch.eye(classes, dtype=torch.get_default_dtype(), device=y.device)
    rows = eye[y].unsqueeze(1) - eye.unsqueeze(0)
    return rows[eye[y] == 0].view(len(y), classes - 1, classes)


def _has_batch_norm(module: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())


def steps(model: nn.Module, x: Tensor, y: Tensor, eps: float) -> dict[str, Callable[[], None]]:
    """auto_LiRPA's IBP, CROWN-IBP and fused CROWN-IBP training steps (forward, loss, backward) on the
    network `model` (daic's, converted), the batch `x` and the clipped box of radius `eps` around it."""
    from auto_LiRPA import BoundedModule, BoundedTensor, CrossEntropyWrapper
    from auto_LiRPA.perturbations import PerturbationLpNorm

    net, normalise = plain_network(model, tuple(x.shape[1:]))
    net = net.to(x.device).train()
    lower, upper = normalise((x - eps).clamp(0, 1)), normalise((x + eps).clamp(0, 1))
    inputs, spec = normalise(x), specification(y).to(x.device)
    forward = _has_batch_norm(net)
    # Traced in evaluation mode (batch-1 tracing of a BatchNorm1d fails in training mode), then trained.
    bounded = BoundedModule(net.eval(), inputs[:1], device=str(x.device))
    fused = BoundedModule(
        CrossEntropyWrapper(net).eval(),
        (inputs[:1], y[:1]),
        bound_opts={"loss_fusion": True},
        device=str(x.device),
    )
    bounded.train()  # (its `train` returns nothing)
    fused.train()
    zero = torch.zeros(len(y), dtype=torch.long, device=x.device)

    def bounded_input() -> BoundedTensor:
        return BoundedTensor(inputs, PerturbationLpNorm(norm=float("inf"), eps=eps, x_L=lower, x_U=upper))

    def margins_step(method: str) -> Callable[[], None]:
        def run() -> None:
            bounded.zero_grad(set_to_none=True)
            x_b = bounded_input()
            if forward:
                bounded(x_b)
            lb, _ = bounded.compute_bounds(x=(x_b,), C=spec, method=method, bound_upper=False)
            F.cross_entropy(torch.cat([torch.zeros_like(lb[:, :1]), -lb], 1), zero).backward()

        return run

    def fused_step() -> None:
        fused.zero_grad(set_to_none=True)
        x_b = bounded_input()
        fused(x_b, y)  # its loss fusion starts from a forward (it fails on the first bound without one)
        fused.compute_bounds(x=(x_b, y), IBP=True, method=None)
        _, ub = fused.compute_bounds(IBP=False, method="backward", bound_lower=False, bound_upper=True)
        (torch.log(ub) + _exp_node(fused).max_input).mean().backward()

    return {"LiRPA IBP": margins_step("IBP"), "LiRPA CROWN-IBP": margins_step("CROWN-IBP"),
            "LiRPA CROWN-IBP fused": fused_step}  # fmt: skip


def _exp_node(bounded: nn.Module):
    from auto_LiRPA.operators import BoundExp

    return next(node for node in bounded.modules() if isinstance(node, BoundExp))


def margin_bounds(
    model: nn.Module, x: Tensor, y: Tensor, lower: Tensor, upper: Tensor, method: str
) -> Tensor:
    """``(B, C - 1)`` lower bounds of the margins ``y_t - y_j`` (`method`: "backward", full CROWN, or
    "CROWN-Optimized", alpha-CROWN at its default optimisation settings), in the network's dtype."""
    from auto_LiRPA import BoundedModule, BoundedTensor
    from auto_LiRPA.perturbations import PerturbationLpNorm

    net, normalise = plain_network(model, tuple(x.shape[1:]))
    default = torch.get_default_dtype()
    torch.set_default_dtype(x.dtype)  # its alpha-CROWN makes its tensors in the default dtype
    try:
        bounded = BoundedModule(net.eval(), normalise(x[:1]), device=str(x.device))
        ptb = PerturbationLpNorm(norm=float("inf"), x_L=normalise(lower), x_U=normalise(upper))
        with torch.no_grad() if method == "backward" else torch.enable_grad():
            lb, _ = bounded.compute_bounds(
                x=(BoundedTensor(normalise(x), ptb),), C=specification(y), method=method, bound_upper=False
            )
    finally:
        torch.set_default_dtype(default)
    return lb.detach()
