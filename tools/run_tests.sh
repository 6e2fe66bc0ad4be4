#!/usr/bin/env bash
# `make test`'s run of the suite, once the venv and the side installs are there: the unit tier (Bazel) beside
# the pytest tier (tests/unit_tier.py), three pytest workers, each test module on one.
#
# While the Kubernetes control plane's first build is still going (a cold cache: about 11 minutes of both
# cores alone), tests/kubernetes waits for it in a pytest session of its own, started now in the background
# (its output, in .kubernetes-tests.log, is printed after the others', its summary line last), and everything
# else runs at once at a slightly lower priority (nice 3), so the build, the critical path, keeps most of the
# CPU it needs. Measured before this: the others first, then the build's end, then tests/kubernetes took 37 min
# on 2 cores, the build alone 31 of them.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
ARGS=(-p no:cacheprovider -n 3 --dist loadscope --durations=15)
BUILD=tests/kubernetes/build_control_plane.sh

if bash "$BUILD" --built; then
  echo "TFDIST_UNIT_TIER_BESIDE=1 $PY -m pytest ${ARGS[*]} tests --ignore=tests/unit"
  TFDIST_UNIT_TIER_BESIDE=1 exec "$PY" -m pytest "${ARGS[@]}" tests --ignore=tests/unit
fi

log=.kubernetes-tests.log
echo "kubernetes: still building; tests/kubernetes runs once it is built (output: $log, shown at the end)," \
     "everything else now"
(bash "$BUILD" --wait && echo "$PY -m pytest ${ARGS[*]} tests/kubernetes" &&
   "$PY" -m pytest "${ARGS[@]}" tests/kubernetes) >"$log" 2>&1 &
kubernetes_pid=$!
echo "TFDIST_UNIT_TIER_BESIDE=1 nice -n 3 $PY -m pytest ${ARGS[*]} tests --ignore=tests/unit --ignore=tests/kubernetes"
TFDIST_UNIT_TIER_BESIDE=1 nice -n 3 "$PY" -m pytest "${ARGS[@]}" tests --ignore=tests/unit --ignore=tests/kubernetes
others=$?
echo "waiting for tests/kubernetes (the build's log: $("$BUILD" --print-dir)/../../build.log)"
wait "$kubernetes_pid"
kubernetes=$?
cat "$log"
[ "$others" = 0 ] && [ "$kubernetes" = 0 ]
