"""A training loop of its own (no Keras `fit`, no TensorFlow): it reports each step with
tfdist.report_progress, which is all `tfdist diagnose` needs to time it. Its argument: how many steps."""

import sys
import time

import tfdist

for step in range(1, int(sys.argv[1]) + 1):
    time.sleep(0.01)
    tfdist.report_progress(step)
