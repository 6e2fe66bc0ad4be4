"""Reports progress like a training loop; rank 1 gets stuck after step 5 (as in a collective that never
completes), rank 0 after step 20 waiting for it. No TensorFlow: the watchdog is about processes."""
import os
import threading
import time

import tfdist

rank = int(os.environ["TFDIST_RANK"])


def stuck_in_allreduce():
    threading.Event().wait()


def waiting_for_peers():
    threading.Event().wait()


for step in range(1, 1000):
    tfdist.report_progress(step)
    print(f"step {step}", flush=True)
    if rank == 1 and step == 5:
        stuck_in_allreduce()
    if rank == 0 and step == 20:
        waiting_for_peers()
    time.sleep(0.6)  # longer than report_progress's write interval: every step reaches the file
