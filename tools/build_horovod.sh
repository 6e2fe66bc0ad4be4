#!/usr/bin/env bash
# Builds horovod 0.28.1 (its last release, June 2023) from the PyPI sdist into the venv, against the
# venv's TensorFlow, with Gloo only (no MPI, no ssh): what tfdist's Horovod mode starts itself.
# TensorFlow >= 2.20 removed the XLA headers that horovod/tensorflow/xla_mpi_ops.cc includes; that
# file only serves XLA on GPUs with MPI, so it is left out of the build (horovod#4302 carries the
# same fix upstream, unreleased). Idempotent: does nothing when horovod.tensorflow already imports.
set -euo pipefail
PY=${1:-.venv/bin/python}
VERSION=0.28.1
if "$PY" -c "import horovod.tensorflow" >/dev/null 2>&1; then
  echo "horovod: $VERSION already built in $("$PY" -c 'import sys; print(sys.prefix)')"
  exit 0
fi
if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null; then
  echo "horovod: installing cmake and g++ (Debian packages)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ >/dev/null
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m pip --disable-pip-version-check -q download --no-deps --no-binary :all: "horovod==$VERSION" -d "$work"
tar xzf "$work/horovod-$VERSION.tar.gz" -C "$work"
cmakelists="$work/horovod-$VERSION/horovod/tensorflow/CMakeLists.txt"
grep -q xla_mpi_ops.cc "$cmakelists" || { echo "horovod: xla_mpi_ops.cc not in $cmakelists; the fix needs a look"; exit 1; }
sed -i "/xla_mpi_ops\.cc/d" "$cmakelists"  # the whole list(APPEND ...) line
echo "horovod: building $VERSION (Gloo, TensorFlow $("$PY" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)); about 2 minutes"
HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 \
  HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)" \
  "$PY" -m pip --disable-pip-version-check -q install --no-build-isolation "$work/horovod-$VERSION"
"$PY" -c "import horovod.tensorflow as hvd; print('horovod: built', hvd.__version__ if hasattr(hvd, '__version__') else '$VERSION')"
