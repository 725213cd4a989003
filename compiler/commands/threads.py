"""How many threads a command's PyTorch runs, chosen before it starts.

PyTorch's CPU operations run on an OpenMP team of one thread per core by default, whose threads spin
while they wait for each other. Where other processes hold some of the cores, a spinning thread burns the
time slice the thread it waits for needs: with two busy processes beside it on two cores, a digits run
took 77 s against 26 s with one thread (bench/README.md, "On a busy machine"). So, unless the user chose
(`--threads`, or OMP_NUM_THREADS), a command that runs a network takes one thread per core that the other
processes left idle over the last tenth of a second (read from /proc/stat: a load average lags by a minute,
and would count the command that just ended), and its threads wait passively (they sleep instead of
spinning), which costs a quiet machine little and a busy one much less than spinning."""

from __future__ import annotations

import os
import sys
import time

CHOSEN = "OMP_NUM_THREADS"  # the user's choice, when set (PyTorch and torchrun's workers read it)
WAITING = "OMP_WAIT_POLICY"


def cores() -> int:
    """The cores this process may run on (its affinity, which a container's cpuset narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def free_cores(busy: float | None = None) -> int:
    """The cores (at least one) that `busy` cores of other work leave (measured when not given): on 2
    cores, one busy process leaves 1."""
    if busy is None:
        busy = busy_cores()
    total = cores()
    return max(1, min(total, round(total - busy)))


WINDOW = 0.1  # seconds over which the other processes' use of the cores is measured


def busy_cores(window: float = WINDOW) -> float:
    """How many cores' worth of time the machine spent busy over the next `window` seconds, while this
    process slept (Linux's /proc/stat; elsewhere the load average of the last minute)."""
    try:
        first = _cpu_times()
        time.sleep(window)
        second = _cpu_times()
    except (OSError, ValueError, IndexError):
        try:
            return os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average either: take every core
            return 0.0
    total, idle = second[0] - first[0], second[1] - first[1]
    return 0.0 if total <= 0 else (1 - idle / total) * (os.cpu_count() or 1)


def _cpu_times() -> tuple[int, int]:
    """All CPUs' time so far, and the idle part of it (idle and waiting for input), in clock ticks."""
    with open("/proc/stat", encoding="ascii") as stat:
        ticks = [int(v) for v in stat.readline().split()[1:9]]  # user .. steal; guest time is in user's
    return sum(ticks), ticks[3] + ticks[4]


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
    OMP_NUM_THREADS); None: the default (`choose_default`)."""
    global _chosen_here
    if threads is None:
        choose_default()
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
