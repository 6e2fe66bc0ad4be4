#!/usr/bin/env bash
# The wheels the GPU check (tools/device_check.sh) needs on the device machine, which has JAX with CUDA,
# PyTorch, NVML and grpcio but no TensorFlow, no Keras, and fetches nothing: tfdist itself, its dependencies
# and Keras's (not numpy, ml_dtypes nor h5py: JAX brings the first two, Keras imports h5py only to save .h5),
# for CPython 3.10 to 3.13 on x86-64 Linux, into .device-wheels (about 45 MB; `run`'s carry takes 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
dest=.device-wheels
rm -rf "$dest" && mkdir -p "$dest"
"$PY" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$dest" .
# tfdist's own dependencies as pyproject.toml pins them, and what they and Keras import
mapfile -t needs < <("$PY" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
needs+=(cffi pycparser keras rich markdown-it-py mdurl pygments namex optree typing_extensions packaging)
for version in 3.10 3.11 3.12 3.13; do
  "$PY" -m pip download --quiet --dest "$dest" --no-deps --only-binary=:all: --implementation cp \
    --python-version "$version" --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 "${needs[@]}"
done
# cryptography's abi3 wheel for CPython 3.9 serves every version above it: one copy, not two
compgen -G "$dest/cryptography-*-cp39-abi3-*" >/dev/null && rm -f "$dest"/cryptography-*-cp311-abi3-*
du -sh "$dest"
