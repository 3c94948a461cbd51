#!/usr/bin/env bash
# nvrtc.sh DIR: NVRTC (libnvrtc.so.12 and its builtins) from the PyPI wheel nvidia-cuda-nvrtc-cu12
# into DIR, once; prints the library's path. NVRTC compiles CUDA source to PTX without a driver
# or a GPU, so the kernel's compile test runs on any machine. Pinned to CUDA 12.4: its PTX
# (ISA 8.4) loads on every driver from 550 on; a newer NVRTC writes PTX that older drivers refuse.
set -euo pipefail
DIR=$1
lib=$(ls "$DIR"/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 2>/dev/null || true)
# A folder holding another version is replaced.
if [ -n "$lib" ] && ! ls "$DIR"/nvidia_cuda_nvrtc_cu12-12.4.127.dist-info >/dev/null 2>&1; then
  rm -rf "$DIR"; lib=
fi
if [ -z "$lib" ]; then
  mkdir -p "$DIR"
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$DIR" "nvidia-cuda-nvrtc-cu12==12.4.127" >&2
  lib=$(ls "$DIR"/nvidia/cuda_nvrtc/lib/libnvrtc.so.12)
fi
echo "$lib"
