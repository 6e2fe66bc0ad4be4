"""Every rank but the one named joins (as tfdist.init() does: it writes its ready file) and waits;
the named rank hangs before joining, like a worker stuck importing or downloading."""
import os
import sys
import time

rank = int(os.environ["TFDIST_RANK"])
if rank != int(sys.argv[1]):
    with open(os.environ["TFDIST_READY_FILE"], "w") as f:
        f.write(str(os.getpid()))
print(f"rank {rank} up", flush=True)
time.sleep(600)
