#!/usr/bin/env bash
# Builds the Kubernetes control plane the tests run (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler) and KWOK from the Go module proxy, and keeps the binaries outside the clone, in the user's
# cache: ${TFDIST_KUBE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/tfdist/kubernetes}/<build>/bin, one folder per build
# (the Kubernetes and KWOK versions and a hash of this module), mode 0700, never a link nor another user's.
# A second run with the same build does nothing. No registry ships these binaries (FACTS.md): Kubernetes
# is built as a Go dependency of tests/kubernetes/controlplane (go.mod pins each staging module to its
# published version, kubernetes/kubernetes#79384); KWOK has no replace directives, so `go install` builds it.
# Go's module and build caches stay where Go keeps them (~/go/pkg/mod, ~/.cache/go-build): outside the clone.
#
#   build_control_plane.sh [--print-dir]
#   --print-dir: print the folder that holds (or will hold) the binaries, build nothing.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODULE="$HERE/controlplane"
KWOK_VERSION=v0.8.0
KUBE_VERSION=$(awk 'NF >= 2 && $(NF-1) == "k8s.io/kubernetes" && $NF ~ /^v/ {print $NF; exit}' "$MODULE/go.mod")
[ -n "$KUBE_VERSION" ] || { echo "kubernetes: no k8s.io/kubernetes version in $MODULE/go.mod"; exit 1; }
digest=$(cat "$MODULE/go.mod" "$MODULE/go.sum" "$MODULE/tools.go" "$MODULE/etcd/main.go" "$0" | sha256sum | cut -c1-12)
cache=${TFDIST_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfdist/kubernetes}
build="$cache/$KUBE_VERSION-kwok$KWOK_VERSION-$digest"
if [ "${1:-}" = "--print-dir" ]; then
  echo "$build/bin"
  exit 0
fi
PROGRAMS="etcd kube-apiserver kube-controller-manager kube-scheduler kwok"
mkdir -p -m 0700 "$cache"
for dir in "$cache" "$build"; do  # only folders of our own, not links: nobody else's binaries are run
  if [ -L "$dir" ] || { [ -e "$dir" ] && [ ! -O "$dir" ]; }; then
    echo "kubernetes: $dir is a link or not yours; remove it or set TFDIST_KUBE_CACHE to a folder of your own"
    exit 1
  fi
done
complete=1
for program in $PROGRAMS; do [ -x "$build/bin/$program" ] || complete=0; done
if [ "$complete" = 1 ]; then
  echo "kubernetes: $KUBE_VERSION control plane and KWOK $KWOK_VERSION already built in $build/bin"
  exit 0
fi
command -v go >/dev/null || { echo "kubernetes: the build needs Go (1.26 or later) on PATH"; exit 1; }
work=$(mktemp -d "$cache/.building-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -m 0700 "$work/bin"
started=$(date +%s)
echo "kubernetes: building the $KUBE_VERSION control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) from the Go module proxy; the first build takes several minutes"
(cd "$MODULE" && go build -trimpath -ldflags="-s -w" -o "$work/bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler ./etcd)
echo "kubernetes: building KWOK $KWOK_VERSION"
GOBIN="$work/bin" go install -trimpath -ldflags="-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
chmod 0700 "$work/bin"/*
rm -rf "$build"
mkdir -m 0700 "$build"
mv "$work/bin" "$build/bin"  # whole or not at all: an interrupted build leaves no half folder
echo "kubernetes: built in $(( $(date +%s) - started )) s into $build/bin"
