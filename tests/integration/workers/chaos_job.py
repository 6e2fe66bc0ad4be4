"""A short job for the chaos test: joins, ticks, exits with the given code."""
import os
import sys
import time

ticks, code = int(sys.argv[1]), int(sys.argv[2])
rank = os.environ["TFDIST_RANK"]
with open(os.environ["TFDIST_READY_FILE"], "w") as f:
    f.write(str(os.getpid()))
for i in range(ticks):
    print(f"rank {rank} tick {i}", flush=True)
    time.sleep(0.2)
sys.exit(code)
