"""Checkpoints, written whole or not at all and refused when damaged.

A checkpoint is written to a temporary file beside the target, synced to disk, then renamed over it, so an
interrupted run never leaves half a checkpoint (only, after a kill, a temporary file that `temporaries`
finds). It is torch's zip archive, which stores a CRC-32 of every record; reading checks them all, so a
file damaged on disk is refused rather than loaded with some of its weights changed.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch

from daic.files import write_atomic


class DamagedCheckpoint(Exception):
    """A file that is not a whole checkpoint archive, or whose records do not match their checksums."""


def save_atomic(
    state: dict[str, Any], path: str | Path, before_rename: Callable[[], None] | None = None
) -> None:
    write_atomic(path, lambda handle: _save(state, handle), before_rename)


def load(path: str | Path, device: str | torch.device = "cpu") -> dict[str, Any]:
    """The checkpoint at `path`, after checking every record against its checksum. Raises
    `DamagedCheckpoint` for a damaged file and OSError for one that cannot be read."""
    _check_archive(Path(path))
    # weights_only: a checkpoint holds tensors, numbers and strings; refusing anything else means a file
    # from elsewhere cannot run code when loaded.
    try:
        return torch.load(Path(path), map_location=device, weights_only=True)
    except RuntimeError as exc:  # an archive's end records that Python's zipfile reads and torch's does not
        if "PytorchStreamReader" not in str(exc):
            raise
        raise DamagedCheckpoint(f"torch cannot read the archive ({str(exc).split('.')[0]})") from None


class _RememberingWrites:
    """A file whose failed write is remembered: torch.save swallows the error of a write (a full disk) and
    fails later with `unexpected pos N vs M`, which says nothing of the cause."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.handle.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def flush(self) -> None:
        self.handle.flush()


def _save(state: dict[str, Any], handle: IO[bytes]) -> None:
    remembering = _RememberingWrites(handle)
    try:
        torch.save(state, remembering)
    except RuntimeError:
        if remembering.error is not None:
            raise remembering.error from None
        raise


def _check_archive(path: Path) -> None:
    if path.is_dir():
        raise IsADirectoryError(21, "Is a directory", str(path))
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except zipfile.BadZipFile as exc:
        raise DamagedCheckpoint(f"not a whole checkpoint archive: {exc}") from None
    except (EOFError, ValueError) as exc:  # a record cut short, or a header that points outside the file
        raise DamagedCheckpoint(f"a record is cut short or misplaced ({exc})") from None
    if bad is not None:
        raise DamagedCheckpoint(f"its record {bad} does not match its checksum")
