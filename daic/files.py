"""Files written whole or not at all, by every stage: checkpoints, run folders, records, sources that
`daic fmt` rewrites. Nothing here imports torch, so that the commands that only read sources stay light."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def write_atomic(
    path: str | Path, write: Callable[[IO[bytes]], None], before_rename: Callable[[], None] | None = None,
    mode: int | None = None,
) -> None:  # fmt: skip
    """Write `path` whole or not at all: `write` fills a temporary file beside it, which is synced and
    renamed over `path`; the folder is synced too, so that the rename survives a crash of the machine. On
    any failure the temporary file is removed and the error raised. `before_rename` runs once the data is on
    disk (a test stops a run there to leave a temporary file behind, as a kill would). `mode`: the new
    file's permissions (default: a new file's, by the umask)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        # mkstemp's 0600 would make this the folder's one private file
        os.chmod(tmp, 0o666 & ~_umask() if mode is None else mode & 0o7777)
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
