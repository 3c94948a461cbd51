#!/usr/bin/env bash
# nvrtc.sh DIR: NVRTC (libnvrtc.so.12 and its builtins) from the PyPI wheel nvidia-cuda-nvrtc-cu12
# into DIR, once; prints the library's path. NVRTC compiles CUDA source to PTX without a driver
# or a GPU, so the kernel's compile test runs on any machine.
set -euo pipefail
DIR=$1
lib=$(ls "$DIR"/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 2>/dev/null || true)
if [ -z "$lib" ]; then
  mkdir -p "$DIR"
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$DIR" "nvidia-cuda-nvrtc-cu12>=12.4,<13" >&2
  lib=$(ls "$DIR"/nvidia/cuda_nvrtc/lib/libnvrtc.so.12)
fi
echo "$lib"
