#!/usr/bin/env bash
# VNN-COMP: prepare_instance.sh v1 BENCHMARK ONNX VNNLIB. Stops what an earlier instance left running and
# checks that the instance's files exist (exit 1: the instance is skipped); daic needs no other preparation:
# run_instance.sh imports the network and reads the property within the instance's time.
set -uo pipefail
if [ "$#" -ne 4 ]; then
    echo "usage: prepare_instance.sh v1 BENCHMARK ONNX VNNLIB" >&2
    exit 2
fi
pkill -f "daic-vnncomp\." 2>/dev/null || true  # an earlier run_instance.sh's daic, by its record's folder
for file in "$3" "$4"; do
    if [ ! -f "$file" ]; then
        echo "prepare_instance.sh: $file does not exist" >&2
        exit 1
    fi
done
exit 0
