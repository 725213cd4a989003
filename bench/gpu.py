"""The GPU run in one go (bench/gpu.sh installs, then runs this): sections in order within a time budget,
each ending with one line of figures, its output in a file under --out, and a summary table printed last.

    python bench/gpu.py --budget 500 [--device cuda] [--sections cli,tests,search,profile,paper]
    python bench/gpu.py --budget 220 --sections bench         # the bench's tables: a call of their own
    python bench/gpu.py --budget 540 --sections cnn7          # the CNN7 rows: a GPU period of their own
    python bench/gpu.py --device cpu --tiny --budget 600      # the dry run on the CPU (tests/bench)

Sections:
- cli: the README's quick start (`daic run examples/quickstart.dai`) on the device, then `daic verify` of its
  checkpoint with a cascade that ends in branch and bound.
- tests: the whole test suite with CUDA visible (its CUDA variants run), in parallel where pytest-xdist is.
- search: bench/search.py's branch and bound (each image alone, then all together, --search-seconds an
  image) on ConvSmall at eps 0.15 on the device, from a checkpoint brought along (--search-weights;
  `IBP_01` of examples/mnist_methods.dai).
- profile: bench/profile_step.py: torch.profiler over a few training steps of ResNet-Tiny's Baseline and
  DenseNet-100's scheme, the busiest operators and the kernels launched a step (profile.txt).
- bench: bench/suite.py's main, methods, hbox and crown tables on the device (peak memory from
  torch.cuda.max_memory_allocated on a GPU).
- paper: the paper's epochs (ResNet-Tiny Baseline and FewCombo, ResNet-34 InSampLPA, DenseNet-100) on
  CIFAR-10-shaped data, and HBox certification of ResNet-Tiny over 10,000 images.
- cnn7: the methods of examples/mnist_methods.dai on CNN7 (examples/mnist_cnn7.net; TAPS with
  examples/mnist_cnn7_taps.net) at eps 0.1 and 0.3, several runs at once, each then certified by
  `daic verify` with the cascade of docs/certification.md (Box, PGD, CROWN, branch and bound).

A section starts only if the time left can hold its least useful run, and is stopped (SIGINT, then SIGKILL)
when the budget would be overrun, with a line saying so; what it finished is in its file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESERVE = 15  # seconds kept for the summary after the last section
# The search's test images: eight that `Box, PGD, CROWN, AlphaCROWN(steps=20)` and then branch and bound alone
# for 5 s on the CPU leave open at eps 0.15, for the checkpoint of IBP_01 (seed 0) brought along.
SEARCH_IMAGES = "19,136,131,33,99,132,86,113"

# The CNN7 rows (examples/mnist_methods.dai): scheme -> network. TAPS needs the network with its layer.
CNN7 = "examples/mnist_cnn7.net"
CNN7_TAPS = "examples/mnist_cnn7_taps.net"
CNN7_SCHEMES = {
    **{s: CNN7 for s in ("IBP_01", "IBP_01_x2", "CROWNIBP_01", "SABR_01", "SABR_01_x2", "MTLIBP_01_x2")},
    **{s: CNN7 for s in ("CCIBP_01_x2", "ExpIBP_01_x2", "IBP_03", "CROWNIBP_03", "SABR_03", "MTLIBP_03")},
    **{s: CNN7 for s in ("CCIBP_03", "ExpIBP_03")},
    "TAPS_01": CNN7_TAPS,
    "TAPS_03": CNN7_TAPS,
}


@dataclass
class Row:
    section: str
    status: str = "skipped"
    seconds: float = 0.0
    figures: str = ""


@dataclass
class Budget:
    total: float
    start: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.total - (time.monotonic() - self.start) - RESERVE


def say(text: str) -> None:
    print(text, flush=True)


def run_command(command: list[str], log: Path, limit: float) -> tuple[int | None, str]:
    """Runs `command` with its output appended to `log`, stopped at `limit` seconds: (its exit code, or
    None when it was stopped; what it printed)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    before = log.stat().st_size if log.exists() else 0
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"$ {' '.join(command)}\n")
        handle.flush()
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code: int | None = process.wait(timeout=max(1.0, limit))
        except subprocess.TimeoutExpired:
            _stop(process)
            code = None
    with open(log, encoding="utf-8", errors="replace") as handle:
        handle.seek(before)
        return code, handle.read()


