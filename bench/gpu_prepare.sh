#!/usr/bin/env bash
# Before a GPU session, on this machine (it has the package registry; the GPU machine has none): the wheels
# of what the GPU machine lacks (bench/gpu_wheels.txt), at the versions installed in .venv, for Python 3.12
# (the GPU machine's) and for this machine's Python (the CPU dry run), into .whl/; and the MNIST files of
# ../shared/data/mnist laid out as MNIST/raw (the first 8,000 images to train, the last 2,000 to test)
# into .data/, and the search section's checkpoint, .data/search/IBP_01.pt. Both folders are ignored by git
# and carried to the GPU machine (the device tool's `carry`).
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=".venv/bin/python -m pip"
mkdir -p .whl
here=$(.venv/bin/python -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
while read -r name; do
    [ -n "$name" ] || continue
    version=$($PIP show "$name" 2>/dev/null | sed -n 's/^Version: //p')
    [ -n "$version" ] || { echo "gpu_prepare.sh: $name is not installed in .venv" >&2; exit 2; }
    for python in 3.12 "$here"; do
        $PIP download -q --no-deps --only-binary=:all: --python-version "$python" --implementation cp \
            --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
            -d .whl "$name==$version"
    done
done < bench/gpu_wheels.txt
shared="${SHARED:-../shared}/data/mnist"
if [ -f "$shared/t10k-images-idx3-ubyte.gz" ]; then
    .venv/bin/python - "$shared" .data/MNIST/raw <<'PY'
import gzip, struct, sys
from pathlib import Path

source, target = Path(sys.argv[1]), Path(sys.argv[2])
target.mkdir(parents=True, exist_ok=True)
images = gzip.open(source / "t10k-images-idx3-ubyte.gz").read()[16:]
labels = gzip.open(source / "t10k-labels-idx1-ubyte.gz").read()[8:]
for split, (start, stop) in {"train": (0, 8000), "t10k": (8000, 10000)}.items():
    count = stop - start
    (target / f"{split}-images-idx3-ubyte").write_bytes(
        struct.pack(">IIII", 2051, count, 28, 28) + images[start * 784 : stop * 784]
    )
    (target / f"{split}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, count) + labels[start:stop])
PY
else
    echo "gpu_prepare.sh: no $shared; the cnn7 section needs MNIST in .data/MNIST/raw" >&2
fi
# The search section's network: ConvSmall trained by IBP_01 (seed 0; about 2 minutes on one core here), whose
# test images bench/gpu.py's SEARCH_IMAGES were chosen for.
if [ -d .data/MNIST/raw ] && [ ! -f .data/search/IBP_01.pt ]; then
    .venv/bin/daic run examples/mnist_methods.dai --scheme IBP_01 --net examples/mnist_convsmall.net \
        --data .data --device cpu --threads 1 --out runs/gpu-search-IBP_01 >/dev/null
    mkdir -p .data/search && cp runs/gpu-search-IBP_01/checkpoint.pt .data/search/IBP_01.pt
fi
du -sh .whl .data 2>/dev/null
