"""Every rank ticks; the rank given as argument exits with code 5 after a second."""

import os
import sys
import time

rank = int(os.environ["TFDIST_RANK"])
for i in range(240):
    if rank == int(sys.argv[1]) and i == 2:
        print(f"rank {rank} giving up", flush=True)
        sys.exit(5)
    print(f"rank {rank} tick {i}", flush=True)
    time.sleep(0.5)