def _stop(process: subprocess.Popen) -> None:
    """SIGINT to the command's whole process group (a run saves what it has), SIGKILL 20 s later."""
    try:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def cli_section(args, budget: Budget, out: Path) -> Row:
    folder = Path(args.runs).parent / "gpu-quickstart"
    shutil.rmtree(folder, ignore_errors=True)  # a second call on a warm machine: a fresh run, not a refusal
    train = [sys.executable, "-m", "daic", "run", "examples/quickstart.dai", "--device", args.device]
    train += ["--out", str(folder), "--threads", "1"] + (["--epochs", "2"] if args.tiny else [])
    log = out / "cli.log"
    code, _ = run_command(train, log, min(budget.left(), args.cap))
    if code != 0:
        return Row("cli", _status(code), figures="daic run failed (cli.log)")
    summary = json.loads((folder / "summary.json").read_text())
    verify = [sys.executable, "-m", "daic", "verify", "examples/digits_conv.net", "--weights"]
    verify += [str(folder / "checkpoint.pt"), "--device", args.device, "--format", "json", "--threads", "1"]
    verify += ["--domain", "box", "--domain", "crown", "--domain", "BranchAndBound(timeout=2)"]
    verify += ["--limit", "60"]
    verify += ["--out", str(folder / "verified.jsonl")]
    code, output = run_command(verify, log, min(budget.left(), args.cap))
    start = output.find("\n{")  # the summary, after the command's own line
    verified = json.loads(output[start + 1 :]) if code == 0 and start >= 0 else {}
    counts = {k: verified.get(k) for k in ("images", "verified", "falsified", "unknown", "seconds_per_image")}
    figures = f"run {json.dumps(summary)}; verify {json.dumps(counts)}"
    return Row("cli", _status(code), figures=figures)


def tests_section(args, budget: Budget, out: Path) -> Row:
    # pytest-benchmark (on the GPU machine) crashed a whole run once, over a fixture of the same name, before
    # the summary named the failures: each test's name and outcome is printed as it ends (-v), so that a cut
    # run still names them, and the short reasons at the end (-rfE).
    command = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:benchmark"]
    command += ["-rfE", "--tb=short"]
    if args.tiny:
        command += ["tests/runtime/domains/test_domains.py", "tests/runtime/layers/test_layers.py", "-x"]
    elif _importable("xdist"):
        command += ["-n", str(min(14, os.cpu_count() or 1)), "--dist", "loadfile"]
    if _importable("pytest_timeout"):  # a test that hangs on CUDA fails with its stack, the rest go on
        command += ["--timeout", "90"]
    code, output = run_command(command, out / "tests.log", min(budget.left(), args.cap))
    summary = next(
        (line for line in reversed(output.splitlines()) if re.search(r"\d+ (passed|failed)", line)), ""
    )
    return Row("tests", _status(code), figures=summary.strip("= "))


def bench_section(args, budget: Budget, out: Path) -> Row:
    command = [sys.executable, "bench/suite.py", "--device", args.device, "--no-lirpa"]
    command += ["--sections", "main,methods,hbox,crown", "--threads", str(args.threads)]
    if args.tiny:
        command += ["--reps", "1", "--nets", "convsmall", "--method-nets", "convsmall", "--method-reps", "1"]
        command += ["--hbox-nets", "convsmall", "--hbox-images", "2", "--hbox-reps", "1"]
        command += ["--hbox-peak-nets", "convsmall", "--hbox-peak-images", "4", "--crown-nets", "convsmall"]
        command += ["--crown-images", "2", "--crown-reps", "1", "--crown-train-epochs", "1"]
        command += ["--crown-peak-net", "convsmall"]
    code, output = run_command(command, out / "bench.md", budget.left())
    tables = output.count("\n### ")
    box = re.findall(r"^\| (\w+) .*?\| ([\d.]+)x", output, re.MULTILINE)
    figures = f"{tables} tables" + (f"; first ratio per network: {dict(box)}" if box else "")
    return Row("bench", _status(code), figures=figures)


