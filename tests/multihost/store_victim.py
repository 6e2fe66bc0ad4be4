"""A job that pauses between two collectives while another host attacks its store: rank 0 writes the
store's address (not its secret) to OUT/store, every rank waits for OUT/go (at most 120 s), then the ranks
allgather again and print what they got."""
import json
import os
import sys
import time

import tfdist

out = sys.argv[1]
ctx = tfdist.context_from_env(os.environ)
first = ctx.allgather(ctx.rank)
if ctx.rank == 0:
    with open(os.path.join(out, "store.tmp"), "w") as f:
        f.write(os.environ["TFDIST_STORE"])
    os.rename(os.path.join(out, "store.tmp"), os.path.join(out, "store"))
deadline = time.monotonic() + 120
while not os.path.exists(os.path.join(out, "go")):
    if time.monotonic() > deadline:
        sys.exit(f"rank {ctx.rank}: {out}/go did not appear within 120s")
    time.sleep(0.05)
second = ctx.allgather(f"rank {ctx.rank}")
print("RESULT " + json.dumps({"rank": ctx.rank, "first": first, "second": second}), flush=True)
