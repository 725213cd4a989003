"""The hybrid zonotope domain (paper Section 2) with correlated terms batched for conv and linear layers.

A hybrid zonotope over a batch of ``B`` samples with feature shape ``F`` holds

- ``head``   ``(B, *F)``      the center h_C,
- ``beta``   ``(B, *F)``      the uncorrelated coefficient h_B >= 0,
- ``errors`` ``(m, B, *F)``   the correlated coefficients h_E, term-major, so that an affine layer runs all
  ``m`` terms at once on the folded batch ``(m * B, *F)``; ``m`` may be 0,
- ``ids``    ``(m, B)``       int64 identity of each term slot per sample (see `term_ids`).

Terms just made by a correlation layer have one nonzero coefficient each. They are kept lazily as
``onehot = (positions, values)``, both ``(k, B)`` (flat neuron index and coefficient per sample), after the
dense ones: the interval concretization, Flatten and Linear use them without materialising ``k * B * p``
zeros (a Linear layer gathers ``k`` columns of its weight instead of multiplying by ``k`` dense maps).
Convolutions turn them into `LocalTerms`, kept between the dense and the one-hot ones: terms nonzero only in
a window of a ``(C, H, W)`` map, which convolutions, ReLUs, sums of branches and the decorrelation layers
handle window by window. Any other use of ``errors`` materialises the lazy terms once (``dense_errors``
materialises the local ones only).

Each sample is its own zonotope: sample ``s`` denotes
``{head[s] + beta[s] * b + sum_j errors[j, s] * e_j | b in [-1, 1]^F, e in [-1, 1]^m}``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from daic.runtime.domains.box import Box
from daic.runtime.domains.element import Element, at_target
from daic.runtime.domains.fused import abs_sum_terms, split_terms, term_chunks
from daic.runtime.domains.local_terms import LocalTerms
from daic.runtime.domains.rounding import (
    Rounding,
    enclosing_radius,
    gamma,
    rounded,
    rounds_outward,
    underflow,
    unit,
)
from daic.runtime.domains.rounding import down as round_down
from daic.runtime.domains.rounding import up as round_up
from daic.runtime.domains.term_ids import (
    DEAD,
    compact_union,
    drops_dead_terms,
    empty_ids,
    fresh_ids,
    union_layout,
)

if TYPE_CHECKING:
    from daic.runtime.context import AbstractContext


class HybridZonotope(Element):
    __slots__ = ("_dense", "_local", "_magnitude", "_onehot", "beta", "head", "ids")

    def __init__(
        self,
        head: Tensor,
        beta: Tensor | None = None,
        errors: Tensor | None = None,
        ids: Tensor | None = None,
        *,
        onehot: tuple[Tensor, Tensor] | None = None,
        local: LocalTerms | None = None,
    ) -> None:
        """``errors`` are the dense terms; ``local`` and ``onehot`` optional lazy terms after them, in
        this order; ``ids`` (fresh when omitted) covers all."""
        if beta is None:
            beta = torch.zeros_like(head)
        if beta.shape != head.shape:
            raise ValueError(f"HybridZonotope: beta {tuple(beta.shape)} != head {tuple(head.shape)}")
        if errors is None:
            errors = head.new_zeros((0, *head.shape))
        if errors.shape[1:] != head.shape:
            raise ValueError(
                f"HybridZonotope: errors {tuple(errors.shape)} must be (m, *{tuple(head.shape)})"
            )
        m = errors.shape[0]
        if local is not None:
            if local.values.shape[1:3] != head.shape[:2] or (local.height, local.width) != head.shape[2:]:
                raise ValueError("HybridZonotope: local terms must be windows of the (B, C, H, W) map")
            m += local.k
        if onehot is not None:
            if onehot[0].shape != onehot[1].shape or onehot[0].shape[1:] != head.shape[:1]:
                raise ValueError("HybridZonotope: onehot positions and values must both be (k, B)")
            m += onehot[0].shape[0]
        if ids is None:
            ids = fresh_ids(m, head.shape[0], head.device) if m else empty_ids(head.shape[0], head.device)
        if ids.shape != (m, head.shape[0]):
            raise ValueError(f"HybridZonotope: ids {tuple(ids.shape)} must be {(m, head.shape[0])}")
        self.head = head
        self.beta = beta
        self._dense = errors
        self._local = local
        self._onehot = onehot
        self.ids = ids
        self._magnitude: Tensor | None = None  # with outward rounding: a bound of `magnitude()`

    # ----------------------------------------------------------------------------------------------
    # construction

    @classmethod
    def from_box(cls, box: Box) -> HybridZonotope:
        """The box as a hybrid zonotope with no correlated terms (paper Section 2)."""
        return cls(box.center, box.radius)

    @classmethod
    def from_bounds(cls, lower: Tensor, upper: Tensor) -> HybridZonotope:
        center = (upper + lower) / 2
        if rounds_outward():
            return cls(center, enclosing_radius(center, lower, upper))
        return cls(center, (upper - lower) / 2)

    @classmethod
    def exact_from_bounds(cls, lower: Tensor, upper: Tensor) -> HybridZonotope:
        """The box with one correlated term per input dimension and ``beta = 0`` (for HBox certification).

        It denotes the same set as `from_bounds`, but every later transformer keeps the input dimensions
        correlated. It has ``m = numel`` terms, so it is meant for small inputs or for certification.
        """
        box = cls.from_bounds(lower, upper)
        n = box.numel
        positions = torch.arange(n, device=lower.device)[:, None].expand(n, box.batch)
        return box.correlate(positions)

    def replace(
        self,
        head: Tensor,
        beta: Tensor,
        errors: Tensor,
        onehot: tuple[Tensor, Tensor] | None = None,
        local: LocalTerms | None = None,
    ) -> HybridZonotope:
        """A value with the same term slots (and therefore the same ids) as this one.

        ``errors`` holds all ``m`` terms, or, with ``local`` and ``onehot``, the dense ones before those.
        """
        return HybridZonotope(head, beta, errors, self.ids, onehot=onehot, local=local)

    # ----------------------------------------------------------------------------------------------
    # correlated terms

    @property
    def errors(self) -> Tensor:
        """All ``m`` correlated terms, dense ``(m, B, *F)`` (materialises pending lazy terms once)."""
        self._materialize_local()
        if self._onehot is not None:
            self._dense = torch.cat([self._dense, self._onehot_terms()], dim=0)
            self._onehot = None
        return self._dense

    @property
    def dense_errors(self) -> Tensor:
        """The terms before the one-hot ones (the first ``m - k`` slots), dense; see `onehot`."""
        self._materialize_local()
        return self._dense

    @property
    def local(self) -> LocalTerms | None:
        """Pending windowed terms, in the slots after the dense ones; see `LocalTerms`."""
        return self._local

    def term_parts(self) -> tuple[Tensor, LocalTerms | None, tuple[Tensor, Tensor] | None]:
        """The dense, local and one-hot terms as they are held (nothing materialised)."""
        return self._dense, self._local, self._onehot

    def _materialize_local(self) -> None:
        if self._local is not None:
            local = self._local.dense()
            self._dense = local if self._dense.shape[0] == 0 else torch.cat([self._dense, local], dim=0)
            self._local = None

    @property
    def onehot(self) -> tuple[Tensor, Tensor] | None:
        """Pending one-hot terms ``(positions, values)``, each ``(k, B)``, in the last ``k`` slots."""
        return self._onehot

    def _onehot_terms(self) -> Tensor:
        assert self._onehot is not None
        positions, values = self._onehot
        k, b, n = positions.shape[0], self.batch, self.numel
        term_idx = torch.arange(k, device=self.device)[:, None].expand(k, b)
        batch_idx = torch.arange(b, device=self.device)[None, :].expand(k, b)
        terms = values.new_zeros((k, b, n)).index_put((term_idx, batch_idx, positions), values)
        return terms.reshape(k, *self.shape)

    # ----------------------------------------------------------------------------------------------
    # shape

    @property
    def m(self) -> int:
        return self.ids.shape[0]

    @property
    def batch(self) -> int:
        return self.head.shape[0]

    @property
    def shape(self) -> torch.Size:
        return self.head.shape

    @property
    def numel(self) -> int:
        """Neurons per sample."""
        return self.head[0].numel()

    @property
    def device(self) -> torch.device:
        return self.head.device

    @property
    def dtype(self) -> torch.dtype:
        return self.head.dtype

    # ----------------------------------------------------------------------------------------------
    # interval concretization

    def total_error(self) -> Tensor:
        """epsilon_H(h) = h_B + sum_j |h_E,j| per neuron."""
        total = self.beta
        if self._dense.shape[0]:
            total = total + abs_sum_terms(self._dense)
        if self._local is not None:
            total = self._local.abs_sum(total)
        if self._onehot is not None:
            positions, values = self._onehot
            flat = torch.zeros_like(total).reshape(self.batch, -1)
            flat = flat.scatter_add(1, positions.T, values.abs().T)
            total = total + flat.reshape(self.shape)
        return total

    def lower(self) -> Tensor:
        return self.bounds()[0]

    def upper(self) -> Tensor:
        return self.bounds()[1]

    def bounds(self) -> tuple[Tensor, Tensor]:
        err = self.total_error()
        if rounds_outward():  # the sum of m + 1 magnitudes, then one subtraction each
            err = round_up(err * (1 + gamma(self.m, self.dtype)) + underflow(self.m, self.dtype))
            return round_down(self.head - err), round_up(self.head + err)
        return self.head - err, self.head + err

    def to_box(self) -> Box:
        return Box(self.head, self.total_error())

    def through(self, layer: Any, ctx: AbstractContext) -> Element:
        return rounded(self, layer, layer.abstract_hz(self, ctx))

    def magnitude(self) -> Tensor:
        """``(B,)``: a bound of the largest ``|head| + beta + sum_j |e_j|`` (the running bound that outward
        rounding keeps, else computed)."""
        if self._magnitude is None:
            lower, upper = self.bounds()
            self._magnitude = round_up(torch.maximum(lower.abs(), upper.abs()).flatten(1).amax(1))
        return self._magnitude

    def widened(self, rounding: Rounding, magnitude: Tensor) -> HybridZonotope:
        """The value with beta grown by the rounding errors of the layer that made it, from an input of
        the given magnitude (see `rounding`): head, beta and every term each within ``gamma(n + 1)`` of
        ``gain M + |constant|``; the output's magnitude, bounded alike, covers its elementwise rounding."""
        dtype = self.dtype
        m = magnitude.view(-1, *[1] * (self.head.dim() - 1))
        largest = rounding.largest_gain() * magnitude + rounding.largest_constant()
        slack = gamma(rounding.terms, dtype) * (rounding.gain * m + rounding.constant)
        slack = slack + underflow(rounding.terms, dtype) + (4 * unit(dtype)) * largest.view_as(m)
        out = self.replace(self.head, round_up(self.beta + slack), self._dense, self._onehot, self._local)
        out._magnitude = round_up(
            largest + slack.flatten(1).amax(1) if torch.is_tensor(slack) else largest + slack
        )
        return out

    def centre(self) -> Tensor:
        return self.head

    def linear_lower(self, coeffs: Tensor, bias: Tensor | None = None) -> Tensor:
        """Exact for the zonotope: ``A head - |A| beta - sum_j |A e_j|``, the terms mapped one by one."""
        flat = coeffs.flatten(2)
        low = torch.bmm(flat, self.head.flatten(1).unsqueeze(2)).squeeze(2)
        low = low - torch.bmm(flat.abs(), self.beta.flatten(1).unsqueeze(2)).squeeze(2)
        if self.m:
            errors = self.errors.flatten(2)  # (m, B, n)
            low = low - torch.einsum("bsn,mbn->mbs", flat, errors).abs().sum(0)
        if rounds_outward():  # sums of n products, then of m + 2 of those
            size = (self.head.abs() + self.total_error()).flatten(1).unsqueeze(2)
            error = gamma(flat.shape[2] + self.m + 2, self.dtype) * torch.bmm(flat.abs(), size).squeeze(2)
            low = round_down(low - round_up(error + underflow(flat.shape[2] * (self.m + 1), self.dtype)))
        return low if bias is None else low + bias

    def margin_upper(self, target: Tensor) -> Tensor:
        """Term by term: ``y_j - y_t`` keeps the correlations that CorrelateAll kept up to the logits."""
        if self.head.dim() != 2:
            raise ValueError(f"network outputs must be (batch, classes), got {tuple(self.shape)}")
        head = self.head - at_target(self.head, target)
        errors = self.errors
        spread = (
            (errors - at_target(errors, target)).abs().sum(0) if errors.shape[0] else torch.zeros_like(head)
        )
        upper = head + spread + self.beta + at_target(self.beta, target)
        return upper.scatter(1, target[:, None], 0.0)

    # ----------------------------------------------------------------------------------------------
    # layer helpers

    def map_errors(self, fn: Callable[[Tensor], Tensor], out_shape: torch.Size) -> Tensor:
        """Applies a batched map to all terms at once by folding the term axis into the batch.

        ``out_shape`` is the ``(B, *F')`` shape the map gives for the head; it fixes the result's shape
        when ``m = 0`` (the map is then not called).
        """
        return map_terms(self.errors, fn, out_shape)

    def map_dense_errors(self, fn: Callable[[Tensor], Tensor], out_shape: torch.Size) -> Tensor:
        """`map_errors` on the dense terms only, leaving pending one-hot terms pending."""
        return map_terms(self.dense_errors, fn, out_shape)

    # ----------------------------------------------------------------------------------------------
    # correlation and decorrelation (paper Section 3)

    def correlate(self, positions: Tensor, live: Tensor | None = None) -> HybridZonotope:
        """Moves ``beta`` at the given neurons into ``k`` new correlated terms.

        ``positions`` is ``(k, B)``: flat neuron indices per sample, ascending, so that new term ``t``
        belongs to the neuron ``i`` with ``t = |P_<i|`` (the paper's ordering). ``live`` (``(k, B)`` bool)
        marks slots that must stay empty (duplicates); their positions must repeat a live position.
        The concretization is unchanged: each moved coefficient is ``|beta_i| = beta_i``.
        """
        k, b = positions.shape[0], self.batch
        if k == 0:
            return self
        if positions.dtype != torch.int64:
            raise TypeError("correlate: positions must be int64")
        # Indexed in place of a flat view, so that a channels-last beta (see `layers.affine`) is not copied
        # and its gradient keeps that layout.
        at = (_batch_index(positions), *_unravel(positions, self.shape[1:]))
        moved = self.beta[at]  # (k, B)
        if live is not None:
            moved = moved * live.to(moved.dtype)
        beta = self.beta.index_put(at, torch.zeros((), dtype=self.dtype, device=self.device))
        ids = torch.cat([self.ids, fresh_ids(k, b, self.device)], dim=0)
        if self._onehot is not None:
            positions = torch.cat([self._onehot[0], positions], dim=0)
            moved = torch.cat([self._onehot[1], moved], dim=0)
        return HybridZonotope(self.head, beta, self._dense, ids, onehot=(positions, moved), local=self._local)

    def scale_terms(self, factor: Tensor, head: Tensor, beta: Tensor) -> HybridZonotope:
        """The value ``(head, beta)`` with every term of this one multiplied by ``factor`` (``(B, *F)``, per
        neuron): the correlated part of an elementwise transformer (the ReLUs).

        Under `dropping_dead_terms` (certification), the slots that the scaling leaves all zero in a sample
        are dropped. Each sample keeps its live slots first, in their order; the value has as many slots as
        the sample with the most, the others padded with zero slots of id `DEAD`. Dense terms are checked
        chunk by chunk, so no full-size temporary is made.
        """
        if self._onehot is not None:
            _ = self.errors  # materialises the one-hot terms (and the local ones, which come before)
        dense, local, m_dense = self._dense, self._local, self._dense.shape[0]
        if not drops_dead_terms() or self.m == 0:
            scaled = local.scaled(factor) if local is not None else None
            return HybridZonotope(head, beta, dense * factor if m_dense else dense, self.ids, local=scaled)
        order, dense_ids = _live_first(_live_dense(dense, factor), self.ids[:m_dense])
        if order is None:
            dense = dense * factor
        elif m_dense:
            dense = dense[order, _batch_index(order)].mul_(factor)
        if local is None:
            return HybridZonotope(head, beta, dense, dense_ids)
        local = local.scaled(factor)
        order, local_ids = _live_first(local.live(), self.ids[m_dense:])
        if order is not None:
            local = local.select(order)
        return HybridZonotope(head, beta, dense, torch.cat([dense_ids, local_ids]), local=local)

    def concretize(self) -> HybridZonotope:
        """DecorrelateAll: every correlated term is folded into ``beta``; ``m`` becomes 0."""
        return HybridZonotope(self.head, self.total_error())

    def decorrelate_min(self, keep: int) -> HybridZonotope:
        """Keeps, per sample, the ``keep`` terms with the largest sum of |coefficients| over all neurons,
        in their original order; the others are added (as absolute values) to ``beta``.

        This is the paper's DecorrelateMin (remove the ``m - keep`` smallest), applied to each sample's
        zonotope separately; of terms with equal sums the earlier is kept (either is sound; this way an
        image's bound never depends on its batch mates).
        """
        m, b = self.m, self.batch
        keep = max(0, min(keep, m))
        if keep == m:
            return self
        if keep == 0:
            return self.concretize()
        local_only = self._local is not None and self._onehot is None and self._dense.shape[0] == 0
        with torch.no_grad():  # the choice of terms is not differentiated
            # (m, B): the sum of |coefficients| of each term
            score = self._local.abs_totals() if local_only else self.errors.abs().reshape(m, b, -1).sum(2)
            # Ties go to the earlier term: a rule of the sample alone. (topk breaks them by the count and
            # place of the other slots, which hold the batch mates' dead terms under dropping_dead_terms.)
            ranked = torch.sort(score, dim=0, descending=True, stable=True).indices[:keep]
            kept = ranked.sort(dim=0).values  # (keep, B), original order
            batch_idx = torch.arange(b, device=self.device)[None, :].expand(keep, b)
            removed = torch.ones((m, b), dtype=self.dtype, device=self.device)
            removed = removed.index_put(
                (kept, batch_idx), torch.zeros((), dtype=self.dtype, device=self.device)
            )
        ids = self.ids[kept, batch_idx]
        if local_only:
            # Windows: the removed terms' |coefficients| are summed into beta where they lie.
            gone = self._local.weighted(removed)
            beta = gone.abs_sum(self.beta)
            return HybridZonotope(self.head, beta, self._dense, ids, local=self._local.select(kept))
        errors, removed_sum = split_terms(self.errors, kept, removed)
        return HybridZonotope(self.head, self.beta + removed_sum, errors, ids)

    # ----------------------------------------------------------------------------------------------
    # branches: sums and concatenations align terms by id

    def __add__(self, other: HybridZonotope) -> HybridZonotope:
        if not isinstance(other, HybridZonotope):
            return NotImplemented
        total = self._sum(other)
        if rounds_outward():  # one addition per coefficient
            total = total.widened(Rounding(), self.magnitude() + other.magnitude())
        return total

    def _sum(self, other: HybridZonotope) -> HybridZonotope:
        if self.shape != other.shape:
            raise ValueError(f"cannot add hybrid zonotopes of shapes {self.shape} and {other.shape}")
        head = self.head + other.head
        beta = self.beta + other.beta
        if _only_local(self) and _only_local(other):
            if self.ids is other.ids:
                dest, ids = _identity_layout(self.ids), self.ids
            else:
                dest, ids = _union(self.ids, other.ids)
            live = other.ids != DEAD
            local = LocalTerms.union(self._local, other._local, dest, ids.shape[0], live)  # type: ignore[arg-type]
            return HybridZonotope(head, beta, self._dense[:0], ids, local=local)
        if self.ids is other.ids:
            # Same slots by construction (both branches kept their input's terms): add position-wise.
            return HybridZonotope(head, beta, self.errors + other.errors, self.ids)
        if other.m == 0:
            return HybridZonotope(head, beta, self.errors, self.ids)
        if self.m == 0:
            return HybridZonotope(head, beta, other.errors, other.ids)
        dest, ids = _union(self.ids, other.ids)
        grow = ids.shape[0] - self.m
        errors = torch.cat([self.errors, self.errors.new_zeros((grow, *self.errors.shape[1:]))], dim=0)
        # In place: ``errors`` is a fresh tensor that nothing else holds (cat's gradient does not need it).
        errors.index_put_((dest, _batch_index(dest)), other.errors, accumulate=True)
        return HybridZonotope(head, beta, errors, ids)

    @staticmethod
    def cat(values: Sequence[HybridZonotope], dim: int = 1) -> HybridZonotope:
        """Concatenates along feature dimension ``dim`` (batch is dimension 0, as for tensors)."""
        if dim < 0:
            dim += values[0].head.dim()
        if dim <= 0:
            raise ValueError("HybridZonotope.cat: dim must be a feature dimension (>= 1)")
        acc_ids, acc_errors = values[0].ids, [values[0].errors]
        for v in values[1:]:
            if v.ids is acc_ids:
                acc_errors.append(v.errors)
                continue
            dest, ids = _union(acc_ids, v.ids)
            grow = ids.shape[0] - acc_ids.shape[0]
            acc_errors = [torch.cat([e, e.new_zeros((grow, *e.shape[1:]))], dim=0) for e in acc_errors]
            placed = v.errors.new_zeros((ids.shape[0], *v.errors.shape[1:]))
            placed.index_put_((dest, _batch_index(dest)), v.errors, accumulate=True)
            acc_errors.append(placed)
            acc_ids = ids
        out = HybridZonotope(
            torch.cat([v.head for v in values], dim),
            torch.cat([v.beta for v in values], dim),
            torch.cat(acc_errors, dim + 1),
            acc_ids,
        )
        if rounds_outward():  # concatenation is exact
            out._magnitude = torch.stack([v.magnitude() for v in values]).amax(0)
        return out

    def __repr__(self) -> str:
        return (
            f"HybridZonotope(shape={tuple(self.shape)}, m={self.m}, dtype={self.dtype}, device={self.device})"
        )


