#!/usr/bin/env bash
# Fetch, into .whl/, the wheels of the peer libraries that scripts/gpu_check.sh needs and a GPU
# machine without a package index lacks (x-transformers and what it requires beyond torch,
# einops and packaging): Python 3.12, x86-64 Linux. gpu_check.sh installs them from there into
# a temporary folder; the machine must receive .whl/ with the repository.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl \
  x-transformers==2.31.10 einx==0.4.3 loguru==0.7.3 torch-einops-utils==0.2.0 \
  frozendict==2.5.1 einops==0.8.1
ls .whl
