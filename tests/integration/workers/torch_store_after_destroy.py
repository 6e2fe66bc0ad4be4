"""Rank 0 destroys its process group and ends; rank 1, once it has (and half a second later), still uses
PyTorch's store (served from rank 0's process) before it destroys its own group: tfdist's rank 0 keeps the
store until every rank is done (tfdist/compat/torch_exit.py). Prints `STORE after` on rank 1."""
import datetime
import os
import sys
import time

import torch.distributed as dist

import tfdist

out = sys.argv[1]
ctx = tfdist.init()
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
dist.barrier()
if ctx.rank == 0:
    dist.destroy_process_group()
    open(os.path.join(out, "destroyed"), "w").close()
    print("rank 0 destroyed its group", flush=True)
    sys.exit(0)
deadline = time.monotonic() + 60
while not os.path.exists(os.path.join(out, "destroyed")):
    if time.monotonic() > deadline:
        sys.exit("rank 0 did not destroy its group within 60s")
    time.sleep(0.05)
time.sleep(0.5)
store = dist.distributed_c10d._get_default_store()
store.set("after", "rank 0 ended its group")
print("STORE", store.get("after").decode(), flush=True)
dist.destroy_process_group()