MAP_CHUNK_BYTES = 32 * 2**20
"""Terms per call of a batched map (a convolution) are limited to this many bytes: the map's own buffers
grow with its batch (a float64 CPU convolution unfolds its input to ``k * k`` times its size), and the
exact input zonotope has one term per input dimension."""


def map_terms(terms: Tensor, fn: Callable[[Tensor], Tensor], out_shape: torch.Size) -> Tensor:
    """``fn`` on ``(m, B, *F)`` terms folded into the batch, a chunk of terms at a time (`MAP_CHUNK_BYTES`);
    ``out_shape`` (``(B, *F')``) sizes the result when ``m = 0``."""
    m, b = terms.shape[:2]
    if m == 0:
        return terms.new_zeros((0, *out_shape))
    per_term = max(1, terms[0].numel() * terms.element_size())
    step = max(1, MAP_CHUNK_BYTES // per_term)
    chunks = [fn(terms[i : i + step].reshape(-1, *terms.shape[2:])) for i in range(0, m, step)]
    out = chunks[0] if len(chunks) == 1 else torch.cat(chunks)
    return out.reshape(m, b, *out.shape[1:])


def _union(ids_a: Tensor, ids_b: Tensor) -> tuple[Tensor, Tensor]:
    """`union_layout`, without unused slots under `dropping_dead_terms` (see `compact_union`)."""
    dest, ids = union_layout(ids_a, ids_b)
    if not drops_dead_terms():
        return dest, ids  # a static size: no wait for the device
    return compact_union(dest, ids, ids_a.shape[0])


def _live_dense(dense: Tensor, factor: Tensor) -> Tensor:
    """``(m, B)``: whether dense term ``j`` of sample ``s`` is nonzero somewhere after scaling by ``factor``,
    found chunk by chunk (no temporary as large as the terms). NaN counts as nonzero."""
    m, b = dense.shape[:2]
    flat = factor.reshape(1, b, -1)
    live = torch.empty((m, b), dtype=torch.bool, device=dense.device)
    step = term_chunks(dense).step
    for start in range(0, m, step):
        live[start : start + step] = (dense[start : start + step].reshape(-1, b, flat.shape[2]) * flat).any(2)
    return live


def _live_first(live: Tensor, ids: Tensor) -> tuple[Tensor | None, Tensor]:
    """Per sample, the slots marked live first (in their order), as many as the busiest sample has.

    Returns ``(order, ids)``: ``order`` ``(keep, B)`` slot indices and their ids, `DEAD` where a sample has
    fewer live slots; ``(None, ids)`` when that keeps every slot. Reads the count: one wait for the device.
    """
    counts = live.sum(0)
    keep = int(counts.max()) if live.shape[0] else 0
    if keep == live.shape[0]:
        return None, ids
    # A stable sort of the dead flags puts each sample's live slots first, in their order.
    order = torch.sort(~live, dim=0, stable=True).indices[:keep]  # (keep, B)
    padded = torch.arange(keep, device=live.device)[:, None] >= counts[None, :]
    return order, ids[order, _batch_index(order)].masked_fill(padded, DEAD)


def _only_local(x: HybridZonotope) -> bool:
    dense, local, onehot = x.term_parts()
    return local is not None and onehot is None and dense.shape[0] == 0


def _identity_layout(ids: Tensor) -> Tensor:
    """The slot of every term in its own layout, ``(m, B)``."""
    return torch.arange(ids.shape[0], device=ids.device)[:, None].expand_as(ids)


def _unravel(flat: Tensor, shape: torch.Size) -> list[Tensor]:
    """``torch.unravel_index(flat, shape)`` with Python-number divisors: unravel_index copies the shape to
    the device as a tensor, a copy from pageable memory that makes the host wait for a GPU in every step."""
    coordinates = []
    for size in reversed(shape[1:]):
        coordinates.append(flat.remainder(size))
        flat = flat.div(size, rounding_mode="floor")
    coordinates.append(flat)
    return coordinates[::-1]


def _batch_index(dest: Tensor) -> Tensor:
    """The sample index matching ``dest`` (``(k, B)``) for advanced indexing of ``(k, B, ...)`` tensors."""
    return torch.arange(dest.shape[1], device=dest.device)[None, :].expand_as(dest)
