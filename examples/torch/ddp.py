"""A PyTorch DistributedDataParallel script written for torchrun, as the HPC guide launches one beside
TensorFlow: `torchrun --nproc-per-node 2 ddp.py` or, with tfdist's gang scheduling, restarts and logs,

    tfdist launch --config examples/torch/config.yaml

It reads only torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT through `env://`); no
tfdist import. `--out DIR` writes each rank's trained weights to DIR/rank<N>.npz.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--out", help="write this rank's weights to OUT/rank<N>.npz")
args = parser.parse_args()

cuda = torch.cuda.is_available()
dist.init_process_group(backend="nccl" if cuda else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
local_rank = int(os.environ["LOCAL_RANK"])
device = torch.device(f"cuda:{local_rank}") if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(device)
torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts rank 0's)

generator = torch.Generator().manual_seed(1)
inputs = torch.randn(512, 20, generator=generator)
targets = (inputs[:, :10].sum(dim=1) > 0).long()
data = TensorDataset(inputs, targets)
sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=2)
loader = DataLoader(data, batch_size=32, sampler=sampler)

model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(),
                                                    torch.nn.Linear(64, 2)).to(device),
                                device_ids=[local_rank] if cuda else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = torch.nn.CrossEntropyLoss()
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    total = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x.to(device)), y.to(device))
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        total += loss.item()
    if rank == 0:
        print(f"epoch {epoch + 1}: loss {total / len(loader):.4f}", flush=True)
print(f"rank {rank} of {world} (local {local_rank}) done", flush=True)
if args.out:
    import numpy as np

    np.savez(os.path.join(args.out, f"rank{rank}.npz"),
             **{name: p.detach().cpu().numpy() for name, p in model.module.state_dict().items()})
dist.destroy_process_group()
