"""A training loop of its own (no Keras `fit`, no TensorFlow): it reports each step with
tfdist.report_progress, which is all `tfdist diagnose` needs to time it. Its argument: how many steps. It
needs its config's LOOP_TOKEN (as a script needs an API token): without it, it stops at once."""

import os
import sys
import time

import tfdist

if os.environ.get("LOOP_TOKEN") != "s3cret":
    sys.exit(f"LOOP_TOKEN is {os.environ.get('LOOP_TOKEN')!r}, not the config's")

for step in range(1, int(sys.argv[1]) + 1):
    time.sleep(0.01)
    tfdist.report_progress(step)
