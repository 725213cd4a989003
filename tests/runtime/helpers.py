"""Shared helpers for the runtime tests (imported by name; pytest puts this folder on sys.path)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck
from torch import Tensor

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")),
]


def sample_points(lower: Tensor, upper: Tensor, n: int, generator: torch.Generator) -> Tensor:
    """``(n + corners + 1, B, *F)`` points of the box: uniform ones, random corners, and the center."""
    shape = (n, *lower.shape)
    u = torch.rand(shape, generator=generator, dtype=lower.dtype).to(lower.device)
    uniform = lower + (upper - lower) * u
    pick = torch.rand(shape, generator=generator).to(lower.device) < 0.5
    corners = torch.where(pick, lower, upper)
    return torch.cat([uniform, corners, ((lower + upper) / 2)[None]], dim=0)


def run_points(net: torch.nn.Module, points: Tensor) -> Tensor:
    """Concrete outputs for ``(N, B, *F)`` points, as ``(N, B, *F_out)``."""
    n, b = points.shape[:2]
    with torch.no_grad():
        out = net(points.reshape(n * b, *points.shape[2:]))
    return out.reshape(n, b, *out.shape[1:])


def assert_contains(lower: Tensor, upper: Tensor, points: Tensor, tol: float) -> None:
    """Every point (``(N, B, *F)``) lies in ``[lower - tol, upper + tol]`` (``(B, *F)``)."""
    scale = 1 + torch.maximum(lower.abs(), upper.abs())
    below = (lower[None] - points) / scale
    above = (points - upper[None]) / scale
    worst = max(below.max().item(), above.max().item())
    assert worst <= tol, f"a concrete output lies outside the abstract bounds by {worst:.3g} (relative)"


# Passed to hypothesis' @settings by each property test (not a global profile: other folders keep theirs).
HYPOTHESIS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
