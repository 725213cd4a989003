"""Identities of correlated error terms, and the union of two term layouts.

Every correlated error slot of a hybrid zonotope carries an int64 id, per sample: ``ids`` has shape
``(m, B)``. Ids are per sample because DecorrelateMin chooses which terms to keep for each sample separately,
so slot ``j`` of sample 0 and slot ``j`` of sample 1 may hold different original terms. Within one sample the
live ids are unique. Two values are summed or concatenated (residual and skip connections) by matching ids,
never by slot position: summing slot ``j`` of one branch with slot ``j`` of the other would merge two
unrelated noise symbols into one, which is unsound (it can make a coefficient cancel that must not).

A *dead* slot (id `DEAD`) holds only zeros; it appears where a term of one branch was merged into the
matching slot of the other. Zero coefficients stay zero under every transformer (affine maps have no bias on
error terms, ReLU only scales), so matching dead slots with each other is harmless.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

DEAD = -1

_lock = threading.Lock()
_next_id = 0
_dropping = threading.local()


@contextmanager
def dropping_dead_terms() -> Iterator[None]:
    """Within it, and without a gradient, values leave out the term slots that hold only zeros.

    A slot that is zero at every neuron of a sample adds nothing to that sample's set and stays zero under
    every transformer, so no bound changes; every later layer just carries fewer terms (the hybrid ReLU
    zeroes the terms of crossing and dead neurons, and in certification most die after a few layers).
    The number of slots does change, and knowing it waits for the device: so this is for certification
    (`verification.HBoxBound`), of networks with no layer that depends on that number (a DecorrelateMin that
    removes a count of terms rather than keeping one).
    """
    before = getattr(_dropping, "on", False)
    _dropping.on = True
    try:
        yield
    finally:
        _dropping.on = before


def drops_dead_terms() -> bool:
    """Whether dead term slots are left out here (see `dropping_dead_terms`)."""
    return getattr(_dropping, "on", False) and not torch.is_grad_enabled()


def reserve_ids(k: int) -> int:
    """Reserves ``k`` never-used ids and returns the first one (process-wide counter, no device sync)."""
    global _next_id
    with _lock:
        first = _next_id
        _next_id += k
    return first


def fresh_ids(k: int, batch: int, device: torch.device | str | None = None) -> Tensor:
    """``(k, batch)`` int64 ids for ``k`` new terms; every sample gets the same (new) ids."""
    first = reserve_ids(k)
    ids = torch.arange(first, first + k, dtype=torch.int64, device=device)
    return ids[:, None].expand(k, batch)


def empty_ids(batch: int, device: torch.device | str | None = None) -> Tensor:
    return torch.empty((0, batch), dtype=torch.int64, device=device)


def union_layout(ids_a: Tensor, ids_b: Tensor) -> tuple[Tensor, Tensor]:
    """Common slot layout for the terms of two values over the same batch.

    Returns ``(dest_b, ids)``: the layout keeps A's ``m_a`` slots in place and appends ``m_b`` slots for B;
    ``dest_b[j, s]`` is the slot that B's term ``j`` of sample ``s`` goes to: the slot of the same id in A
    when A has it (then B's own appended slot becomes dead), else B's appended slot ``m_a + j``. The size is
    static (``m_a + m_b``) so nothing waits for the device; DecorrelateMin later drops the dead slots first
    because their coefficients are zero.
    """
    m_a, m_b = ids_a.shape[0], ids_b.shape[0]
    if m_a == 0 or m_b == 0:
        dest_b = (m_a + torch.arange(m_b, device=ids_b.device))[:, None].expand(m_b, ids_b.shape[1])
        return dest_b, torch.cat([ids_a, ids_b], dim=0)
    slot_a = torch.arange(m_a, device=ids_a.device)[None, :, None]
    equal = ids_b[:, None, :] == ids_a[None, :, :]  # (m_b, m_a, B)
    # First matching slot of A, or m_a when there is none.
    first = torch.where(equal, slot_a, m_a).amin(dim=1)
    matched = first < m_a
    own = m_a + torch.arange(m_b, device=ids_b.device)[:, None]
    dest_b = torch.where(matched, first, own)
    ids = torch.cat([ids_a, torch.where(matched, DEAD, ids_b)], dim=0)
    return dest_b, ids


def compact_union(dest_b: Tensor, ids: Tensor, m_a: int) -> tuple[Tensor, Tensor]:
    """A `union_layout` without the appended slots that no sample uses.

    When every term of B also lives in A (a branch that only dropped terms of their common input), all of
    B's appended slots are dead and the union would double the slots for nothing. Removing them needs
    their number on the host (one wait for the device), so it is used under `dropping_dead_terms` only.
    A term of B whose id is `DEAD` holds zeros; when its own slot goes, it is sent to slot 0 (it adds 0).
    """
    appended = ids[m_a:]
    used = (appended != DEAD).any(1)  # (m_b,): some sample keeps a term of B in this slot
    if m_a == 0 or bool(used.all()):
        return dest_b, ids
    new_slot = m_a + used.cumsum(0) - 1  # where each used appended slot moves
    own = dest_b >= m_a
    j = (dest_b - m_a).clamp(min=0)
    moved = torch.where(used[j], new_slot[j], 0)
    return torch.where(own, moved, dest_b), torch.cat([ids[:m_a], appended[used]], dim=0)
