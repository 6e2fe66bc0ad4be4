"""`torch`: PyTorch scripts written for `torchrun` (DistributedDataParallel and the rest of
torch.distributed), started by tfdist's agents instead: one process per slot (per GPU on GPU nodes), each
with the environment torchrun's elastic agent gives its workers, so `dist.init_process_group()` with the
default `env://` rendezvous needs no change:
MASTER_ADDR/MASTER_PORT (rank 0's leased port, where its TCPStore listens), RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK/GROUP_WORLD_SIZE (the node and the number of nodes), ROLE_NAME/ROLE_RANK/
ROLE_WORLD_SIZE, TORCHELASTIC_RUN_ID (the job), TORCHELASTIC_RESTART_COUNT (the run: restarts and resumes
count) and TORCHELASTIC_MAX_RESTARTS, and OMP_NUM_THREADS=1 where a node runs several processes (as torchrun).
Across nodes, GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME name the interface carrying the job's address (as
for Horovod: Gloo otherwise takes the interface of the hostname's address, often loopback).

GPUs: as under torchrun, every process of a node sees every GPU the job holds on that node
(CUDA_VISIBLE_DEVICES) and picks its own by LOCAL_RANK (`torch.cuda.set_device(local_rank)`); tfdist counts
each process as holding one. The job succeeds when every rank exits 0.
"""

from __future__ import annotations

from typing import Sequence

from cluster.shared.experiment import ExperimentConfig
from cluster.shared.modes.base import (JobPlan, NodePlacement, Placement, SuccessRule, common_env, job_services,
                                       layout, ports_per_process, process_plan, rendezvous_host)
from tfdist import envvars


def processes_on(node: NodePlacement) -> int:
    return node.slots


class TorchPlanner:
    """`torch`: spans nodes, torch.distributed's own collectives, every rank must succeed; needs PyTorch."""

    name = "torch"
    single_node = False
    success = SuccessRule.ALL_RANKS
    worker_needs: tuple[str, ...] = ("torch",)

    def ports_on(self, nodes: Sequence[NodePlacement], config: ExperimentConfig) -> list[int]:
        return ports_per_process(nodes, processes_on)  # rank 0's is the TCPStore's (MASTER_PORT)

    def plan(self, placement: Placement, config: ExperimentConfig, devices: Sequence[Sequence[int]]) -> JobPlan:
        processes = layout(placement, devices, processes_on)
        gpu_job = any(n.gpu_node for n in placement.nodes)
        services = job_services(placement, processes)
        nodes = len(placement.nodes)
        result = []
        for p in processes:
            env = common_env(placement.job_id, config, processes, p, gpu_job, self.name, services)
            env.update({
                "MASTER_ADDR": rendezvous_host(placement),
                "MASTER_PORT": str(processes[0].port),
                "RANK": str(p.rank),
                "WORLD_SIZE": str(len(processes)),
                "LOCAL_RANK": str(p.local_rank),
                "LOCAL_WORLD_SIZE": str(p.local_size),
                "GROUP_RANK": str(p.node_rank),
                "GROUP_WORLD_SIZE": str(nodes),
                "ROLE_NAME": "default",
                "ROLE_RANK": str(p.rank),
                "ROLE_WORLD_SIZE": str(len(processes)),
                "TORCHELASTIC_RUN_ID": placement.job_id,
                "TORCHELASTIC_RESTART_COUNT": str(placement.attempt),
                "TORCHELASTIC_MAX_RESTARTS": str(config.max_restarts),
                "TORCHELASTIC_USE_AGENT_STORE": "False",  # rank 0 serves the store, not an agent
            })
            if nodes > 1:  # Gloo and NCCL pick an interface by the hostname (loopback, often): the job's, filled in by
                # the node's agent (only it knows its interfaces' names)
                env["GLOO_SOCKET_IFNAME"] = env["NCCL_SOCKET_IFNAME"] = envvars.NODE_INTERFACE_PLACEHOLDER
            if p.local_size > 1:
                env.setdefault("OMP_NUM_THREADS", "1")
            if gpu_job:  # torchrun's contract: each process sees its node's GPUs and takes the LOCAL_RANK-th
                node_gpus = [g for q in processes if q.node_rank == p.node_rank for g in q.gpus]
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in node_gpus)
            result.append(process_plan(p, env))
        return JobPlan(processes=tuple(result), success=self.success, store=services.store)


TORCH = TorchPlanner()
