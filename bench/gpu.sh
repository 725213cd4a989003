#!/usr/bin/env bash
# The GPU run in one go. On the GPU machine (no network; see ../shared/GPU.md) it installs the wheels
# brought along in .whl/ (bench/gpu_prepare.sh makes them here) and daic itself, then runs bench/gpu.py's
# sections within the budget. Everything after `--` goes to bench/gpu.py (--help lists it):
#
#     bash bench/gpu.sh -- --budget 500                       # cli, tests, search, profile, paper
#     bash bench/gpu.sh -- --budget 220 --sections bench      # the bench's tables
#     bash bench/gpu.sh -- --budget 540 --sections cnn7       # the CNN7 rows (.data/MNIST/raw brought along)
#     bash bench/gpu.sh --python .venv/bin/python -- --device cpu --tiny --budget 600   # the CPU dry run
#
# Results go to $OUT (bench/gpu-out by default): gpu.log (this output), cli.log, tests.log, search.log,
# profile.txt, paper.md, bench.md, cnn7.json, summary.md; the summary table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=python3
SITE=/tmp/daic-site
while [ $# -gt 0 ]; do
    case "$1" in
        --python) PYTHON="$2"; shift 2 ;;
        --site) SITE="$2"; shift 2 ;;
        --) shift; break ;;
        *) echo "bench/gpu.sh: unknown option $1 (options: --python PY, --site DIR, then -- and gpu.py's)" >&2; exit 2 ;;
    esac
done
export OUT="${OUT:-bench/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
    started=$(date +%s)
    if [ -d .whl ]; then
        # Each package the GPU machine lacks, its wheel picked from .whl for this Python (no index, no network).
        mapfile -t wanted < bench/gpu_wheels.txt
        "$PYTHON" -m pip install -q --no-index --no-deps --find-links .whl --target "$SITE" "${wanted[@]}" \
            || { echo "gpu.sh: installing the wheels in .whl failed"; exit 3; }
        export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    fi
    "$PYTHON" -m pip install -q --no-deps --no-build-isolation -e . || { echo "gpu.sh: installing daic failed"; exit 3; }
    echo "gpu.sh: installed in $(( $(date +%s) - started )) s"
    "$PYTHON" bench/gpu.py "$@"
} 2>&1 | tee "$OUT/gpu.log"
exit "${PIPESTATUS[0]}"
