"""Checkpoints: written whole or not at all, a full disk reported as one, and a damaged file refused."""

from __future__ import annotations

import errno
import os
import zipfile

import pytest
import torch

from daic.files import temporaries
from daic.runtime.checkpoint import DamagedCheckpoint, load, save_atomic


def state() -> dict:
    g = torch.Generator().manual_seed(0)
    return {"model": {"w": torch.randn(4000, generator=g), "b": torch.randn(10, generator=g)}, "epoch": 3}


class FillingDisk:
    """A file on a disk with `room` bytes left: a write past it fails as a full disk's does."""

    def __init__(self, handle, room: int) -> None:
        self.handle, self.room = handle, room

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.handle.close()


def fill_disk_after(monkeypatch, room: int, only: str = "") -> None:
    """Every file opened with os.fdopen (as atomic writes do) whose name starts with `only` finds the disk
    full after `room` bytes."""
    real = os.fdopen

    def fdopen(fd, *args, **kwargs):
        handle = real(fd, *args, **kwargs)
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        return FillingDisk(handle, room) if name.startswith(only) else handle

    monkeypatch.setattr(os, "fdopen", fdopen)


def test_a_checkpoint_round_trips(tmp_path):
    save_atomic(state(), tmp_path / "checkpoint.pt")
    loaded = load(tmp_path / "checkpoint.pt")
    assert loaded["epoch"] == 3 and torch.equal(loaded["model"]["w"], state()["model"]["w"])
    assert temporaries(tmp_path / "checkpoint.pt") == []


def test_a_full_disk_says_so_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    target = tmp_path / "checkpoint.pt"
    save_atomic({"epoch": 2}, target)
    before = target.read_bytes()
    fill_disk_after(monkeypatch, room=5000)
    with pytest.raises(OSError) as info:
        save_atomic(state(), target)
    assert info.value.errno == errno.ENOSPC and info.value.strerror == "No space left on device"
    assert target.read_bytes() == before
    assert temporaries(target) == []


def test_damaged_checkpoints_are_refused(tmp_path):
    target = tmp_path / "checkpoint.pt"
    save_atomic(state(), target)
    good = target.read_bytes()
    with zipfile.ZipFile(target) as archive:
        weights = next(i for i in archive.infolist() if i.file_size == 4000 * 4)
    zeroed = bytearray(good)
    start = weights.header_offset + 200
    zeroed[start : start + 2000] = bytes(2000)
    flipped = bytearray(good)  # four bytes of the archive's end records, which Python's zipfile reads
    flipped[-30:-26] = bytes(b ^ 0xFF for b in flipped[-30:-26])
    for damaged, reason in [
        (bytes(zeroed), r"its record \S+/data/\d+ does not match its checksum"),
        (bytes(flipped), "torch cannot read the archive"),
        (good[: len(good) // 2], "not a whole checkpoint archive"),
        (b"", "not a whole checkpoint archive"),
    ]:
        target.write_bytes(damaged)
        with pytest.raises(DamagedCheckpoint, match=reason):
            load(target)


def test_temporaries_are_only_those_of_the_file(tmp_path):
    for name in (".checkpoint.pt.abc.tmp", ".checkpoint.pt.def.tmp", ".run.json.x.tmp", "checkpoint.pt.tmp"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in temporaries(tmp_path / "checkpoint.pt")] == [
        ".checkpoint.pt.abc.tmp",
        ".checkpoint.pt.def.tmp",
    ]
