"""Compiles a C source of this folder once per machine and loads it with ctypes.

The kernels are plain C functions over flat arrays, with no PyTorch headers: a build takes a fraction of a
second with the system's C compiler, and installing daic needs no compiler at all. Where none works (or with
``DAIC_NATIVE=0``) `load` says why and the callers keep their composed-ATen paths, which compute the same
values.

Builds are cached under ``$DAIC_CACHE_DIR`` (default ``~/.cache/daic``), keyed by the source, the flags and
the processor (``-march=native`` code must not run on another CPU that shares the home directory). A build
is written to a temporary file and renamed, so processes that build at once (data-parallel ranks) never
load a half-written library.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sysconfig
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

FLAG_SETS: tuple[tuple[str, ...], ...] = (
    ("-O3", "-march=native", "-fno-trapping-math", "-fopenmp"),
    ("-O3", "-fno-trapping-math", "-fopenmp"),
    ("-O3", "-fno-trapping-math"),
)
"""Tried in order; the first that compiles and loads is used. -fno-trapping-math lets the compiler turn the
kernels' selects into vector blends; -fopenmp links libgomp.so.1, which in a PyTorch process is PyTorch's
own, so the kernels run on its thread pool."""

BUILD_TIMEOUT_S = 120


@dataclass(frozen=True)
class Loaded:
    """A loaded library, or None and the reason it is not there."""

    library: ctypes.CDLL | None
    detail: str


def cache_dir() -> Path:
    root = os.environ.get("DAIC_CACHE_DIR")
    if root:
        return Path(root) / "kernels"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "daic" / "kernels"


def find_compiler() -> str | None:
    for candidate in (os.environ.get("CC"), sysconfig.get_config_var("CC"), "cc", "gcc", "clang"):
        if candidate:
            found = shutil.which(candidate.split()[0])
            if found:
                return found
    return None


def processor() -> str:
    """What identifies this CPU's instruction set: its model and feature flags where Linux lists them."""
    try:
        with open("/proc/cpuinfo") as info:
            lines = [line for line in info if line.startswith(("model name", "flags", "Features"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return f"{platform.machine()} {platform.processor()}"


def _build(compiler: str, source: Path, flags: tuple[str, ...], target: Path) -> str | None:
    """Compiles `source` into `target`; None on success, else the compiler's complaint."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=target.stem, suffix=".tmp")
        os.close(handle)
    except OSError as error:
        return f"cannot write the cache {target.parent}: {error}"
    try:
        command = [compiler, *flags, "-fPIC", "-shared", "-o", temporary, str(source)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if done.returncode != 0:
            return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        os.replace(temporary, target)
        return None
    except (OSError, subprocess.SubprocessError) as error:
        return str(error)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


@cache
def load(name: str) -> Loaded:
    """The library built from ``<name>.c`` beside this file (built first if the cache lacks it)."""
    if os.environ.get("DAIC_NATIVE", "1") == "0":
        return Loaded(None, "disabled by DAIC_NATIVE=0")
    source = Path(__file__).with_name(f"{name}.c")
    compiler = find_compiler()
    if compiler is None:
        return Loaded(None, "no C compiler found (set CC)")
    identity = source.read_bytes() + processor().encode()
    failures = []
    for flags in FLAG_SETS:
        key = hashlib.sha256(identity + " ".join(flags).encode()).hexdigest()[:16]
        target = cache_dir() / f"{name}-{key}.so"
        if not target.exists():
            failure = _build(compiler, source, flags, target)
            if failure is not None:
                failures.append(f"{' '.join(flags)}: {failure}")
                continue
        try:
            return Loaded(ctypes.CDLL(str(target)), f"{target} ({' '.join(flags)})")
        except OSError as error:
            failures.append(f"{' '.join(flags)}: {error}")
    return Loaded(None, f"could not build {source.name} with {compiler}: " + "; ".join(failures))
