#!/usr/bin/env bash
# PyTorch for the torch mode's tests, installed once into a cache outside the clone, as the Kubernetes build
# is: PyPI has no CPU-only torch for Linux, and its wheel with the CUDA libraries it loads at import is about
# 5 GB installed (about 7 minutes here the first time, on 2 cores beside other work). A venv uses it through
# one .pth line (`--pth VENV`), after its own site-packages, so the venv's packages win.
#   tools/torch_cache.sh            install now (nothing when installed)
#   tools/torch_cache.sh --start    install in the background (make test starts it first)
#   tools/torch_cache.sh --wait     wait for that install (bounded), say why it failed
#   tools/torch_cache.sh --pth VENV point VENV at the cache
set -euo pipefail
VERSION=2.15.0
PYTHON=${PYTHON:-python3}
TAG=$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
CACHE=${TFDIST_CACHE:-$HOME/.cache/tfdist}/torch
DIR=$CACHE/torch-$VERSION-$TAG
LOG=$CACHE/install.log
WAIT_SECONDS=${TFDIST_TORCH_WAIT:-2400}

installed() { [ -f "$DIR/.complete" ]; }

# Its bytecode, compiled once on both cores: pip installs it with --no-compile (its own compile is one file
# at a time) and the processes that import it may not write bytecode (PYTHONDONTWRITEBYTECODE, a read-only
# cache): without it every `import torch` compiled torch from source, 5.2 s of CPU against 2.5 s.
compiled() {
  "$PYTHON" -m compileall -q -j0 "$1" >/dev/null 2>&1 || true  # a few of its files are not Python 3: skipped
  touch "$1/.compiled"
}

case "${1:-}" in
  --start)
    installed && exit 0
    running=$(cat "$CACHE/install.pid" 2>/dev/null || true)
    if [ -n "$running" ] && kill -0 "$running" 2>/dev/null; then exit 0; fi  # one install at a time
    mkdir -p "$CACHE" && chmod 700 "$CACHE"
    nohup bash "$0" >"$LOG" 2>&1 </dev/null &
    echo $! >"$CACHE/install.pid"
    exit 0;;
  --wait)
    waited=0
    while ! installed; do
      pid=$(cat "$CACHE/install.pid" 2>/dev/null || true)
      if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
        installed && break
        if [ -z "$pid" ]; then exec bash "$0"; fi  # never started (`make torch` alone): install now
        echo "torch: the install into $DIR did not finish; its log ($LOG) ends:" >&2
        tail -20 "$LOG" >&2 || true
        rm -f "$CACHE/install.pid"  # the next `make test` starts it again
        exit 1
      fi
      if [ "$waited" -ge "$WAIT_SECONDS" ]; then
        echo "torch: the install into $DIR (pid $pid) is still going after ${WAIT_SECONDS}s; see $LOG" >&2
        exit 1
      fi
      [ $((waited % 60)) -eq 0 ] && [ "$waited" -gt 0 ] && echo "torch: still installing into $DIR (${waited}s)"
      sleep 5; waited=$((waited + 5))
    done
    exit 0;;
  --pth)
    venv=${2:?--pth needs the venv}
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    [ -f "$DIR/.compiled" ] || compiled "$DIR"  # a cache installed before it was compiled at install
    echo "$DIR" >"$site/tfdist-torch.pth"
    exit 0;;
esac

installed && { echo "torch: $VERSION already installed in $DIR"; exit 0; }
mkdir -p "$CACHE" && chmod 700 "$CACHE"
partial=$(mktemp -d "$CACHE/.partial.XXXXXX")
trap 'rm -rf "$partial"' EXIT
echo "torch: installing $VERSION into $DIR"
"$PYTHON" -m pip install --quiet --disable-pip-version-check --no-compile --target "$partial" "torch==$VERSION"
compiled "$partial"
touch "$partial/.complete"
if mv -T "$partial" "$DIR" 2>/dev/null; then
  trap - EXIT
  echo "torch: installed $VERSION in $DIR"
else
  installed || { echo "torch: could not move the install into $DIR" >&2; exit 1; }
fi
