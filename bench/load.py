"""How daic degrades on a busy machine: the README's quick start, a `daic init` project's run and one VNN-LIB
property, each alone and beside one and two CPU-bound processes (Python busy loops), with daic's default
threads (`compiler/commands/threads.py`: a thread per core the last minute's load leaves free, waiting
passively) and with the default before it (a thread per core, OpenMP's own waiting: OMP_NUM_THREADS set
to the core count), timed as the wall-clock seconds of the command.

    python bench/load.py [--hogs 0,1,2] [--workloads quickstart,project,vnnlib] [--settle 5] [--reps 1]

The busy loops start `--settle` seconds before each group of timings (a machine that was busy before the
command); with `--reps N` each figure is the median of N runs, the two settings taking turns.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DAIC = [sys.executable, "-m", "daic"]
HOG = [sys.executable, "-c", "while True: pass"]
SETTINGS = {
    "daic's default": {},
    "a thread per core": {"OMP_NUM_THREADS": str(len(os.sched_getaffinity(0)))},
}


def workloads(folder: Path) -> dict[str, list[str]]:
    """Each workload's command; the VNN-LIB property is made once, from a quick start's network."""
    project = folder / "project"
    subprocess.run([*DAIC, "init", str(project)], check=True, capture_output=True)
    trained = folder / "trained"
    quickstart = ROOT / "examples" / "quickstart.dai"
    subprocess.run([*DAIC, "run", str(quickstart), "--out", str(trained)], check=True, capture_output=True)
    net = ROOT / "examples" / "digits_conv.net"
    export = [*DAIC, "export", str(net), "--weights", str(trained / "checkpoint.pt"), "--onnx"]
    props = folder / "props"
    command = [*export, str(folder / "net.onnx"), "--vnnlib", str(props), "--limit", "1", "--eps", "0.15"]
    subprocess.run(command, check=True, capture_output=True)
    prop = next(props.glob("*.vnnlib"))
    return {
        "quickstart": [*DAIC, "run", str(quickstart), "--out", str(folder / "q")],
        "project": [*DAIC, "run", str(project / "train.dai"), "--out", str(folder / "p")],
        "vnnlib": [
            *DAIC,
            "verify",
            str(folder / "net.onnx"),
            "--vnnlib",
            str(prop),
            "--out",
            str(folder / "v.jsonl"),
        ],
    }


def timed(command: list[str], env: dict[str, str], folder: Path) -> float:
    for leftover in ("q", "p", "v.jsonl"):
        subprocess.run(["rm", "-rf", str(folder / leftover)], check=True)
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hogs", default="0,1,2")
    parser.add_argument("--workloads", default="quickstart,project,vnnlib")
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    with tempfile.TemporaryDirectory(prefix="daic-load-") as name:
        folder = Path(name)
        commands = workloads(folder)
        chosen = args.workloads.split(",")
        print(f"{'busy processes':<16}{'workload':<12}" + "".join(f"{s:>20}" for s in SETTINGS))
        for hogs in (int(n) for n in args.hogs.split(",")):
            running = [subprocess.Popen(HOG) for _ in range(hogs)]
            try:
                time.sleep(args.settle if hogs else 0)
                for workload in chosen:
                    runs = [
                        [timed(commands[workload], {**base, **env}, folder) for env in SETTINGS.values()]
                        for _ in range(args.reps)
                    ]
                    seconds = [statistics.median(column) for column in zip(*runs, strict=True)]
                    print(f"{hogs:<16}{workload:<12}" + "".join(f"{s:>19.1f}s" for s in seconds), flush=True)
            finally:
                for process in running:
                    process.kill()


if __name__ == "__main__":
    main()
