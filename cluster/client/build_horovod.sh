#!/usr/bin/env bash
# Run by `tfdist build-horovod` (cluster/client/horovod_build.py), which passes the Python to build for.
# Builds horovod 0.28.1 (its last release, June 2023) from the PyPI sdist into that Python's environment,
# against its TensorFlow, with Gloo only (no MPI, no ssh): what tfdist's Horovod mode starts itself.
# TensorFlow >= 2.20 removed the XLA headers that horovod/tensorflow/xla_mpi_ops.cc includes; that
# file only serves XLA on GPUs with MPI, so it is left out of the build (horovod#4302 carries the
# same fix upstream, unreleased). A second change: Horovod's process-set Gloo contexts (the global
# process set is one, created by every hvd.init()) build their TCP device without HOROVOD_GLOO_IFACE,
# so on hosts whose hostname resolves to a loopback address (containers, network namespaces) ranks on
# different hosts advertise 127.0.0.1 to each other and fail; the fix copies the interface over.
# Idempotent: does nothing when this build (BUILD_ID, written next to horovod) is already installed.
# The built wheel is kept in the user's cache (TFDIST_HOROVOD_CACHE, default ~/.cache/tfdist/horovod; mode
# 0700, one folder per build, TensorFlow version and Python ABI), so a new environment for the same
# TensorFlow installs it in seconds instead of compiling again (a fresh clone's `make test`).
# TFDIST_HOROVOD_CACHE= (empty) builds without the cache.
#
#   build_horovod.sh PYTHON [--check] [--sdist horovod-0.28.1.tar.gz]
#   --check: say whether this build is installed for PYTHON (exit 0) or not (exit 1); build nothing.
#   --sdist: build from this file instead of downloading it (nodes without an index).
set -euo pipefail
PY=${1:?usage: build_horovod.sh PYTHON [--check] [--sdist FILE]}
shift
CHECK=0
SDIST=""
while [ $# -gt 0 ]; do
  case "$1" in
    --check) CHECK=1; shift ;;
    --sdist) SDIST=${2:?--sdist needs a file}; shift 2 ;;
    *) echo "horovod: unknown option $1"; exit 2 ;;
  esac
done
VERSION=0.28.1
BUILD_ID="$VERSION+tfdist.2"
where=$("$PY" -c 'import sys; print(sys.prefix)')
installed=$("$PY" -c "import horovod.tensorflow, os, horovod; print(open(os.path.join(os.path.dirname(horovod.__file__), 'TFDIST_BUILD')).read().strip())" 2>/dev/null || true)
if [ "$installed" = "$BUILD_ID" ]; then
  echo "horovod: $BUILD_ID already built in $where"
  exit 0
fi
if [ "$CHECK" = 1 ]; then
  echo "horovod: $BUILD_ID is not built in $where${installed:+ (found $installed)}; \`tfdist build-horovod --python $PY\` builds it"
  exit 1
fi
if ! "$PY" -c 'import tensorflow' 2>/dev/null; then
  echo "horovod: $PY cannot import tensorflow; install TensorFlow there first (Horovod is built against it)"
  exit 1
fi
tf_version=$("$PY" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)
abi=$("$PY" -c 'import sys, sysconfig; print(sys.implementation.cache_tag + "-" + sysconfig.get_platform())')
cache=${TFDIST_HOROVOD_CACHE-${XDG_CACHE_HOME:-$HOME/.cache}/tfdist/horovod}
kept=""
if [ -n "$cache" ]; then
  kept="$cache/$BUILD_ID-tf$tf_version-$abi"
  # Only a folder of our own, not a link: another user's wheel is never installed.
  if [ -L "$kept" ] || { [ -e "$kept" ] && [ ! -O "$kept" ]; }; then
    echo "horovod: $kept is a link or not yours; building without the cache"
    kept=""
  fi
fi
# Compiles the patched sdist into a wheel under $work (and keeps a copy in $kept); sets $wheel.
build_wheel() {
  if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "horovod: installing cmake and g++ (Debian packages)"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ >/dev/null
    else
      echo "horovod: the build needs cmake and g++ on PATH: install them (apt-get install cmake g++; on a cluster, e.g. \`module load cmake gcc\`), then run this again"
      return 1
    fi
  fi
  if [ -n "$SDIST" ]; then
    cp "$SDIST" "$work/horovod-$VERSION.tar.gz"
  elif ! "$PY" -m pip --disable-pip-version-check -q download --no-deps --no-binary :all: "horovod==$VERSION" -d "$work"; then
    echo "horovod: could not download the horovod $VERSION sdist (no package index here?); fetch horovod-$VERSION.tar.gz elsewhere and pass --sdist FILE"
    return 1
  fi
  tar xzf "$work/horovod-$VERSION.tar.gz" -C "$work"
  cmakelists="$work/horovod-$VERSION/horovod/tensorflow/CMakeLists.txt"
  grep -q xla_mpi_ops.cc "$cmakelists" || { echo "horovod: xla_mpi_ops.cc not in $cmakelists; the fix needs a look"; exit 1; }
  sed -i "/xla_mpi_ops\.cc/d" "$cmakelists"  # the whole list(APPEND ...) line
  gloo_context="$work/horovod-$VERSION/horovod/common/gloo/gloo_context.cc"
  grep -q "^  assert(global_context.IsEnabled());$" "$gloo_context" || { echo "horovod: $gloo_context changed; the interface fix needs a look"; exit 1; }
  sed -i "s|^  assert(global_context.IsEnabled());\$|&\n  gloo_iface_ = global_context.gloo_iface_;  // tfdist: process sets honour HOROVOD_GLOO_IFACE|" "$gloo_context"
  grep -q "gloo_iface_ = global_context.gloo_iface_;" "$gloo_context" || { echo "horovod: the interface fix did not apply"; exit 1; }
  echo "horovod: building $VERSION into $where (Gloo, TensorFlow $tf_version); about 2 minutes"
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 \
    HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)" \
    "$PY" -m pip --disable-pip-version-check -q wheel --no-build-isolation --no-deps -w "$work/wheel" "$work/horovod-$VERSION" || return 1
  wheel=$(ls "$work"/wheel/horovod-*.whl | head -n 1)
  if [ -n "$kept" ]; then
    (umask 077 && mkdir -p "$kept" && cp "$wheel" "$kept/.partial" && mv "$kept/.partial" "$kept/$(basename "$wheel")") \
      || echo "horovod: could not keep the wheel in $kept (built anyway)"
  fi
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m pip --disable-pip-version-check -q install cloudpickle psutil pyyaml packaging  # horovod's own requirements
wheel=""
if [ -n "$kept" ]; then wheel=$(ls "$kept"/horovod-*.whl 2>/dev/null | head -n 1 || true); fi
if [ -n "$wheel" ]; then
  echo "horovod: installing the $BUILD_ID wheel built before for TensorFlow $tf_version ($kept)"
else
  build_wheel || exit 1
fi
"$PY" -m pip --disable-pip-version-check -q install --force-reinstall --no-deps "$wheel"
"$PY" -c "import horovod, os; open(os.path.join(os.path.dirname(horovod.__file__), 'TFDIST_BUILD'), 'w').write('$BUILD_ID\n')"
"$PY" -c "import horovod.tensorflow as hvd; assert hvd.gloo_built(), 'built without Gloo'; print('horovod: built $BUILD_ID')"
