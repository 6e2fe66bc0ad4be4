"""Pure functions: a job's placement -> each worker process's environment.

The local launcher uses them for one node; the coordinator uses the same
functions for whole nodes. Nothing here touches processes or sockets, so
the exact JSON is tested directly.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Mapping

from cluster.config import ExperimentConfig
from tfdist import batching, envvars


@dataclasses.dataclass(frozen=True)
class NodePlacement:
    """The part of one node a job got."""

    host: str  # address every other node of the job can reach this one at
    slots: int
    ports: tuple[int, ...]  # one per worker process this node runs
    # CPU slots: one process per slot. GPU nodes: one process drives them all.
    process_per_slot: bool = True

    @property
    def num_processes(self) -> int:
        return self.slots if self.process_per_slot else 1


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    """One worker process of a job."""

    rank: int
    local_rank: int
    local_size: int
    node_rank: int
    host: str
    port: int
    local_slots: int  # replicas this process drives

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def plan_workers(nodes: list[NodePlacement]) -> list[WorkerSpec]:
    """Numbers the worker processes: ranks node by node, local ranks within."""
    workers: list[WorkerSpec] = []
    for node_rank, node in enumerate(nodes):
        n = node.num_processes
        if len(node.ports) != n:
            raise ValueError(f"node {node_rank} ({node.host}) runs {n} processes but got {len(node.ports)} ports")
        for local_rank in range(n):
            workers.append(WorkerSpec(
                rank=len(workers), local_rank=local_rank, local_size=n, node_rank=node_rank,
                host=node.host, port=node.ports[local_rank],
                local_slots=1 if node.process_per_slot else node.slots,
            ))
    return workers


def tf_config(workers: list[WorkerSpec], rank: int) -> dict:
    """TF_CONFIG for MultiWorkerMirroredStrategy: every process is a worker, rank 0 the chief."""
    return {
        "cluster": {"worker": [w.address for w in workers]},
        "task": {"type": "worker", "index": rank},
    }


def worker_environment(job_id: str, config: ExperimentConfig, workers: list[WorkerSpec], rank: int,
                       ready_file: str | None = None) -> dict[str, str]:
    """Everything tfdist adds to one worker's environment (on top of the node's own)."""
    me = workers[rank]
    slots = sum(w.local_slots for w in workers)
    env: dict[str, str] = dict(config.environment_variables)
    env.update({
        envvars.JOB_ID: job_id,
        envvars.RANK: str(rank),
        envvars.SIZE: str(len(workers)),
        envvars.LOCAL_RANK: str(me.local_rank),
        envvars.LOCAL_SIZE: str(me.local_size),
        envvars.NODE_RANK: str(me.node_rank),
        envvars.NUM_NODES: str(workers[-1].node_rank + 1),
        envvars.SLOTS: str(slots),
        envvars.LOCAL_SLOTS: str(me.local_slots),
        envvars.DISTRIBUTION: config.distribution_mode,
        envvars.HPARAMS: json.dumps(dict(config.hyperparameters), sort_keys=True, default=str),
        envvars.TF_CONFIG: json.dumps(tf_config(workers, rank), sort_keys=True),
        # Lines reach the launcher as they are printed, not when a buffer fills.
        "PYTHONUNBUFFERED": "1",
    })
    gbs = config.global_batch_size
    if gbs is not None:
        sizes = batching.split_batch(gbs, slots, me.local_slots)
        env[envvars.GLOBAL_BATCH_SIZE] = str(gbs)
        env[envvars.PER_REPLICA_BATCH_SIZE] = str(sizes.per_replica)
        env[envvars.PER_WORKER_BATCH_SIZE] = str(sizes.per_worker)
    if ready_file:
        env[envvars.READY_FILE] = ready_file
    return env


def job_environments(job_id: str, config: ExperimentConfig, nodes: list[NodePlacement],
                     ready_files: Mapping[int, str] | None = None) -> list[dict[str, str]]:
    """The environment of every worker of a job, indexed by rank."""
    workers = plan_workers(nodes)
    ready_files = ready_files or {}
    return [worker_environment(job_id, config, workers, w.rank, ready_files.get(w.rank)) for w in workers]
