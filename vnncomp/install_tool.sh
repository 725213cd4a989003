#!/usr/bin/env bash
# VNN-COMP: install daic (its version argument is the interface's, "v1"). Makes a virtual environment
# beside the repository's sources, with onnxruntime (the competition's checker, which daic runs on every
# witness before it answers sat).
set -euo pipefail
if [ "$#" -ne 1 ]; then
    echo "usage: install_tool.sh v1" >&2
    exit 2
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
python3 -m venv "$ROOT/.venv"
"$ROOT/.venv/bin/python" -m pip install --quiet --upgrade pip
"$ROOT/.venv/bin/python" -m pip install --quiet -e "$ROOT[onnx]"
"$ROOT/.venv/bin/python" -m daic --version
