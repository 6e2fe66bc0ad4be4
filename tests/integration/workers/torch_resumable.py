"""A torchrun-style DistributedDataParallel loop using tfdist's worker API, for the torch mode's restart and
preemption test: its data fetched once per node (`tfdist.download(scope="node")`), a `tfdist.TorchState`
checkpoint of the model and optimizer every SAVE_FREQ steps and restored at the start of every run, and
`ctx.should_preempt(step)` at every step boundary.

The chief appends "attempt step" to $OUT/steps.txt after each step and saves the final weights to
$OUT/weights.npz; a fetch appends the fetching rank to $OUT/fetches.txt. KILL_AT=S: rank 1 of the first run
SIGKILLs itself after step S. SLOW=T: every rank sleeps T seconds after each step in the first SLOW_RUNS runs.
"""

import os
import signal
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import tfdist

ctx = tfdist.init()
dist.init_process_group("gloo")
OUT = os.environ["OUT"]
TOTAL_STEPS, GLOBAL_BATCH = 30, 8
KILL_AT = int(os.environ.get("KILL_AT", "0"))
SLOW = float(os.environ.get("SLOW", "0")) if ctx.attempt < int(os.environ.get("SLOW_RUNS", "1000")) else 0.0


def make_data(directory):
    with open(os.path.join(OUT, "fetches.txt"), "a") as f:
        f.write(f"{ctx.rank}\n")
    rng = np.random.RandomState(0)
    x = rng.rand(GLOBAL_BATCH * TOTAL_STEPS, 4).astype("float32")
    np.savez(os.path.join(directory, "data.npz"), x=x, y=x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32"))


fetched = tfdist.download(make_data, name="torch-data", scope="node", root=os.environ["DATA_ROOT"])
with np.load(os.path.join(fetched, "data.npz")) as data:
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])

torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
state = tfdist.TorchState(model=model.module, optimizer=optimizer)
step = tfdist.restore_checkpoint(state)
per_rank = GLOBAL_BATCH // ctx.size
while step < TOTAL_STEPS:
    start = step * GLOBAL_BATCH + ctx.rank * per_rank  # each rank its part of global batch `step`
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x[start:start + per_rank]), y[start:start + per_rank]).backward()
    optimizer.step()
    step += 1
    if ctx.is_chief:
        with open(os.path.join(OUT, "steps.txt"), "a") as f:
            f.write(f"{ctx.attempt} {step}\n")
    if KILL_AT and ctx.attempt == 0 and ctx.rank == 1 and step == KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)
    saved = step % int(os.environ.get("SAVE_FREQ", "5")) == 0
    if saved:
        tfdist.save_checkpoint(state, step)
    if ctx.should_preempt(step):
        if not saved:
            tfdist.save_checkpoint(state, step)
        print(f"rank {ctx.rank} stopped at step {step}", flush=True)
        sys.exit(0)
    if SLOW:
        time.sleep(SLOW)
if ctx.is_chief:
    np.savez(os.path.join(OUT, "weights.npz"), *[p.detach().numpy() for p in model.module.parameters()])
print(f"rank {ctx.rank} done at step {step}", flush=True)
dist.destroy_process_group()
