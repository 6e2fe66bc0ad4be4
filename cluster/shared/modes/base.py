"""The values every mode's plan takes and returns, the `Planner` protocol every mode implements, and the
environment every mode shares."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Callable, Mapping, Protocol, Sequence

from cluster.shared import determined_view, diagnose_variant
from cluster.shared.experiment import ExperimentConfig
from tfdist import batching, envvars
from tfdist.errors import TfdistError


LOOPBACK = "127.0.0.1"  # where a one-node job's store is served


class PlanError(TfdistError):
    """A placement a plan cannot run on (too few ports or GPUs on a node, a single-node mode over several
    nodes): its caller broke the contract, the user did nothing wrong. The message names the node."""


class SuccessRule(str, enum.Enum):
    """When a job has succeeded (a failing process always fails it)."""

    ALL_RANKS = "ALL_RANKS"  # every process exited 0 (collective modes: MWMS, Horovod)
    CHIEF = "CHIEF"  # rank 0 exited 0; the others are then stopped (parameter-server mode). Processes
    # marked expendable may fail before that without failing the job.


@dataclasses.dataclass(frozen=True)
class NodePlacement:
    """One node of a job, as placed: its address, slots and the ports leased there."""

    agent: str
    host: str  # the address the job's other nodes reach this one at
    slots: int
    ports: tuple[int, ...]  # as many as the plan runs processes on the node
    gpu_node: bool = False  # slots are GPUs (the devices come separately)


@dataclasses.dataclass(frozen=True)
class Placement:
    job_id: str
    nodes: tuple[NodePlacement, ...]  # node_rank order
    attempt: int = 0  # the job's run: 0 first, +1 per restart or resume
    checkpoint_dir: str = ""  # where the job's checkpoints go ("" none configured)
    latest_checkpoint: tuple[str, int] | None = None  # (path, step) this run resumes from


@dataclasses.dataclass(frozen=True)
class ProcessPlan:
    """One worker process of a job."""

    rank: int
    node_rank: int
    local_rank: int
    local_size: int
    port: int
    gpus: tuple[int, ...]  # GPU indices it sees (CUDA_VISIBLE_DEVICES); empty on CPU slots
    replicas: int  # slots this process drives
    env: Mapping[str, str]  # what tfdist adds to the node's environment
    role: str = "worker"  # the TF task type: worker, chief, ps, evaluator
    expendable: bool = False  # its failure alone does not end the job (ps mode's workers and evaluator)


@dataclasses.dataclass(frozen=True)
class JobPlan:
    processes: tuple[ProcessPlan, ...]  # rank order
    success: SuccessRule
    store: tuple[int, int] | None = None  # (node_rank, port): the job's key-value store, served by that agent

    @property
    def expendable(self) -> frozenset[int]:
        return frozenset(p.rank for p in self.processes if p.expendable)

    @property
    def size(self) -> int:
        return len(self.processes)

    def on_node(self, node_rank: int) -> tuple[ProcessPlan, ...]:
        return tuple(p for p in self.processes if p.node_rank == node_rank)


class Planner(Protocol):
    """One distribution mode: how many processes run where, with which environment, and when the job has
    succeeded. Planners are pure; the coordinator and agents apply their plans and hold no per-mode branch.
    A new mode is a module with one class satisfying this protocol, registered in `modes.PLANNERS` (whose
    `dict[str, Planner]` annotation makes the type checker hold every planner to this protocol:
    tests/unit/test_planner_protocol.py). Attributes are read-only."""

    @property
    def name(self) -> str:
        """The `distribution.mode` it plans; workers are told it (TFDIST_DISTRIBUTION)."""

    @property
    def single_node(self) -> bool:
        """One process drives every slot of one node: the coordinator refuses a job larger than the largest
        node instead of letting it wait forever."""

    @property
    def success(self) -> SuccessRule:
        """When the job has succeeded; every plan carries it (JobPlan.success) to the coordinator's policy."""

    @property
    def worker_needs(self) -> tuple[str, ...]:
        """Python modules a worker must import (e.g. `horovod`): a local launch asks the worker Python
        for them and refuses early, before anything starts."""

    def ports_on(self, nodes: Sequence[NodePlacement], config: ExperimentConfig) -> list[int]:
        """Ports to lease on each node (node_rank order), before the placement is final: one per process,
        plus the job's store on the first node."""

    def plan(self, placement: Placement, config: ExperimentConfig, devices: Sequence[Sequence[int]]) -> JobPlan:
        """The job's processes, their roles and environments, and its success rule. `devices` are each
        node's GPU indices (empty on CPU nodes); the placement's ports are those `ports_on` asked for."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a process stands, before the mode adds its own variables."""

    rank: int
    node_rank: int
    local_rank: int
    local_size: int
    host: str
    port: int
    gpus: tuple[int, ...]
    replicas: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def ports_per_process(nodes: Sequence[NodePlacement], processes_on: Callable[[NodePlacement], int]) -> list[int]:
    """Ports to lease on each node: one per process (`processes_on(node)`), and on the first node one
    more, last, for the job's key-value store (collectives, Horovod's rendezvous)."""
    return with_store([processes_on(node) for node in nodes])


