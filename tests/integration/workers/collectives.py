"""Collectives and cluster info from a real job: prints what each rank got. With --init the rank joins
through tfdist.init() first (the mode's strategy is built), else it only reads its context."""
import json
import os
import sys

import tfdist

ctx = tfdist.init() if "--init" in sys.argv else tfdist.context_from_env(os.environ)
everyone = ctx.allgather({"rank": ctx.rank, "node": ctx.node_rank})
on_chief = ctx.gather(ctx.rank ** 2)
seed = ctx.broadcast(1234 if ctx.is_chief else None)
ctx.barrier()
info = ctx.cluster_info
print("RESULT " + json.dumps({"rank": ctx.rank, "everyone": everyone, "on_chief": on_chief, "seed": seed,
                              "nodes": [[n.address, list(n.ranks)] for n in info.nodes], "job": info.job_id}),
      flush=True)
