#!/usr/bin/env bash
# Runs the unit tests through Bazel, offline, with Debian's bazel-bootstrap (Bazel 4).
# Bazel 4 fetches rules_cc, rules_java and remote_coverage_tools from the network
# even for Python-only builds; tools/bazel/ holds small local stand-ins for them.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v bazel >/dev/null 2>&1; then
  echo "bazel-test: installing Debian's bazel-bootstrap"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends bazel-bootstrap >/dev/null
fi
here="$(pwd)"
# py_test runs the first python3 on PATH: the repo's venv, which has the dependencies. Its tests lease ports
# from 20000-22767: each test has a HOME of its own, so it cannot see the leases of `make test`'s pytest tier,
# which runs beside it and leases from the default range above that (cluster/agent/ports.py).
export PATH="$here/.venv/bin:$PATH"
exec bazel --batch test \
  --override_repository=rules_cc="$here/tools/bazel/rules_cc" \
  --override_repository=rules_java="$here/tools/bazel/rules_java" \
  --override_repository=remote_coverage_tools="$here/tools/bazel/remote_coverage_tools" \
  --test_output=errors --noshow_progress \
  --test_env=TFDIST_PORT_RANGE=20000-22767 \
  "${@:-//:unit}"
