"""Checkpoints written atomically: to a temporary file beside the target, then renamed over it, so an
interrupted run never leaves half a checkpoint."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def save_atomic(state: dict[str, Any], path: str | Path) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would make this the folder's one private file
        with os.fdopen(fd, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: str | Path, device: str | torch.device = "cpu") -> dict[str, Any]:
    # weights_only: a checkpoint holds tensors, numbers and strings; refusing anything else means a file
    # from elsewhere cannot run code when loaded.
    return torch.load(Path(path), map_location=device, weights_only=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
