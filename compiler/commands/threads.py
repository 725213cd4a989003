"""How many threads a command's PyTorch runs, chosen before it starts.

PyTorch's CPU operations run on an OpenMP team of one thread per core by default, whose threads spin
while they wait for each other. Where other processes hold some of the cores, a spinning thread burns the
time slice the thread it waits for needs: with two busy processes beside it on two cores, a digits run
took 77 s against 26 s with one thread (bench/README.md, "On a busy machine"). So, unless the user chose
(`--threads`, or OMP_NUM_THREADS), a command takes one thread per core left free by the load of the last
minute, and its threads wait passively (they sleep instead of spinning), which costs a quiet machine
little and a busy one much less than spinning."""

from __future__ import annotations

import os
import sys

CHOSEN = "OMP_NUM_THREADS"  # the user's choice, when set (PyTorch and torchrun's workers read it)
WAITING = "OMP_WAIT_POLICY"


def cores() -> int:
    """The cores this process may run on (its affinity, which a container's cpuset narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def free_cores(load: float | None = None) -> int:
    """The cores the last minute's load leaves free (at least one): on 2 cores, a load of 1.0 leaves 1."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average here: take every core
            load = 0.0
    total = cores()
    return max(1, min(total, round(total - load)))


def choose_default() -> None:
    """Sets the thread count and waiting of this process and those it starts, unless the user chose, or a
    PyTorch already running here (a test, a notebook calling the command line) has its own."""
    global _chosen_here
    if "torch" in sys.modules or CHOSEN in os.environ:
        return
    os.environ[CHOSEN] = str(free_cores())
    os.environ.setdefault(WAITING, "PASSIVE")
    _chosen_here = True


def use_threads(threads: int | None) -> None:
    """`--threads`: this process's count, and that of the processes it starts (torchrun's workers read
    OMP_NUM_THREADS); None leaves the default (`choose_default`)."""
    global _chosen_here
    if threads is None:
        return
    import torch

    os.environ[CHOSEN] = str(threads)
    torch.set_num_threads(threads)
    _chosen_here = False


def share_out(processes: int) -> None:
    """The threads of `processes` workers started on this machine (torchrun would give each one): the free
    cores shared out among them, unless the user chose a count, which each worker then takes."""
    if _chosen_here or CHOSEN not in os.environ:
        os.environ[CHOSEN] = str(max(1, free_cores() // processes))


_chosen_here = False  # whether OMP_NUM_THREADS is this module's choice rather than the user's
