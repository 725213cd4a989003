"""Checkpoints, written whole or not at all and refused when damaged.

A checkpoint is written to a temporary file beside the target, synced to disk, then renamed over it, so an
interrupted run never leaves half a checkpoint (only, after a kill, a temporary file that `temporaries`
finds). It is torch's zip archive, which stores a CRC-32 of every record; reading checks them all, so a
file damaged on disk is refused rather than loaded with some of its weights changed.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch


class DamagedCheckpoint(Exception):
    """A file that is not a whole checkpoint archive, or whose records do not match their checksums."""


def write_atomic(
    path: str | Path, write: Callable[[IO[bytes]], None], before_rename: Callable[[], None] | None = None
) -> None:
    """Write `path` whole or not at all: `write` fills a temporary file beside it, which is synced and
    renamed over `path`; the folder is synced too, so that the rename survives a crash of the machine.
    On any failure the temporary file is removed and the error raised. `before_rename` runs once the data is
    on disk (a test stops a run there to leave a temporary file behind, as a kill would)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would make this the folder's one private file
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        if before_rename is not None:
            before_rename()
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _sync_folder(target.parent)


def temporaries(path: str | Path) -> list[Path]:
    """The temporary files `write_atomic` left beside `path` when it was killed while writing."""
    target = Path(path)
    return sorted(target.parent.glob(f".{target.name}.*.tmp"))


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


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # a platform or file system that cannot open folders: the rename is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
