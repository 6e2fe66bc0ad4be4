"""Rank 0 (node 0, whose agent serves the job's store) posts its barrier key and exits; rank 1, on another
node, reads that key for a few seconds after rank 0's process is gone, as a slower rank reads the job's last
collective. Prints `READS n` (every read answered) or exits 1 naming the read that was not."""
import os
import sys
import time

import tfdist
from tfdist import envvars
from tfdist.collectives import store_request
from tfdist.errors import UnavailableError

out = sys.argv[1]
ctx = tfdist.context_from_env(os.environ)
ctx.barrier()
if ctx.rank == 0:
    with open(os.path.join(out, "pid.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.rename(os.path.join(out, "pid.tmp"), os.path.join(out, "pid"))
    sys.exit(0)

deadline = time.monotonic() + 120
while not os.path.exists(os.path.join(out, "pid")):
    if time.monotonic() > deadline:
        sys.exit("rank 0 did not write its pid within 120s")
    time.sleep(0.05)
pid = int(open(os.path.join(out, "pid")).read())
while os.path.exists(f"/proc/{pid}"):  # this test's agents share one machine
    if time.monotonic() > deadline:
        sys.exit(f"rank 0 (pid {pid}) did not exit within 120s")
    time.sleep(0.05)
reads = 0
for _ in range(25):  # 5 s after rank 0 exited: its agent has long reaped it and shipped its exit
    try:
        status, value = store_request(os.environ[envvars.STORE], "GET", "/tfdist/1-0", patience=2.0)
    except UnavailableError as e:
        sys.exit(f"read {reads + 1} after rank 0 exited: {e}")
    assert status in (200, 404), (status, value)
    reads += 1
    time.sleep(0.2)
print(f"READS {reads}", flush=True)
