"""Branch and bound's throughput: subdomains bounded per second of search (roots and attacks included: every
search runs its whole time, on images it cannot decide within the limit; and, where the search records its
phases, per second of its rounds), each image searched alone and the images searched together (one batch,
their subdomains bounded in one batch a round).

    python bench/search.py --net NET --weights CKPT --data DIR --eps 0.15 --images 3,6,33,96 --timeout 10 \
        [--device cuda]

prints one JSON line per way and a markdown row. Run it beside an older checkout with that checkout on
PYTHONPATH (a folder `daic` holding its `daic/` files with `dsl`, `compiler` and `runtime` linked in) to
compare the two in one run, as bench/README.md's table was."""

from __future__ import annotations

import argparse
import json
import time

import torch


def searched(model, x, y, eps: float, timeout: float, together: bool) -> dict[str, object]:
    """Subdomains, seconds and roots' seconds of `BranchAndBound(timeout)` on the images `x`, alone or all
    in one search (an older checkout ignores `together` and searches them one by one)."""
    from daic.runtime.certification.certify import certify

    try:
        from daic.runtime.certification.search import BranchAndBound
    except ImportError:  # a checkout before runtime/certification/search/
        from daic.runtime.certification.complete import BranchAndBound

        _time_old_rounds(BranchAndBound)
    search = BranchAndBound(timeout=timeout)
    search.together = len(x) if together else 1
    began = time.perf_counter()
    outcomes = certify(model.double(), [search], x.double(), y, eps, (0.0, 1.0))
    seconds = time.perf_counter() - began
    efforts = [o.search for o in outcomes if o.search is not None]
    subdomains = sum(effort["subdomains"] for effort in efforts)
    # The phases a joint search records once for all its images; an older checkout records none, and its
    # rounds are timed from outside (`_time_old_rounds`).
    phases = {id(e["phases"]): e["phases"] for e in efforts if "phases" in e}
    if not together:
        phases = {k: e["phases"] for k, e in enumerate(efforts) if "phases" in e}
    rounds = sum(p.get("rounds", 0.0) for p in phases.values()) or _OLD_ROUNDS.pop("rounds", 0.0)
    return {"subdomains": subdomains, "seconds": round(seconds, 2),
            "per_second": round(subdomains / max(seconds, 1e-9), 2),
            "per_round_second": round(subdomains / rounds, 2) if rounds else None,
            "verdicts": [o.status for o in outcomes]}  # fmt: skip


_OLD_ROUNDS: dict[str, float] = {}
"""The seconds an older checkout's rounds took, since it last was read."""


def _time_old_rounds(search_class: type) -> None:
    """Times an older checkout's rounds as the search records its own: the splitting loop of each image
    (`_branch_and_bound`) less the attacks and the leaves' linear programs run inside it."""
    if getattr(search_class, "_rounds_timed", False):
        return
    loop, aside = search_class._branch_and_bound, (search_class._attacked, search_class._settle)
    inside = {"loop": False}

    def timed_loop(self, *args, **kwargs):
        began, inside["loop"] = time.perf_counter(), True
        try:
            return loop(self, *args, **kwargs)
        finally:
            inside["loop"] = False
            _OLD_ROUNDS["rounds"] = _OLD_ROUNDS.get("rounds", 0.0) + time.perf_counter() - began

    def untimed(method):
        def run(self, *args, **kwargs):
            began = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                if inside["loop"]:
                    _OLD_ROUNDS["rounds"] = _OLD_ROUNDS.get("rounds", 0.0) - (time.perf_counter() - began)

        return run

    search_class._branch_and_bound = timed_loop
    search_class._attacked, search_class._settle = (untimed(m) for m in aside)
    search_class._rounds_timed = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--net", required=True)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--data", required=True, help="a folder holding MNIST/raw")
    parser.add_argument("--eps", type=float, required=True)
    parser.add_argument("--images", required=True, help="test images, comma-separated")
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--label", default="daic")
    parser.add_argument("--device", default="cpu", help="where the search runs (cpu, cuda)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    import daic

    device = torch.device(args.device)
    model = daic.load_network(args.net, args.weights).to(device)
    data = daic.load_data("MNIST", args.data)
    index = [int(i) for i in args.images.split(",")]
    x, y = data.test_x[index].to(device), data.test_y[index].to(device)
    rows = {}
    for way, together in (("alone", False), ("together", True)):
        rows[way] = searched(model, x, y, args.eps, args.timeout, together)
        print(json.dumps({"label": args.label, "way": way, **rows[way]}), flush=True)
    print(
        f"| {args.label} | {len(index)} | {rows['alone']['per_second']} | {rows['together']['per_second']} |"
    )


if __name__ == "__main__":
    main()
