"""What makes a point a `sat` answer to a VNN-LIB property: the property as written holds there, exactly and
as VNN-COMP's checker runs the network.

The runtime moves candidates onto float32 numbers of the box and asks `Satisfies.violated` (see
`runtime.certification.witness`). The box is the case's box as a checker reads it: each end the float64
nearest the decimal written (a box that fixes an input at 0.1 holds the float64 0.1, though no binary
number equals 0.1). A point passes when (1) it lies in that box, and the property's assertions hold at it
for every output in intervals that contain the network's exact outputs there (the stored weights in
rational arithmetic), the constraints on outputs read exactly, and (2) they hold, exactly, for the outputs
the checker computes: onnxruntime running the ONNX file in float32, as VNN-COMP checks witnesses, or the
network's float32 copy in torch where there is no ONNX file or no onnxruntime (the record says which).
An input at an end of the box as read stands, in the assertions, for that end as written.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from daic.compiler.exchange.onnx_runtime import onnxruntime_session
from daic.runtime.certification.witness import Witnesses, output_bounds

if TYPE_CHECKING:
    from torch import nn

    from daic.compiler.exchange.onnx_nodes import ImportedNetwork
    from daic.compiler.exchange.vnnlib_in import Property, Region
    from daic.compiler.jobs.properties import Certifier

ONNXRUNTIME = "onnxruntime float32"
TORCH = "torch float32"


class Float32Network:
    """The network as a checker runs it: `run` maps points (float64 holding float32 numbers, the network's
    input shape) to float32 outputs (as float64, flattened); `name` says who ran it."""

    def __init__(self, run: Callable[[Tensor], Tensor], name: str) -> None:
        self.run, self.name = run, name

    @classmethod
    def of(cls, model: nn.Module, source: ImportedNetwork | None) -> Float32Network:
        """onnxruntime on the ONNX file `source` was read from, where there is one and onnxruntime is
        installed and runs it, else a float32 copy of `model`."""
        try:
            session = None if source is None else onnxruntime_session(source.source, threads=1)
        except Exception:  # a file onnxruntime cannot run (daic could): the torch copy checks, and says so
            session = None
        if session is not None:
            return cls(_session_runner(session, source), ONNXRUNTIME)
        import copy

        fast = copy.deepcopy(model).float().eval()

        def run(points: Tensor) -> Tensor:
            with torch.no_grad():
                return fast(points.float()).flatten(1).double()

        return cls(run, TORCH)


def _session_runner(session: Any, source: ImportedNetwork) -> Callable[[Tensor], Tensor]:
    """Runs the ONNX file's session one point at a time, each in the file's own input shape and order of
    values."""
    from daic.compiler.exchange.onnx_in import onnx_inputs

    name = session.get_inputs()[0].name

    def run(points: Tensor) -> Tensor:
        rows = onnx_inputs(source, points.detach().cpu().float().numpy())
        outputs = [
            torch.from_numpy(session.run(None, {name: row})[0].astype("float64").reshape(-1)) for row in rows
        ]
        # CPU: onnxruntime's outputs, read on the host where exact arithmetic checks them
        return torch.stack(outputs) if outputs else torch.zeros(0, 0, dtype=torch.float64)

    return run


class Satisfies(Witnesses):
    """A VNN-LIB property's witnesses in one of its cases (`region`) on a network: see the module
    docstring, on the `certifier`'s float64 network (the stored weights, exactly) and its float32 run."""

    def __init__(self, prop: Property, region: Region, certifier: Certifier) -> None:
        self.prop, self.region, self.certifier = prop, region, certifier
        self.checker = certifier.float32.name
        self.read = [(float(lo), float(hi)) for lo, hi in zip(region.lower, region.upper, strict=True)]

    def _as_written(self, point: list[float]) -> list[Fraction] | None:
        """The point's inputs for the assertions (an end of the box as read stands for the end as
        written), or None if it lies outside the box as read."""
        x = []
        for v, (lo, hi), low, high in zip(
            point, self.read, self.region.lower, self.region.upper, strict=True
        ):
            if not lo <= v <= hi:
                return None
            x.append(low if v == lo else high if v == hi else Fraction(v))
        return x

    def violated(self, points: Tensor, images: Tensor) -> Tensor:
        if len(points) == 0:
            # CPU: verdicts are made on the host (see the end)
            return torch.zeros(0, dtype=torch.bool)
        certifier = self.certifier
        low, high = (bound.tolist() for bound in output_bounds(certifier.model, points, certifier.relu))
        checked = certifier.float32.run(points).tolist()
        found = []
        for k, point in enumerate(points.flatten(1).tolist()):
            if not all(math.isfinite(v) for v in (*low[k], *high[k], *checked[k])):
                found.append(False)  # an output that overflows proves nothing either way
                continue
            x = self._as_written(certifier.in_onnx_order(point))
            if x is None:
                found.append(False)
                continue
            exact = self.prop.satisfied_throughout(x, _fractions(low[k]), _fractions(high[k]))
            found.append(exact and self.prop.satisfied_by(x, _fractions(checked[k])))
        # CPU: one verdict per candidate, made on the host from exact arithmetic
        return torch.tensor(found, dtype=torch.bool)


def _fractions(values: list[float]) -> list[Fraction]:
    return [Fraction(v) for v in values]