def search_section(args, budget: Budget, out: Path) -> Row:
    if not Path(args.search_weights).is_file():
        return Row("search", "skipped", figures=f"no checkpoint at {args.search_weights}")
    command = [sys.executable, "bench/search.py", "--net", "examples/mnist_convsmall.net"]
    command += ["--weights", args.search_weights, "--data", args.data, "--eps", "0.15"]
    command += ["--device", args.device]
    images, timeout = ("0,1", "2") if args.tiny else (SEARCH_IMAGES, str(args.search_seconds))
    command += ["--images", images, "--timeout", timeout, "--label", args.device]
    # Each image alone, then all together for as long: twice its images' seconds and the root's start.
    least = 2 * len(images.split(",")) * float(timeout) + 40
    code, output = run_command(command, out / "search.log", min(budget.left(), max(args.cap, least)))
    found = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    figures = "; ".join(
        f"{r['way']} {r['per_second']} /s ({r['subdomains']}; rounds {r['per_round_second']} /s)"
        for r in found
    )
    return Row("search", _status(code), figures=figures)


def profile_section(args, budget: Budget, out: Path) -> Row:
    runs = "resnettiny_baseline" if args.tiny else "resnettiny_baseline,densenet100_adv5islpa"
    command = [sys.executable, "bench/profile_step.py", "--device", args.device, "--runs", runs]
    command += ["--steps", "1" if args.tiny else "4", "--threads", str(args.threads)]
    code, output = run_command(command, out / "profile.txt", min(budget.left(), args.cap))
    figures = "; ".join(re.findall(r"^## (\S+ \(.*?\))$", output, re.MULTILINE))
    return Row("profile", _status(code), figures=figures)


def paper_section(args, budget: Budget, out: Path) -> Row:
    command = [sys.executable, "bench/suite.py", "--device", args.device, "--no-lirpa", "--sections", "paper"]
    command += ["--threads", str(args.threads)]
    if args.tiny:
        command += ["--paper-runs", "resnettiny_baseline", "--paper-images", "20", "--paper-hbox-images", "4"]
    else:
        command += ["--paper-hbox-images", "10000"]
    code, output = run_command(command, out / "paper.md", budget.left())
    return Row("paper", _status(code), figures="; ".join(_paper_figures(output)))


def _paper_figures(output: str) -> list[str]:
    """Each scheme's seconds per epoch and the HBox certification's seconds, from suite.py's tables."""
    found = []
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| "):
            continue
        if len(cells) == 8 and cells[7] in ("yes", "no"):  # network, scheme, batch, s, s/epoch, paper, target
            found.append(f"{cells[0]} {cells[1]} {cells[4]} s/epoch (target {cells[6]})")
        elif len(cells) == 5 and cells[3] in ("yes", "no"):  # s measured, s per test set, target, met, %
            found.append(f"HBox {cells[1]} s per 10,000 images (target {cells[2]})")
    return found


def cnn7_section(args, budget: Budget, out: Path) -> Row:
    schemes = dict(list(CNN7_SCHEMES.items())[:1]) if args.tiny else CNN7_SCHEMES
    runs = Path(args.runs)  # checkpoints stay on the machine; the figures come back in cnn7.json
    runs.mkdir(parents=True, exist_ok=True)

    def one(scheme: str) -> dict:
        net = CNN7_SCHEMES[scheme]
        train = [sys.executable, "-m", "daic", "run", "examples/mnist_methods.dai", "--scheme", scheme]
        train += ["--net", net, "--data", args.data, "--device", args.device, "--out", str(runs / scheme)]
        # --resume: a run this section began earlier (a second try in the same GPU period) goes on.
        train += ["--threads", "1", "--resume"] + (["--epochs", "1"] if args.tiny else [])
        log = runs / f"{scheme}.log"
        code, _ = run_command(train, log, budget.left())
        found = {"scheme": scheme, "trained": code == 0}
        checkpoint = runs / scheme / "checkpoint.pt"
        if code == 0 and checkpoint.is_file():
            found.update(json.loads((runs / scheme / "summary.json").read_text()))
            verify = [sys.executable, "-m", "daic", "verify", net, "--weights", str(checkpoint)]
            verify += ["--data", args.data, "--device", args.device, "--format", "json", "--threads", "1"]
            verify += [
                "--domain",
                "box",
                "--domain",
                "crown",
                "--domain",
                f"BranchAndBound(timeout={args.bab})",
            ]
            # A tiny run's one epoch ends inside the ramp, at eps 0, which certifies nothing: its own radius.
            verify += ["--limit", "2", "--eps", "0.1"] if args.tiny else []
            code, output = run_command(verify, log, budget.left())
            start = output.find("\n{")  # the summary, after the command's own line
            found["verify"] = json.loads(output[start + 1 :]) if code == 0 and start >= 0 else None
        return found

    with ThreadPoolExecutor(max_workers=1 if args.tiny else args.parallel) as pool:
        results = list(pool.map(one, schemes))
    (out / "cnn7.json").write_text(json.dumps(results, indent=2) + "\n")
    done = [r for r in results if r.get("verify")]
    status = "done" if len(done) == len(results) else f"{len(done)} of {len(results)} certified"
    return Row("cnn7", status, figures=f"{len(done)} runs trained and certified (cnn7.json)")


