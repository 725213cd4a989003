"""TAPS (Mao, Müller, Fischer and Vechev, "Connecting Certified and Adversarial Training", NeurIPS 2023).

The network is split in two at a `TAPS` layer: the feature extractor before it is trained with interval
bounds (the goal's box, or hybrid zonotope, propagates up to the layer), the classifier after it with an
adversarial estimate of the worst case inside that latent box. While training, the layer turns its input
into a `Latent` value: the latent box ``[l, u]``, the companion interval (IBP) box of the same ``[l, u]``
moved through the classifier alongside, and the classifier's layers as the value passes them. Its
``worst_case_loss`` is TAPS's loss:

- for every class ``j != t``, a point ``x_j`` of ``[l, u]`` maximising ``y_j - y_t``, found by PGD in the
  latent space (random start, ``steps`` signed steps of ``lr * (u - l)``, ``restarts`` tries);
- the points, detached from that search, are re-attached to ``l`` and ``u`` by the gradient connector
  (`GradientLink`), so that the feature extractor learns from them too;
- the TAPS margins ``y_j(x_j) - y_t(x_j)`` and the companion box's IBP margins each give a cross-entropy
  on the worst-case logits, and the loss is their product, TAPS's factor's gradient expanded by
  ``grad_scale`` (`GradExpander`).

TAPS's margins are estimates, not bounds: a `Latent` refuses ``margin_upper`` and ``linear_lower``, so it
can never certify anything. At test time, for concrete points and for the linear relaxation (CROWN-IBP
ignores TAPS) the layer is the identity.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from daic.runtime.context import AbstractContext
from daic.runtime.domains import Box, Element, HybridZonotope, Symbolic, Value
from daic.runtime.domains.element import margin_others
from daic.runtime.layers.base import AbstractLayer
from daic.runtime.layers.normalization import BatchNorm

Step = Callable[[Tensor], Tensor]


class GradientLink(torch.autograd.Function):
    """TAPS's "rectified linear gradient link": the identity on the (detached) point ``x`` forward; backward
    it passes the point's gradient to the box it was found in, ``w = u - l``:

    ``dx/du = max(0, x - (u - c w)) / (c w)`` (non-zero only where ``x >= u - c w``),
    ``dx/dl = max(0, (l + c w) - x) / (c w)`` (non-zero only where ``x <= l + c w``);

    so a point at a face of the box moves with that face, one in its middle with neither. Where the box is
    flat (``w = 0``) both are 0 rather than 0/0. ``x`` gets no gradient: it is the attack's result.
    """

    @staticmethod
    def forward(ctx: Any, lower: Tensor, upper: Tensor, x: Tensor, c: float) -> Tensor:
        ctx.save_for_backward(lower, upper, x)
        ctx.c = c
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:
        lower, upper, x = ctx.saved_tensors
        cw = ctx.c * (upper - lower)
        flat = cw <= 0
        safe = torch.where(flat, torch.ones_like(cw), cw)
        d_upper = torch.where(flat, 0.0, (x - (upper - cw)).clamp(min=0) / safe)
        d_lower = torch.where(flat, 0.0, ((lower + cw) - x).clamp(min=0) / safe)
        # The points carry a class axis the box does not (``(B, K - 1, *F)`` against ``(B, 1, *F)``): each
        # point's pull on the box adds up, which `_reduce` does by summing over the broadcast axes.
        return _reduce(grad * d_lower, lower), _reduce(grad * d_upper, upper), None, None


class GradExpander(torch.autograd.Function):
    """The identity forward; backward the gradient times ``scale`` (TAPS's alpha)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, scale: float) -> Tensor:
        ctx.scale = scale
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad * ctx.scale, None


def _reduce(grad: Tensor, like: Tensor) -> Tensor:
    """``grad`` summed over the dimensions ``like`` broadcast along, back to ``like``'s shape."""
    if grad.shape == like.shape:
        return grad
    dims = [d for d, (g, s) in enumerate(zip(grad.shape, like.shape, strict=True)) if s == 1 and g != 1]
    return grad.sum(dims, keepdim=True)


class _Join:
    """Two branches of a block after the split, run from the value both start from and summed (a residual
    block) or concatenated: recorded as one step, so that the classifier stays a list of steps."""

    def __init__(self, first: Sequence[Step], second: Sequence[Step], dim: int | None) -> None:
        self.first, self.second, self.dim = tuple(first), tuple(second), dim

    def __call__(self, x: Tensor) -> Tensor:
        a, b = _run(self.first, x), _run(self.second, x)
        return a + b if self.dim is None else torch.cat([a, b], self.dim)


def _concrete_step(layer: Any, box: Box) -> Step:
    """What the attack's points go through for ``layer``: its concrete forward, except for a BatchNorm in
    training mode. The points take the affine map the companion box took, so that points and box see one
    classifier: the step's fixed statistics (the trainer fixes them for every pass of a step) or, in a
    network used outside the trainer, the box centres', where the layer's forward would take the attack
    points' statistics and fold them into the running ones at every PGD step."""
    if isinstance(layer, BatchNorm) and layer.training:
        scale, shift = layer.scale_shift(*layer.statistics(box.center), box.center)
        return lambda v: v * scale + shift
    return layer


def _run(steps: Sequence[Step], x: Tensor) -> Tensor:
    for step in steps:
        x = step(x)
    return x


class Latent(Element):
    """A batch of latent boxes ``[lower, upper]`` (``(B, *F)``, at the `TAPS` layer) carried through the
    classifier: ``box`` is the interval value of the same box moved through the layers passed so far, and
    ``layers`` those layers as the steps TAPS's latent attack runs points through (each layer's concrete
    forward; see `_concrete_step` and `_Join` for the exceptions).

    ``bounds()`` are the companion box's (sound, for display and DeepLoss). Certification must never read
    a `Latent`: its margins are TAPS's estimates, so ``margin_upper`` and ``linear_lower`` refuse.
    """

    __slots__ = ("box", "layer", "layers", "lower", "seed", "upper")

    def __init__(
        self,
        lower: Tensor,
        upper: Tensor,
        box: Box,
        layer: TAPS,
        layers: Sequence[Step] = (),
        seed: int = 0,
    ) -> None:
        self.lower, self.upper, self.box = lower, upper, box
        self.layer = layer  # the TAPS layer: its settings (steps, restarts, grad_scale, soft)
        self.layers = tuple(layers)
        self.seed = seed

    def _with(self, box: Box, layers: Sequence[Step]) -> Latent:
        return Latent(self.lower, self.upper, box, self.layer, layers, self.seed)

    @property
    def shape(self) -> torch.Size:
        return self.box.shape

    @property
    def batch(self) -> int:
        return self.box.batch

    @property
    def device(self) -> torch.device:
        return self.box.device

    @property
    def dtype(self) -> torch.dtype:
        return self.box.dtype

    def through(self, layer: Any, ctx: AbstractContext) -> Element:
        # The layer's concrete forward (`layer(x)`): an abstract layer after the split is the identity on
        # points, as it should be, and never runs its training behaviour on the attack's points.
        step = _concrete_step(layer, self.box)
        box = self.box.through(layer, ctx)
        if not isinstance(box, Box):
            raise TypeError(f"{type(layer).__name__} turned the companion box into {type(box).__name__}")
        return self._with(box, (*self.layers, step))

    def bounds(self) -> tuple[Tensor, Tensor]:
        return self.box.bounds()

    def linear_lower(self, coeffs: Tensor, bias: Tensor | None = None) -> Tensor:
        raise ValueError(_ESTIMATE)

    def margin_upper(self, target: Tensor) -> Tensor:
        raise ValueError(_ESTIMATE)

    def __add__(self, other: Latent) -> Latent:
        if not isinstance(other, Latent):
            return NotImplemented
        return self._joined(other, self.box + other.box, None)

    def _joined(self, other: Latent, box: Box, dim: int | None) -> Latent:
        if other.lower is not self.lower or other.upper is not self.upper:
            raise ValueError("TAPS: branches that start from different latent boxes cannot be joined")
        common = 0
        for a, b in zip(self.layers, other.layers, strict=False):
            if a is not b:
                break
            common += 1
        join = _Join(self.layers[common:], other.layers[common:], dim)
        return self._with(box, (*self.layers[:common], join))

    @staticmethod
    def cat(values: Sequence[Latent], dim: int = 1) -> Latent:  # type: ignore[override]
        if len(values) != 2:
            raise ValueError(f"TAPS: a concatenating block joins two branches, got {len(values)}")
        first, second = values
        return first._joined(second, Box.cat([first.box, second.box], dim), dim)

    def classifier(self, x: Tensor) -> Tensor:
        """The concrete output of the layers after the split at latent points ``x`` (``(N, *F)``)."""
        return _run(self.layers, x)

    def worst_case_loss(self, target: Tensor) -> Tensor:
        """TAPS's loss, per example: ``v_i = GradExpander(CE_taps_i, grad_scale) * mean(CE_ibp)``.

        TAPS multiplies the batch means, ``GradExpander(mean(CE_taps), alpha) * mean(CE_ibp)``. The
        trainer averages what this returns, and ``mean(v) = mean(CE_taps) * mean(CE_ibp)`` exactly, with the
        gradient ``alpha * d mean(CE_taps) * mean(CE_ibp) + mean(CE_taps) * d mean(CE_ibp)``: the IBP mean is
        kept in the graph (not detached) and only the TAPS factor is expanded. A single ``v_i`` is not a
        per-example loss of its own; only the batch mean means something.
        """
        taps, ibp = self.losses(target)
        return GradExpander.apply(taps, self.layer.grad_scale) * ibp.mean()

    def losses(self, target: Tensor) -> tuple[Tensor, Tensor]:
        """``(CE_taps, CE_ibp)``, each ``(B,)``: cross-entropy on the worst-case logits (0 at the target,
        the margins ``y_j - y_t`` elsewhere) from TAPS's margins and from the companion box's."""
        taps = F.cross_entropy(self.taps_margins(target), target, reduction="none")
        ibp = F.cross_entropy(self.box.margin_upper(target), target, reduction="none")
        return taps, ibp

    def taps_margins(self, target: Tensor) -> Tensor:
        """``(B, C)``: TAPS's estimate of the largest ``y_j - y_t`` over the latent box (0 at ``t``), at the
        pivotal points the attack found, with gradients into the classifier's weights and, through the
        gradient connector, into ``lower`` and ``upper``."""
        classes = self.box.shape[1]
        _rows, others = margin_others(target, classes, self.lower.dtype)
        points = self.pivotal_points(target, others)
        lower, upper = self.lower.unsqueeze(1), self.upper.unsqueeze(1)
        x = GradientLink.apply(lower, upper, points, self.layer.soft)
        margins = self._margins(x, target, others)
        return margins.new_zeros((target.shape[0], classes)).scatter(1, others, margins)

    def _margins(self, x: Tensor, target: Tensor, others: Tensor) -> Tensor:
        """``(B, K - 1)``: ``y_j - y_t`` at the points ``x`` ``(B, K - 1, *F)``, point ``k`` for the class
        ``others[:, k]``."""
        b, k = x.shape[:2]
        y = self.classifier(x.reshape(b * k, *x.shape[2:])).reshape(b, k, -1)
        mine = y.gather(2, others.unsqueeze(2)).squeeze(2)
        theirs = y.gather(2, target.view(b, 1, 1).expand(b, k, 1)).squeeze(2)
        return mine - theirs

    def pivotal_points(self, target: Tensor, others: Tensor) -> Tensor:
        """``(B, K - 1, *F)``, detached: for each example and class ``j != t`` (``others``), the point of
        the latent box with the largest ``y_j - y_t`` that PGD found, the best of ``restarts`` tries."""
        settings = self.layer
        steps = settings.steps
        b, k = others.shape
        lower = self.lower.detach().unsqueeze(1).expand(b, k, *self.lower.shape[1:])
        upper = self.upper.detach().unsqueeze(1).expand_as(lower)
        width = upper - lower
        # Seeded by the training time (the layer sees no generator of the run's): a step draws the same
        # starts whether or not the run was resumed before it.
        generator = torch.Generator(device=lower.device).manual_seed(self.seed)
        best = best_margin = None
        with torch.enable_grad():
            for _ in range(settings.restarts):
                noise = torch.rand(lower.shape, generator=generator, dtype=lower.dtype, device=lower.device)
                x = lower + width * noise
                lr = max(0.2, 2 / steps)
                for step in range(steps):
                    if step == int(0.7 * steps):
                        lr *= 0.1
                    x = x.detach().requires_grad_(True)
                    (grad,) = torch.autograd.grad(self._margins(x, target, others).sum(), x)
                    x = torch.minimum(torch.maximum(x.detach() + lr * width * grad.sign(), lower), upper)
                with torch.no_grad():
                    margin = self._margins(x, target, others)
                if best is None:
                    best, best_margin = x, margin
                else:
                    better = margin > best_margin
                    best_margin = torch.where(better, margin, best_margin)
                    keep = better.view(b, k, *[1] * (x.dim() - 2))
                    best = torch.where(keep, x, best)
        return best.detach()

    def __repr__(self) -> str:
        return f"Latent(shape={tuple(self.shape)}, dtype={self.dtype}, after {len(self.layers)} layers)"


_ESTIMATE = (
    "TAPS's margins are a training estimate, not bounds: a network's output after a TAPS layer while "
    "training certifies nothing (verify at test time, where TAPS is the identity)"
)


def _seed(t: float) -> int:
    """A generator seed from the training time (its float's bits)."""
    return struct.unpack("<q", struct.pack("<d", float(t)))[0] & 0x7FFF_FFFF_FFFF_FFFF


class TAPS(AbstractLayer):
    """The split of TAPS: before it the network is trained with interval bounds, after it (the classifier)
    with TAPS's latent-space attack (see the module docstring).

    ``steps`` and ``restarts``: the latent PGD; ``grad_scale``: TAPS's alpha, the gradient expansion of the
    TAPS factor of the loss; ``soft``: the gradient connector's ``c``; ``start``: the training time
    (fractional epoch) from which the layer acts; before it, it passes its input on (plain IBP, as TAPS
    trains while epsilon ramps up). Only while training (``only_train`` must be True: TAPS's margins are
    estimates). A box or hybrid zonotope becomes a `Latent` of its interval bounds; points and the linear
    relaxation (`Symbolic`, CROWN-IBP) pass unchanged.
    """

    def __init__(
        self,
        steps: int = 20,
        restarts: int = 1,
        grad_scale: float = 5.0,
        soft: float = 0.5,
        start: float = 0.0,
        only_train: bool = True,
    ) -> None:
        if not only_train:
            raise ValueError("TAPS: only_train must be True (its margins are estimates, not bounds)")
        if steps < 1 or restarts < 1:
            raise ValueError(f"TAPS: steps and restarts must be >= 1, got {steps} and {restarts}")
        if not 0 < soft <= 1:
            raise ValueError(f"TAPS: soft must be in (0, 1], got {soft}")
        if grad_scale <= 0:
            raise ValueError(f"TAPS: grad_scale must be > 0, got {grad_scale}")
        super().__init__(only_train=True)
        self.steps, self.restarts = int(steps), int(restarts)
        self.grad_scale, self.soft, self.start = float(grad_scale), float(soft), float(start)

    def abstract(self, x: Value, ctx: AbstractContext) -> Value:
        if isinstance(x, (Tensor, Symbolic)) or not ctx.training or ctx.t < self.start:
            return x
        if isinstance(x, Latent):
            raise ValueError("TAPS: a network splits once; a second TAPS layer follows the first")
        if isinstance(x, (Box, HybridZonotope)):
            return self.latent(x, ctx)
        raise TypeError(f"TAPS cannot take a {type(x).__name__}")

    def latent(self, x: Box | HybridZonotope, ctx: AbstractContext) -> Latent:
        """The `Latent` of the element's interval bounds (a box is its own companion)."""
        lower, upper = x.bounds()
        box = x if isinstance(x, Box) else Box.from_bounds(lower, upper)
        return Latent(lower, upper, box, self, seed=_seed(ctx.t))

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Element:
        return self.latent(x, ctx)

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> Element:
        return self.latent(x, ctx)

    def extra_repr(self) -> str:
        return (
            f"steps={self.steps}, restarts={self.restarts}, grad_scale={self.grad_scale:g}, "
            f"soft={self.soft:g}, start={self.start:g}, only_train=True"
        )
