#!/usr/bin/env bash
# The benchmark suite next to its peer: makes bench/.venv-peers once (bench/peers_setup.sh), then runs
# bench/suite.py in it. Arguments go to suite.py (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x bench/.venv-peers/bin/python ]; then
    if [ ! -x .venv/bin/python ]; then
        echo "bench/run.sh: no .venv here; install daic first (the README's first command), then run this again" >&2
        exit 2
    fi
    bench/peers_setup.sh
fi
export PYTHONWARNINGS=ignore::FutureWarning  # torch.jit deprecations inside auto_LiRPA, in every child too
exec bench/.venv-peers/bin/python bench/suite.py "$@"
