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

import torch
from torch import Tensor

DEAD = -1

_lock = threading.Lock()
_next_id = 0


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
