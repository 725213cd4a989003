"""Verification domains: each bounds the margins ``y_t - y_j`` of a batch of input boxes from below.

Every domain folds the specification into the network's last layers, as the literature reports its bounds:
the margins are linear functions of the last ReLU's output, bounded there (Box, HBox) or moved back to the
input (CROWN, alpha-CROWN). An image is certified when every margin's lower bound is positive.

- `BoxBound`: interval bound propagation (IBP).
- `HBoxBound`: the exact input zonotope (one correlated term per input dimension) through the hybrid
  zonotope transformers, as the reference implementation certified.
- `CROWNBound`: back-substitution through linear relaxations (CROWN, Zhang et al. 2018), with
  intermediate bounds from CROWN itself, IBP, the hybrid zonotope, or the best of them.
- `AlphaCROWNBound`: CROWN with the ReLUs' lower slopes optimised per image, margin and neuron (Xu et al.
  2021); every slope in [0, 1] is sound, and the best bound seen is kept.

Domains run in float64 on a float64 copy of the network (see `evaluate`), with the network's test-time
abstract layers (``only_train=False``) applied.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
from torch import Tensor, nn

from daic.runtime.certification.alpha_crown import every_layer_bytes, optimized_every_layer, optimized_lower
from daic.runtime.certification.certify import Batch, Step, exact_float, memory_budget
from daic.runtime.context import AbstractContext
from daic.runtime.domains import dropping_dead_terms
from daic.runtime.domains.coeffs import Dense
from daic.runtime.domains.element import margin_others
from daic.runtime.domains.symbolic import LayerSlopes, Symbolic
from daic.runtime.layers import DecorrelateMin
from daic.runtime.layers.base import placement

INTERMEDIATE = ("crown", "box", "hbox", "best")
LAYERS = ("output", "all")
"""Whose slopes alpha-CROWN optimises: the margins' rows alone, or every layer's rows as well."""
"""Where CROWN's intermediate bounds come from: back-substitution (full CROWN), intervals (CROWN-IBP), the
exact-input hybrid zonotope, or the elementwise best of all three."""


class MarginBound(Step):
    """A cascade step that bounds the margins of a batch of boxes from below: an image is verified when
    every bound is positive (incomplete: the others stay unknown, with their best bound)."""

    name = ""

    @property
    def label(self) -> str:
        """The bound as the language writes it, with the arguments that differ from the defaults."""
        return self.name

    def margins(self, model: nn.Module, lower: Tensor, upper: Tensor, target: Tensor, relu: str) -> Tensor:
        """``(B, C - 1)``: lower bounds of ``y_t - y_j`` for the classes ``j != t``, in class order."""
        raise NotImplementedError

    def decide(self, model: nn.Module, batch: Batch, pending: Tensor) -> None:
        size = self.batch_size(model, tuple(batch.x.shape[1:]), len(pending))
        for start in range(0, len(pending), size):
            chunk = pending[start : start + size]
            with torch.no_grad(), exact_float():
                found = self.margins(model, batch.lower[chunk], batch.upper[chunk], batch.y[chunk],
                                     batch.relu).amin(1)  # fmt: skip
            for i, margin in zip(chunk.tolist(), found.tolist(), strict=True):
                batch.best[i] = max(float(batch.best[i]), margin)
                if margin > 0:
                    outcome = batch.outcomes[i]
                    outcome.status, outcome.by, outcome.margin = "verified", self.label, margin

    def _run(self, model: nn.Module, value: Symbolic, relu: str) -> Symbolic:
        return model.abstract(value, AbstractContext(training=False, relu=relu))


class BoxBound(MarginBound):
    """Interval bound propagation, the margins folded into the layers after the last ReLU."""

    name = "Box"
    cheap = True  # one interval pass: a fraction of an attack's forward and backward passes

    def margins(self, model, lower, upper, target, relu):
        return self._run(model, Symbolic.input(lower, upper), relu).margin_lower(target, until_nonlinear=True)


class HBoxBound(MarginBound):
    """The exact input zonotope through the hybrid zonotope transformers, margins folded likewise."""

    name = "HBox"
    budget_bytes = 2 * 2**30
    """Bytes a batch may take on the CPU; on a GPU, `certify.memory_budget`'s share of the free memory: 2
    GiB planned 2 ResNet-Tiny images a batch on an H200, launch-bound (bench/README.md, "On an NVIDIA
    H200"); the estimate of ConvBig's 2-image batch there, 1,537 MiB, was 5.5x its peak."""

    def margins(self, model, lower, upper, target, relu):
        dropping = nullcontext() if slot_count_matters(model, training=False) else dropping_dead_terms()
        with dropping:
            value = self._run(model, Symbolic.input(lower, upper, companions=("box", "hbox")), relu)
            return value.margin_lower(target, until_nonlinear=True)

    def batch_size(self, model, shape, default):
        """Images per batch so that (terms x images x widest activation) float64 values fit the budget."""
        widest = widest_activation(model, shape)
        per_image = (math.prod(shape) + 2) * widest * 8
        return max(1, min(default, memory_budget(placement(model)[0], self.budget_bytes) // per_image))


class CROWNBound(MarginBound):
    """Linear relaxations back-substituted to the input; the bound is the better of that and the
    intermediate domains' own bounds of the margins."""

    name = "CROWN"

    def __init__(self, intermediate: str = "crown") -> None:
        if intermediate not in INTERMEDIATE:
            raise ValueError(f"CROWN: intermediate must be one of {INTERMEDIATE}, got {intermediate!r}")
        self.intermediate = intermediate

    @property
    def label(self) -> str:
        return (
            self.name if self.intermediate == "crown" else f'{self.name}(intermediate="{self.intermediate}")'
        )

    def _output(self, model: nn.Module, lower: Tensor, upper: Tensor, relu: str, **given: object) -> Symbolic:
        """The analysis of the network on the boxes, with the intermediate bounds `intermediate` asks for;
        `given`: more of `Symbolic.input`'s settings (alpha-CROWN's slopes and prior bounds)."""
        companions = ("box", "hbox") if self.intermediate in ("hbox", "best") else ("box",)
        crown = self.intermediate in ("crown", "best")
        dropping = nullcontext()
        if "hbox" in companions and not slot_count_matters(model, training=False):
            dropping = dropping_dead_terms()
        with dropping:
            value = Symbolic.input(lower, upper, companions, crown=crown, deadline=self.until, **given)
            return self._run(model, value, relu)

    def margins(self, model, lower, upper, target, relu):
        output = self._output(model, lower, upper, relu)
        folded = output.margin_lower(target, until_nonlinear=True)
        return torch.maximum(output.margin_lower(target), folded)

    def batch_size(self, model, shape, default):
        if self.intermediate in ("hbox", "best"):
            return HBoxBound().batch_size(model, shape, default)
        return default


class AlphaCROWNBound(CROWNBound):
    """CROWN whose ReLU lower slopes are optimised with Adam for ``steps`` iterations from CROWN's adaptive
    choice (`alpha_crown`): with ``layers="output"`` the margins' slopes alone (one per image, margin and
    unstable neuron), intermediate bounds fixed; with ``layers="all"`` every layer's, each intermediate
    bound recomputed at every step with slopes of its own rows (auto_LiRPA's CROWN-Optimized), where
    those rows fit `budget_bytes` (the margins' alone otherwise). The best bound seen of every margin is
    kept (any slope in [0, 1] gives a sound bound), and the search stops once every margin of the batch is
    proved."""

    name = "AlphaCROWN"
    budget_bytes = 2 * 2**30

    def __init__(
        self, steps: int = 20, lr: float = 0.5, intermediate: str = "crown", layers: str = "output"
    ) -> None:
        super().__init__(intermediate)
        if steps < 0 or lr <= 0:
            raise ValueError(f"AlphaCROWN: steps must be >= 0 and lr > 0, got {steps}, {lr}")
        if layers not in LAYERS:
            raise ValueError(f"AlphaCROWN: layers must be one of {LAYERS}, got {layers!r}")
        if layers == "all" and intermediate not in ("crown", "best"):
            raise ValueError(
                f'AlphaCROWN: layers="{layers}" optimises the slopes of CROWN\'s intermediate bounds, and '
                f'intermediate="{intermediate}" takes none from CROWN; use "crown" or "best"'
            )
        self.steps, self.lr, self.layers = int(steps), float(lr), layers

    @property
    def label(self) -> str:
        given = []
        if self.steps != 20:
            given.append(f"steps={self.steps}")
        if self.lr != 0.5:
            given.append(f"lr={self.lr:g}")
        if self.intermediate != "crown":
            given.append(f'intermediate="{self.intermediate}"')
        if self.layers != "output":
            given.append(f'layers="{self.layers}"')
        return self.name + (f"({', '.join(given)})" if given else "")

    def margins(self, model, lower, upper, target, relu):
        output = self._output(model, lower, upper, relu)
        best = torch.maximum(output.margin_lower(target), output.margin_lower(target, until_nonlinear=True))
        rows = Dense(margin_others(target, output.shape[1], lower.dtype)[0])
        if self.layers == "all" and every_layer_bytes(output) <= self.budget_bytes:

            def analyse(slopes: LayerSlopes, prior: dict) -> Symbolic:
                return self._output(model, lower, upper, relu, slopes=slopes, prior=prior)

            return optimized_every_layer(analyse, output, rows, best, self.steps, self.lr, self.until)
        return optimized_lower(output, rows, best, self.steps, self.lr, self.until)


def slot_count_matters(model: nn.Module, training: bool) -> bool:
    """Whether some layer acting in this mode depends on the number of term slots, so that dead ones must
    be kept: a DecorrelateMin that removes a count of terms (``num_to_keep=False``) would remove live terms
    in place of the dead ones left out."""
    return any(
        isinstance(m, DecorrelateMin) and not m.num_to_keep and (training or not m.only_train)
        for m in model.modules()
    )


def relu_neurons(model: nn.Module, shape: tuple[int, ...]) -> int:
    """The neurons of the network's activations (ReLU and the rest of the family) for one input of ``shape``:
    what a CROWN pass's cost grows with."""
    counted = [0]
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: counted.__setitem__(0, counted[0] + out[0].numel()))
        for m in model.modules()
        if getattr(m, "activation", False)
    ]
    try:
        device, dtype = placement(model)
        with torch.no_grad():
            model(torch.zeros(1, *shape, device=device, dtype=dtype))
    finally:
        for hook in hooks:
            hook.remove()
    return counted[0]


def widest_activation(model: nn.Module, shape: tuple[int, ...]) -> int:
    """Neurons of the network's widest layer output for one input of ``shape``."""
    sizes = [math.prod(shape)]
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: sizes.append(out[0].numel()))
        for m in model.modules()
        if not list(m.children())
    ]
    try:
        with torch.no_grad():
            device, dtype = placement(model)
            model(torch.zeros(1, *shape, device=device, dtype=dtype))
    finally:
        for hook in hooks:
            hook.remove()
    return max(sizes)
