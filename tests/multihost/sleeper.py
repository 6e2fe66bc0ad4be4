"""A worker that prints a line every half second for N ticks (no TensorFlow: fast cluster tests)."""

import os
import sys
import time

rank = int(os.environ["TFDIST_RANK"])
for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 4):
    print(f"rank {rank} tick {i}", flush=True)
    time.sleep(0.5)
