#!/usr/bin/env bash
# Builds the Kubernetes control plane the tests run (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler), the real node's kubelet and kube-proxy and the admin's kubectl (the same release) and cluster DNS (CoreDNS), KWOK and Kueue from the Go
# module proxy, and keeps the binaries outside the clone, in the user's
# cache: ${TFDIST_KUBE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/tfdist/kubernetes}/<build>/bin, one folder per build
# (the Kubernetes and KWOK versions and a hash of this module), mode 0700, never a link nor another user's.
# A second run with the same build does nothing. No registry ships these binaries (FACTS.md): Kubernetes
# is built as a Go dependency of tests/kubernetes/controlplane (go.mod pins each staging module to its
# published version, kubernetes/kubernetes#79384); KWOK has no replace directives, so `go install` builds it.
# Go's module and build caches stay where Go keeps them (~/go/pkg/mod, ~/.cache/go-build): outside the clone.
#
#   build_control_plane.sh [--print-dir | --built | --start | --wait]
#   --print-dir: print the folder that holds (or will hold) the binaries, build nothing.
#   --start: build in the background (make test starts it first, so a cold build runs beside the venv's
#            install and the unit tests), logging to the cache's build.log; nothing if already built.
#   --wait:  wait for that build (at most WAIT_MINUTES); fail with its log's tail if it failed.
# One build at a time per cache (a lock file): a second run waits for the first and finds it done.
set -euo pipefail
WAIT_MINUTES=45
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODULE="$HERE/controlplane"
KWOK_VERSION=v0.8.0
KUEUE_VERSION=v0.17.0  # tests/kubernetes/kueue.py runs it beside the plane (issue 49)
COREDNS_VERSION=v1.15.0
KUBE_VERSION=$(awk 'NF >= 2 && $(NF-1) == "k8s.io/kubernetes" && $NF ~ /^v/ {print $NF; exit}' "$MODULE/go.mod")
[ -n "$KUBE_VERSION" ] || { echo "kubernetes: no k8s.io/kubernetes version in $MODULE/go.mod"; exit 1; }
GO_FLAGS=(-trimpath "-ldflags=-s -w")
# Kubernetes' programs get the release's version stamped in, as its own release builds do (a kubelet's Node
# and `kubectl version` say it; unstamped they say v0.0.0-master).
KUBE_FLAGS=(-trimpath "-ldflags=-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION \
-X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION")
# The build's name: the versions, and a hash of what the binaries are made from (not of this script: editing
# its options rebuilds nothing).
digest=$( (cat "$MODULE/go.mod" "$MODULE/go.sum" "$MODULE/tools.go" "$MODULE/etcd/main.go"
  echo "${GO_FLAGS[*]} ${KUBE_FLAGS[*]} coredns $COREDNS_VERSION") \
  | sha256sum | cut -c1-12)
cache=${TFDIST_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfdist/kubernetes}
build="$cache/$KUBE_VERSION-kwok$KWOK_VERSION-$digest"
if [ "${1:-}" = "--print-dir" ]; then
  echo "$build/bin"
  exit 0
fi
BASE_PROGRAMS="etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl kwok coredns"
PROGRAMS="$BASE_PROGRAMS kueue"
mkdir -p -m 0700 "$cache"
for path in "$cache" "$build" "$cache/.lock" "$cache/build.log"; do  # ours, not links: nobody else's binaries run
  if [ -L "$path" ] || { [ -e "$path" ] && [ ! -O "$path" ]; }; then
    echo "kubernetes: $path is a link or not yours; remove it or set TFDIST_KUBE_CACHE to a folder of your own"
    exit 1
  fi