def with_store(counts: list[int]) -> list[int]:
    counts = list(counts)
    counts[0] += 1
    return counts


def store_of(placement: Placement, processes_on_first: int) -> tuple[int, int] | None:
    """(node 0, port) of the job's store: the first node's port after its processes' ones; None when
    the placement leased none (a plan built by hand, e.g. in a unit test)."""
    first = placement.nodes[0]
    return (0, first.ports[-1]) if len(first.ports) > processes_on_first else None


def layout(placement: Placement, devices: Sequence[Sequence[int]],
           processes_on: Callable[[NodePlacement], int]) -> list[Layout]:
    """Numbers the processes node by node. `processes_on(node)` is the mode's count for a node;
    a node's GPUs are split evenly over its processes. A node's ports beyond its processes' are
    the job's store's."""
    if len(devices) != len(placement.nodes):
        raise PlanError(f"{len(devices)} device lists for {len(placement.nodes)} nodes")
    result: list[Layout] = []
    for node_rank, (node, gpus) in enumerate(zip(placement.nodes, devices)):
        count = processes_on(node)
        if len(node.ports) < count:
            raise PlanError(f"node {node_rank} ({node.agent}) runs {count} processes but got "
                             f"{len(node.ports)} ports")
        if node.gpu_node and len(gpus) != node.slots:
            raise PlanError(f"node {node_rank} ({node.agent}) holds {node.slots} GPU slots but got "
                             f"{len(gpus)} GPUs")
        per_process = len(gpus) // count if gpus else 0
        for local_rank in range(count):
            mine = tuple(gpus[local_rank * per_process:(local_rank + 1) * per_process])
            result.append(Layout(rank=len(result), node_rank=node_rank, local_rank=local_rank, local_size=count,
                                 host=node.host, port=node.ports[local_rank], gpus=mine,
                                 replicas=node.slots // count))
    return result


def process_plan(me: Layout, env: Mapping[str, str], gpus: tuple[int, ...] | None = None) -> ProcessPlan:
    """A worker process where `layout` put it, with its environment (`gpus`: the ones it is counted as
    holding, when not the ones its layout split off)."""
    return ProcessPlan(rank=me.rank, node_rank=me.node_rank, local_rank=me.local_rank, local_size=me.local_size,
                       port=me.port, gpus=me.gpus if gpus is None else gpus, replicas=me.replicas, env=env)


def rendezvous_host(placement: Placement) -> str:
    """Where rank 0 serves a framework's own rendezvous (JAX's coordination service, torch's TCPStore): the
    first node's address for the job, loopback when the job has one node."""
    return LOOPBACK if len(placement.nodes) == 1 else placement.nodes[0].host


@dataclasses.dataclass(frozen=True)
class JobServices:
    """What every process of a job is told about the job as a whole."""

    store: tuple[int, int] | None  # (node_rank, port)
    store_address: str | None  # host:port
    cluster: str  # TFDIST_CLUSTER
    attempt: int = 0
    checkpoint_dir: str = ""


def job_services(placement: Placement, processes: Sequence[Layout]) -> JobServices:
    """The store's address is where its agent serves it (cluster/agent/start_plan.py binds the host
    TFDIST_STORE names): loopback when every process runs on its node, else that node's address for the
    job (its interface, never every interface)."""
    on_first = sum(1 for p in processes if p.node_rank == 0)
    store = store_of(placement, on_first)
    address = f"{rendezvous_host(placement)}:{store[1]}" if store else None
    return JobServices(store, address, cluster_info(placement, processes), placement.attempt,
                       placement.checkpoint_dir)


def cluster_info(placement: Placement, processes: Sequence[Layout]) -> str:
    """TFDIST_CLUSTER: every node's address and GPUs and the ranks it runs (JSON)."""
    nodes = [{"node_rank": i, "agent": n.agent, "address": n.host,
              "gpus": sorted({g for p in processes if p.node_rank == i for g in p.gpus}),
              "ranks": [p.rank for p in processes if p.node_rank == i]} for i, n in enumerate(placement.nodes)]
    latest = placement.latest_checkpoint
    return json.dumps({"job_id": placement.job_id, "nodes": nodes, "attempt": placement.attempt,
                       "checkpoint_dir": placement.checkpoint_dir,
                       "latest_checkpoint": {"path": latest[0], "step": latest[1]} if latest else None},
                      sort_keys=True, separators=(",", ":"))


def common_env(job_id: str, config: ExperimentConfig, processes: Sequence[Layout], me: Layout,
               gpu_job: bool, mode: str, services: JobServices | None = None,
               slots: int | None = None) -> dict[str, str]:
    """The variables every mode sets: ranks, sizes, batch sizes, hyperparameters, the config's `data` and its
    Determined view, devices, the job's store and cluster layout. `slots` is the job's replicas (default: the sum
    of every process's)."""
    if slots is None:
        slots = sum(p.replicas for p in processes)
    env: dict[str, str] = {**config.environment_variables, **determined_view.device_variables(config, gpu_job)}
    env.update({
        envvars.JOB_ID: job_id,
        envvars.RANK: str(me.rank),
        envvars.SIZE: str(len(processes)),
        envvars.LOCAL_RANK: str(me.local_rank),
        envvars.LOCAL_SIZE: str(me.local_size),
        envvars.NODE_RANK: str(me.node_rank),
        envvars.NODE_ADDRESS: me.host,
        envvars.NUM_NODES: str(processes[-1].node_rank + 1),
        envvars.SLOTS: str(slots),
        envvars.LOCAL_SLOTS: str(me.replicas),
        envvars.DISTRIBUTION: mode,
        envvars.ROLE: "worker",
        envvars.HPARAMS: json.dumps(dict(config.hyperparameters), sort_keys=True, default=str),
        envvars.USER_DATA: json.dumps(dict(config.user_data), sort_keys=True, default=str),
        envvars.EXPERIMENT_CONFIG: determined_view.view_json(config),
        # Lines reach the launcher as they are printed, not when a buffer fills.
        "PYTHONUNBUFFERED": "1",
    })
    env.update(diagnose_variant.worker_env(config.diagnose))
    if config.searcher:  # a trial: what it reports and how long it may train (ctx.searcher)
        shown = ("name", "metric", "smaller_is_better", "max_length", *(k for k in ("time_metric", "max_time")
                                                                        if k in config.searcher))
        env[envvars.SEARCHER] = json.dumps({k: config.searcher.get(k) for k in shown}, sort_keys=True)
    if config.aggregation_frequency > 1:
        env[envvars.AGGREGATION_FREQUENCY] = str(config.aggregation_frequency)
    if config.average_training_metrics:
        env[envvars.AVERAGE_TRAINING_METRICS] = "1"
    if services is not None:
        env[envvars.CLUSTER] = services.cluster
        env[envvars.ATTEMPT] = str(services.attempt)
        if services.checkpoint_dir:
            env[envvars.CHECKPOINT_DIR] = services.checkpoint_dir
        if services.store_address:
            env[envvars.STORE] = services.store_address
    if gpu_job:
        # Exactly the GPUs this process holds; indices as nvidia-smi numbers them (PCI bus order).
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in me.gpus)
        env[envvars.GPUS] = ",".join(str(g) for g in me.gpus)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""  # CPU slots: a GPU on the machine is not this job's to take
    gbs = config.global_batch_size
    if gbs is not None:
        sizes = batching.split_batch(gbs, slots, max(1, me.replicas))
        env[envvars.GLOBAL_BATCH_SIZE] = str(gbs)
        env[envvars.PER_REPLICA_BATCH_SIZE] = str(sizes.per_replica)
        env[envvars.PER_WORKER_BATCH_SIZE] = str(sizes.per_worker)
    return env
