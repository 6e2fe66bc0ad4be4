#!/usr/bin/env bash
# The jax mode's GPU check, run on the device machine in one call (docs/development.md, "The GPU check"):
#   tools/device_wheels.sh here, then  run(command="bash tools/device_check.sh", carry=[".device-wheels"])
# Installs tfdist and Keras from .device-wheels beside the machine's own JAX (no network there), prints what
# the machine has, then benchmarks/keras_jax_fit.py --require-gpu: a Keras-JAX fit under `tfdist launch`
# against the same script by hand, and the agent's pinning of the GPU. Results under $OUT (else /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1  # lines reach $OUT as they are printed, even if the call's limit cuts the run short
out=${OUT:-/tmp}
PY=${PYTHON:-python3}
site=$(mktemp -d)/site
{ date -u; nvidia-smi -L || true; "$PY" -VV
  "$PY" -c 'import jax; print("jax", jax.__version__, jax.devices())'; } 2>&1 | tee "$out/machine.txt"
# Keras without h5py (only its .h5 saving imports it); tfdist and what it imports
"$PY" -m pip install --quiet --no-index --find-links .device-wheels --target "$site" --no-deps keras
"$PY" -m pip install --quiet --no-index --find-links .device-wheels --target "$site" \
  tfdist rich namex optree packaging
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -m pip list 2>/dev/null > "$out/packages.txt" || true
# 6 runs of about 30 s: --timeout bounds each within the call's 600 s; its exit status is the script's (pipefail)
"$PY" benchmarks/keras_jax_fit.py --require-gpu --timeout 120 "$@" --json "$out/keras_jax_fit.json" 2>&1 \
  | tee "$out/keras_jax_fit.txt"
