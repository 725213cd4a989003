#!/usr/bin/env bash
# The separate environment for bench/suite.py: auto_LiRPA 0.3 pins torch<1.13 and numpy 1, so it is
# installed without its pins next to the torch daic uses, never into daic's own environment.
set -euo pipefail
cd "$(dirname "$0")/.."
torch_version=$(.venv/bin/python -c "import torch; print(torch.__version__.split('+')[0])")
python3 -m venv bench/.venv-peers
bench/.venv-peers/bin/pip install --quiet --upgrade pip
bench/.venv-peers/bin/pip install --quiet "torch==${torch_version}" "numpy<2" appdirs pyyaml packaging tqdm lark click rich scikit-learn
bench/.venv-peers/bin/pip install --quiet --no-deps auto_LiRPA==0.3
bench/.venv-peers/bin/pip install --quiet --no-deps -e .
echo "ready: bench/run.sh"