done
built() {
  for program in $PROGRAMS; do [ -x "$build/bin/$program" ] || return 1; done
  [ "$(cat "$build/bin/.kueue-version" 2>/dev/null)" = "$KUEUE_VERSION" ]
}
base_built() {  # a build from before Kueue was added: Kueue alone is built into it, not the whole plane again
  for program in $BASE_PROGRAMS; do [ -x "$build/bin/$program" ] || return 1; done
}
install_kueue() {  # into $1, atomically beside the others
  echo "kubernetes: building Kueue $KUEUE_VERSION"
  local into=$1
  GOBIN="$work/kueue" go install "${GO_FLAGS[@]}" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  chmod 0700 "$work/kueue/kueue"
  mv "$work/kueue/kueue" "$into/kueue"
  (umask 077; echo "$KUEUE_VERSION" > "$into/.kueue-version")
}
said_built() {
  echo "kubernetes: $KUBE_VERSION control plane, KWOK $KWOK_VERSION and Kueue $KUEUE_VERSION already built in $build/bin"
}
status="$cache/build.status"  # the background build's exit code, written when it ends
case "${1:-}" in
  --built)  # exit 0 when built (make test then runs the unit tier beside pytest, else while it waits here)
    built; exit $? ;;
  --start)
    if built; then said_built; exit 0; fi
    rm -f "$status"
    echo "kubernetes: building the control plane in the background (log: $cache/build.log)"
    (umask 077; setsid bash "$0" --record-status > "$cache/build.log" 2>&1 < /dev/null &)
    exit 0 ;;
  --wait)
    deadline=$(( $(date +%s) + WAIT_MINUTES * 60 ))
    until built; do
      if [ -f "$status" ]; then  # it ended without the binaries
        echo "kubernetes: the control plane's build failed (exit $(cat "$status")); its log ($cache/build.log) ends with:"
        tail -n 25 "$cache/build.log" 2>/dev/null || true
        exit 1
      fi
      if [ "$(date +%s)" -gt "$deadline" ]; then
        echo "kubernetes: the control plane's build did not finish within $WAIT_MINUTES minutes (log: $cache/build.log)"
        exit 1
      fi
      sleep 2
    done
    said_built
    exit 0 ;;
  --record-status) record_status=1; trap 'echo $? > "$status"' EXIT ;;  # whatever stops it before the build
  "") ;;
  *) echo "kubernetes: unknown option $1 (--print-dir, --start, --wait)"; exit 2 ;;
esac
exec 9>>"$cache/.lock"
flock 9  # another build of this cache finishes first
if built; then said_built; [ -z "${record_status:-}" ] || echo 0 > "$status"; exit 0; fi
command -v go >/dev/null || { echo "kubernetes: the build needs Go (1.26 or later) on PATH"; exit 1; }
work=$(mktemp -d "$cache/.building-XXXXXX")
finish() {
  local code=$?
  rm -rf "$work"
  if [ -n "${record_status:-}" ]; then echo "$code" > "$status"; fi
}
trap finish EXIT
mkdir -m 0700 "$work/bin" "$work/kueue"
started=$(date +%s)
if base_built; then
  install_kueue "$build/bin"
  echo "kubernetes: Kueue built in $(( $(date +%s) - started )) s into $build/bin"
  exit 0
fi
echo "kubernetes: building the $KUBE_VERSION control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), kubelet, kube-proxy and kubectl from the Go module proxy; the first build takes several minutes"
(cd "$MODULE" && go build "${KUBE_FLAGS[@]}" -o "$work/bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy \
  k8s.io/kubernetes/cmd/kubectl ./etcd)
echo "kubernetes: building KWOK $KWOK_VERSION"
GOBIN="$work/bin" go install "${GO_FLAGS[@]}" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
echo "kubernetes: building CoreDNS $COREDNS_VERSION (the real node's cluster DNS)"
GOBIN="$work/bin" go install "${GO_FLAGS[@]}" "github.com/coredns/coredns@$COREDNS_VERSION"
install_kueue "$work/bin"
chmod 0700 "$work/bin"/*
rm -rf "$build"
mkdir -m 0700 "$build"
mv "$work/bin" "$build/bin"  # whole or not at all: an interrupted build leaves no half folder
for old in "$cache"/v*-kwok*-*; do  # earlier builds of ours (400 MB each): this one replaces them
  if [ "$old" != "$build" ] && [ -d "$old" ] && [ ! -L "$old" ] && [ -O "$old" ]; then rm -rf "$old"; fi
done
echo "kubernetes: built in $(( $(date +%s) - started )) s into $build/bin"
