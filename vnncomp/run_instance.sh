#!/usr/bin/env bash
# VNN-COMP: run_instance.sh v1 BENCHMARK ONNX VNNLIB RESULT_FILE TIMEOUT. Writes daic's answer to RESULT_FILE
# as the competition reads it: sat (with the witness), unsat, timeout, unknown, or error when daic could
# not decide the instance (its message on stderr). daic's own limit leaves room for starting Python and
# importing the network. DAIC_PYTHON names the Python that runs daic (default: install_tool.sh's).
set -uo pipefail
if [ "$#" -ne 6 ]; then
    echo "usage: run_instance.sh v1 BENCHMARK ONNX VNNLIB RESULT_FILE TIMEOUT" >&2
    exit 2
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${DAIC_PYTHON:-$ROOT/.venv/bin/python}"
ONNX="$3" VNNLIB="$4" RESULT="$5" TIMEOUT="$6"
LIMIT="$(awk -v t="$TIMEOUT" 'BEGIN { l = 0.9 * t - 3; if (l < 1) l = 1; print l }')"
WORK="$(mktemp -d -t daic-vnncomp.XXXXXX)"  # prepare_instance.sh finds a leftover run by this name
trap 'rm -rf "$WORK"' EXIT
"$PYTHON" -m daic verify "$ONNX" --vnnlib "$VNNLIB" --timeout "$LIMIT" --out "$WORK/record.jsonl" \
    > "$WORK/answer"
STATUS=$?
if [ "$STATUS" -eq 0 ] && [ -s "$WORK/answer" ]; then
    cp "$WORK/answer" "$RESULT"
else
    echo "error" > "$RESULT"
fi
exit 0
