#!/usr/bin/env bash
# The peers' environment for bench/suite.py, bench/.venv-peers: auto_LiRPA 0.7 supports torch < 2.9, so the
# peers and daic (which accepts that torch) share an environment of torch 2.8, never daic's own.
#
# - CTRAIN 0.6.1 from PyPI, without its pins (they name an auto_LiRPA commit its model wrappers do not
#   import with), and the packages importing its model wrappers needs.
# - auto_LiRPA 0.7 is not on PyPI (PyPI's `auto-lirpa` is 0.3, of 2022): give a clone of its repository
#   (github.com/Verified-Intelligence/auto_LiRPA, 0.7.1 or later) as AUTO_LIRPA=DIR. Without one, the
#   peers' rows of the suite say "not installed" and daic's rows are measured alone.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv bench/.venv-peers
pip="bench/.venv-peers/bin/python -m pip install --quiet"
$pip --upgrade pip
$pip "torch==2.8.*" "torchvision==0.23.*" "numpy<2.3" appdirs pyyaml packaging tqdm graphviz ninja
$pip lark click rich matplotlib pygls optuna scikit-learn
$pip --no-deps -e .
if [ -n "${AUTO_LIRPA:-}" ]; then
    $pip --no-deps -e "$AUTO_LIRPA"
    $pip --no-deps "ctrain==0.6.1"
    $pip onnx2pytorch termcolor smac pandas onnx onnxruntime onnxoptimizer skl2onnx gurobipy
else
    echo "peers_setup.sh: no AUTO_LIRPA=DIR (a clone of auto_LiRPA 0.7): the peers' rows will say so" >&2
fi
echo "ready: bench/run.sh"
