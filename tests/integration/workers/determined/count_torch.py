"""A PyTorch Core API script under `determined.launch.torch_distributed`: torch's own rendezvous from torchrun's
variables, the context from them (DistributedContext.from_torch_distributed()), both collectives."""

import torch
import torch.distributed as dist

import determined as det

dist.init_process_group("gloo")
distributed = det.core.DistributedContext.from_torch_distributed()
with det.core.init(distributed=distributed) as core_context:
    total = torch.tensor([float(distributed.rank + 1)])
    dist.all_reduce(total)
    ranks = core_context.distributed.allgather(distributed.rank)
    if distributed.rank == 0:
        core_context.train.report_validation_metrics(steps_completed=1, metrics={"sum": total.item()})
    print(f"rank {distributed.rank} of {distributed.size} (node {distributed.cross_rank}): sum {total.item():g}, "
          f"ranks {ranks}", flush=True)
dist.destroy_process_group()