RUNNERS = {
    "cli": cli_section,
    "tests": tests_section,
    "search": search_section,
    "profile": profile_section,
    "bench": bench_section,
    "paper": paper_section,
    "cnn7": cnn7_section,
}
SECTIONS = tuple(RUNNERS)
# The least time in which a section gives something useful: it does not start with less left.
LEAST = {"cli": 60, "tests": 120, "search": 60, "profile": 60, "bench": 90, "paper": 120, "cnn7": 300}
LEAST_TINY = {"cli": 20, "tests": 20, "search": 20, "profile": 20, "bench": 30, "paper": 30, "cnn7": 30}


def _status(code: int | None) -> str:
    return "stopped at the budget" if code is None else ("done" if code == 0 else f"failed ({code})")


def _importable(module: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def device_line(device: str) -> str:
    probe = (
        f"import torch; d = torch.device({device!r}); name = torch.cuda.get_device_name(d) "
        "if d.type == 'cuda' else 'cpu'; print('torch', torch.__version__, 'CUDA', torch.version.cuda, name)"
    )
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    return found.stdout.strip() or found.stderr.strip()[-300:]


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=500, help="seconds for every section together")
    parser.add_argument("--device", default="cuda")
    default = "cli,tests,search,profile,paper"  # about 500 s; bench in a call of its own
    parser.add_argument("--sections", default=default, help=f"in order, from {', '.join(SECTIONS)}")
    parser.add_argument("--data", default=".data", help="folder of MNIST/raw (cnn7)")
    parser.add_argument("--out", default=os.environ.get("OUT", "bench/gpu-out"))
    parser.add_argument("--runs", default="runs/gpu-cnn7", help="the cnn7 run folders (checkpoints)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--parallel", type=int, default=5, help="cnn7 runs at once on the one GPU")
    parser.add_argument("--bab", type=float, default=10, help="branch and bound's seconds per image (cnn7)")
    parser.add_argument("--search-weights", default=".data/search/IBP_01.pt", help="the search's ConvSmall")
    parser.add_argument("--search-seconds", type=float, default=5, help="the search's seconds per image")
    parser.add_argument("--cap", type=float, default=150, help="seconds at most: cli, tests, search, profile")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes: the CPU dry run")
    return parser


def run_sections(sections: list[str], args, budget: Budget, out: Path) -> list[Row]:
    """Each section in turn, one that the time left cannot hold skipped, each reported as it ends."""
    least = LEAST_TINY if args.tiny else LEAST
    rows = []
    for name in sections:
        if budget.left() < least[name]:
            rows.append(Row(name, "skipped", figures=f"{budget.left():.0f} s left, needs {least[name]} s"))
            say(f"{name}: skipped, {budget.left():.0f} s left of the budget and it needs {least[name]} s")
            continue
        started = time.monotonic()
        row = RUNNERS[name](args, budget, out)
        row.seconds = time.monotonic() - started
        rows.append(row)
        say(f"{name}: {row.status} in {row.seconds:.0f} s: {row.figures}")
    return rows


def main() -> None:
    parser = arguments()
    args = parser.parse_args()
    sections = [s for s in args.sections.split(",") if s]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    budget = Budget(args.budget)
    say(f"gpu run: {device_line(args.device)}; budget {args.budget:.0f} s; sections {', '.join(sections)}")
    rows = run_sections(sections, args, budget, out)
    table = ["| section | status | seconds | figures |", "|---|---|---|---|"]
    table += [f"| {r.section} | {r.status} | {r.seconds:.0f} | {r.figures} |" for r in rows]
    (out / "summary.md").write_text("\n".join(table) + "\n")
    say("\n".join(["", *table]))
    sys.exit(0 if all(r.status in ("done", "skipped") for r in rows) else 1)


if __name__ == "__main__":
    main()
