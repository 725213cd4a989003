#!/usr/bin/env bash
# The benchmark suite next to its peers: makes bench/.venv-peers once (bench/peers_setup.sh; AUTO_LIRPA=DIR
# names a clone of auto_LiRPA 0.7), then runs bench/suite.py in it. Arguments go to suite.py (--help lists
# them).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x bench/.venv-peers/bin/python ]; then
    bench/peers_setup.sh
fi
export PYTHONWARNINGS=ignore::FutureWarning  # torch.jit deprecations inside auto_LiRPA, in every child too
exec bench/.venv-peers/bin/python bench/suite.py "$@"
