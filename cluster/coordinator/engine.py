"""The seam between a job's life (the coordinator's state machine, scheduler and store: the job side) and
where its processes run: an `Engine`. The job side never imports an engine; an engine never decides a job's
fate: it offers nodes, starts and stops what the job side's work says, and reports what happens on them as
the job machine's events, each inside one of the host's events.

    Engine        name; serve(front): add its own RPC services to the coordinator's gRPC server (before it
                  starts; the agents engine's AgentService and beacons); attach(host): offer its nodes and
                  start watching; tick(now): its periodic watch (the agents engine declares silent agents
                  lost); close(timeout): stop what it started, within the bound
    EngineHost    the job side as an engine sees it (the core implements it): one event at a time (`event`:
                  under the lock, one transaction), the node table, allocations, runs and the lifecycle that
                  takes job machine events, a node's loss, a worker's exit, output lines and metric rows,
                  and a way to hear that a node's work changed (`on_work_changed`)

Engines, one package each under cluster/engines/ and one line in its ENGINES registry (mypy holds each to
this protocol: tests/unit/test_engines.py): `agents` (remote agents over gRPC, cluster/engines/agents/;
Slurm runs agents through srun) and `local` (this machine's processes, no agent: what `tfdist launch`
uses). docs/development.md has a skeleton.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterable, Protocol

from cluster.coordinator.allocations import AllocationTable
from cluster.coordinator.lifecycle import JobLifecycle
from cluster.coordinator.metrics import Telemetry, Throughput
from cluster.coordinator.policy import Outcome
from cluster.coordinator.run_state import Runs
from cluster.coordinator.store import StateStore
from cluster.coordinator.user_first import UserFirst, UserFirstLock
from cluster.coordinator.values import AgentLive, ChangeBoard, Settings
from cluster.shared.credentials import Authority
from cluster.shared.model import Gpu, LogLine, MetricRow, WorkerExit
from cluster.shared.work import NodeUsage

ENGINE_THREADS = 64  # the coordinator's server threads for an engine's held calls (agents' WaitForWork)


class EngineHost(Protocol):
    store: StateStore
    settings: Settings
    lock: UserFirstLock  # the event lock; a user's action takes it before any node's event
    user_first: UserFirst  # a node's event waits its turn behind users' (agent_turn)
    agents: dict[str, AgentLive]  # the nodes by name, lost ones too
    agent_board: ChangeBoard  # per node: its work's version
    allocs: AllocationTable
    runs: Runs
    lifecycle: JobLifecycle  # takes the job machine's events: handle(job_id, event, now)
    telemetry: Telemetry
    throughput: Throughput
    usage: dict[str, NodeUsage]
    metrics_addresses: dict[str, str]

    def event(self, durable: bool = False, version_of: str = "", user: bool = False) -> contextlib.AbstractContextManager:
        """One event: under the lock, in one store transaction; all of it or none of it."""

    def node_lost(self, name: str, outcome: Outcome, now: float) -> None:
        """Inside an event: the node is gone; its jobs fail (`outcome` says why) and free it."""

    def report_exit(self, agent: str, job_id: str, exit_: WorkerExit, now: float) -> None: ...

    def push_logs(self, agent: str, job_id: str, lines: list[LogLine], source: str = "", first_seq: int = 0) -> None: ...

    def push_metrics(self, agent: str, job_id: str, rows: list[MetricRow], source: str = "",
                     first_seq: int = 0) -> None: ...

    def on_work_changed(self, listener: Callable[[Iterable[str]], None]) -> None:
        """`listener(nodes)` after each event that changed those nodes' work (outside the coordinator's lock)."""


@dataclasses.dataclass(frozen=True)
class Front:
    """The coordinator's gRPC server, for an engine's own services: added before it starts, each call
    through `gate` (the credential and role check every RPC passes: rpc_edge.guard)."""
    server: Any  # grpc.Server
    gate: Any  # rpc_edge.Gate
    host: EngineHost
    authority: Authority
    address: str  # HOST of the listen address
    port: int
    plaintext: bool = False  # served without TLS (--insecure-plaintext): credentials it issues say so


class Engine(Protocol):
    @property
    def name(self) -> str: ...

    def serve(self, front: Front) -> None:
        """Before the coordinator's server starts: add the engine's own RPC services (or nothing)."""

    def attach(self, host: EngineHost) -> None:
        """Called once, when the coordinator starts: offer the nodes, start watching them."""

    def tick(self, now: float) -> None:
        """About each second, from the coordinator's watchdog loop: the engine's own watch (or nothing)."""

    def close(self, timeout: float) -> None:
        """Stop everything it started, within `timeout` seconds (its workers get their grace)."""


@dataclasses.dataclass(frozen=True)
class EngineOptions:
    """What `tfdist coordinator --engine NAME` and a local launch know to build an engine with."""
    slots: int = 1  # the local engine's: worker processes on this machine
    gpus: tuple[Gpu, ...] = ()  # the local engine's: the GPUs behind its slots (none: CPU slots)
    # The Kubernetes engine's (cluster/engines/kubernetes): where its jobs' pods go and how they reach back.
    namespace: str = "tfdist"
    kubeconfig: str = ""  # "": the pod's ServiceAccount (in-cluster)
    advertise: str = ""  # HOST:PORT the pods reach the coordinator at ("": its --listen address)
    image: str = ""  # the pods' image where a job's config names none (`kubernetes.image`)
    agent_command: tuple[str, ...] = ("tfdist",)  # how a pod runs tfdist (its image's entry)
    start_timeout: float = 120.0  # seconds a gang's pods have to be bound to their nodes
    pull_timeout: float = 600.0  # seconds a bound pod may take to get its image (pulls are tried again meanwhile)
    node_selector: str = ""  # "k=v,...": only the nodes with these labels are offered ("": every node)
    tolerate: tuple[str, ...] = ("nvidia.com/gpu",)  # taint keys tolerated, in offers and pods alike
    node_kind: str = "auto"  # gpu, cpu, or auto: GPU nodes where any is offered (never both in one gang)
    system_nodes: bool = False  # offer control-plane nodes too
    job_service_account: str = "tfdist-job"  # the jobs' pods' ServiceAccount (no rights, no token)
    guaranteed: bool = False  # the jobs' pods' CPU and memory limits equal their requests (QoS Guaranteed)
    allow_secrets: tuple[str, ...] = ()  # the Secrets a job's pod_spec may give its pods
