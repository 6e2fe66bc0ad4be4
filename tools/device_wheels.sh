#!/usr/bin/env bash
# The wheels the GPU check (tools/device_check.sh) needs on the device machine, which has JAX with CUDA,
# PyTorch, NVML and grpcio but no TensorFlow, no Keras, and fetches nothing: tfdist itself, its dependencies
# and Keras's (not numpy, ml_dtypes nor h5py: JAX brings the first two, Keras imports h5py only to save .h5),
# for the device's CPython (DEVICE_PYTHON, default 3.12: its python3 is 3.12.3) on x86-64 Linux, into
# .device-wheels (about 16 MB; `run` carries 64 MiB with the tree).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
versions=${DEVICE_PYTHON:-3.12}
dest=.device-wheels
rm -rf "$dest" && mkdir -p "$dest"
"$PY" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$dest" .
rm -rf build  # setuptools' work folder
# tfdist's own dependencies as pyproject.toml pins them (a --target install takes none from the machine),
# and what they and Keras import
deps=$("$PY" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
mapfile -t needs <<<"$deps"
needs+=(cffi pycparser keras rich markdown-it-py mdurl pygments namex optree typing_extensions packaging)
for version in $versions; do
  "$PY" -m pip download --quiet --dest "$dest" --no-deps --only-binary=:all: --implementation cp \
    --python-version "$version" --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "${needs[@]}"
done
du -sh "$dest"
