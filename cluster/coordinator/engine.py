"""The contract between a job's life (the coordinator's state machine, scheduler and store: the job side) and
where its processes run: an `Engine`. The job side never imports an engine; an engine imports nothing of the
job side but this module and never writes a job's, an allocation's or a run's state: it offers nodes, carries
out the verbs the job side gives each node, and answers with typed events through one narrow `EngineHost`.

    Engine       name; event_lock(): the coordinator's one lock, as its nodes' traffic needs it ordered;
                 serve(front): its own RPC services on the coordinator's server (before it starts), each
                 call through front.call (the credential and role check);
                 attach(host): offer its nodes and start watching; tick(now): its periodic watch;
                 peer_addresses(job, nodes): where a run's peers reach each node (None: the node's own
                 address); close(timeout): stop what it started, within the bound
    EngineHost   the job side as an engine sees it, methods only:
                 nodes      register_node, node_report -> Work (its verbs), node_held_elsewhere,
                            node_withdrawn, node_seen, check_silent, node_count, node, holds, on_work_changed,
                            work_version
                 a node's   report_exit, push_logs, push_metrics
                 output
                 gangs      placement, job, gang_event(GangReady | CouldNotStart | Disrupted | NodeVanished |
                            GangFailed | GangHeld); where the engine places gangs itself (places_gangs; each queued
                            run handed over once as a GangRequest through place): gang_waiting, gang_placed
                 growth     nodes_expected(NodesExpected): nodes its cluster may still add (an autoscaled
                            pool); the job side answers with Engine.demand (how many the queue lacks)
    Work         the verbs for one node (cluster/shared/work.py): lease and check a placed gang's ports
                 (reserve), probe its peers, start its share (StartTask: the per-node plan), carry a
                 preemption request, dump stacks, stop (and release) a run

A node speaks the node protocol (cluster/coordinator/nodes/: what its reports mean, the verbs it gets back):
an agent over the agents engine's gRPC AgentService (cluster/engines/agents/: agents on machines, Slurm's,
a Kubernetes pod's, whose engine runs the agents engine for its pods), or its engine in-process (the local
engine, the Kubernetes engine for a node no pod of a run holds). Engines are one package each under cluster/engines/, each declaring
its options and flags (cluster/engines/__init__.py: EngineKind), and one line in its registry;
docs/development.md has a worked skeleton.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Any, Callable, Collection, ContextManager, Iterable, Mapping, Protocol, Sequence

from cluster.coordinator.values import Settings
from cluster.shared.credentials import Authority, Credential, Principal
from cluster.shared.model import AgentRecord, Allocation, Job, LogLine, MetricRow, WorkerExit
from cluster.shared.work import AgentReport, RunningJob, Work
from tfdist.errors import InternalError

ENGINE_THREADS = 64  # the coordinator's server threads for an engine's held calls (agents' WaitForWork)


# ---------------------------------------------------------------- what an engine says of a gang it runs
@dataclasses.dataclass(frozen=True)
class GangReady:
    """Every node of the run is up (its pods bound, their images pulled): its start-up clock starts now."""


@dataclasses.dataclass(frozen=True)
class CouldNotStart:
    """The run did not start (refused, not bound in time, its node taken first): placed again, bounded."""
    why: str


@dataclasses.dataclass(frozen=True)
class Disrupted:
    """The cluster takes a node of the running gang back (a drain): it stops at a common step, placed again."""
    why: str


@dataclasses.dataclass(frozen=True)
class NodeVanished:
    """A node of the run took its workers with it (its pod evicted or deleted): their ranks are gone."""
    node: str
    why: str


@dataclasses.dataclass(frozen=True)
class GangFailed:
    """The run cannot go on (no image, a refused Secret, pods that never start): the job fails, saying why."""
    why: str
    restartable: bool = False


@dataclasses.dataclass(frozen=True)
class GangHeld:
    """The run's nodes are not up yet for a reason outside the job (an admission queue holds its pods): its
    start-up clock waits (said again while it is held), and `why` is the job's waiting reason."""
    why: str


GangEvent = GangReady | CouldNotStart | Disrupted | NodeVanished | GangFailed | GangHeld


@dataclasses.dataclass(frozen=True)
class NodesExpected:
    """Nodes the engine's cluster may still add (an autoscaled pool's room): `count` more of `slots` each, and
    who adds them (`why`, for waiting reasons). A job that fits only with them waits instead of being
    refused; the engine hears how many of them the queue lacks (Engine.demand)."""
    slots: int
    count: int
    why: str


@dataclasses.dataclass(frozen=True)
class GangRequest:
    """A queued run handed to an engine that places gangs itself (Engine.places_gangs): its size, its priority
    and the only nodes it may run on ((): any). The engine answers with EngineHost.gang_waiting (why it waits)
    and gang_placed (where it landed)."""
    job_id: str
    attempt: int
    slots: int
    priority: int = 0
    nodes: tuple[str, ...] = ()


class EventLock(Protocol):
    """The coordinator's one lock: every event (a user's action, a node's report, a watchdog round) holds it.
    Reentrant. The engine supplies it (Engine.event_lock) because only the engine knows whether its nodes'
    traffic can crowd users out: the agents engine's 10,000 heartbeating nodes can, and its lock lets users'
    actions go first (cluster/engines/agents/user_first.py); one node's engine needs no order (PlainLock)."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> Any: ...

    def for_user(self) -> ContextManager[Any]:
        """Held for a user's action (a submission, a cancel)."""

    def user_action(self) -> ContextManager[Any]:
        """Around a user's action from its arrival to its answer (a wider span than the lock is held for)."""

    def node_turn(self) -> None:
        """Before a node's report that will change state takes the lock: it may wait (bounded) for users."""


class PlainLock:
    """The coordinator's lock where nothing orders its waiters: users' actions wait as anything else does."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def __enter__(self) -> "PlainLock":
        self._lock.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()

    def for_user(self) -> ContextManager[Any]:
        return self

    def user_action(self) -> ContextManager[Any]:
        return contextlib.nullcontext()

    def node_turn(self) -> None:
        pass


class NodeView(Protocol):
    """A node as the job side knows it (read-only)."""
    @property
    def lost(self) -> bool: ...

    @property
    def running(self) -> Mapping[str, Any]:  # job id -> the ranks that joined there
        ...

    @property
    def leased(self) -> Collection[str]:  # jobs whose ports it holds
        ...

    @property
    def beaconing(self) -> bool:  # its beacons prove it alive (node_seen with beacons), since it registered
        ...


class EngineHost(Protocol):
    @property
    def settings(self) -> Settings:  # the coordinator's (read-only)
        ...

    # ------------------------------------------------------------ nodes
    def register_node(self, record: AgentRecord, running: Sequence[RunningJob], leased: Iterable[str], now: float,
                      watched: bool = True, held_elsewhere: int = 0, metrics_address: str = "") -> None:
        """A node (re)joins, saying what it runs and holds. `watched`: lost when silent (False: the engine
        answers for it); `held_elsewhere`: its slots that work outside tfdist holds; `metrics_address`:
        HOST:PORT of its own /metrics, if it serves one."""

    def node_report(self, report: AgentReport, now: float) -> Work | None:
        """What a node runs and holds, its port checks and probes: its work back (None: register again)."""

    def node_held_elsewhere(self, name: str, slots: int, now: float) -> None: ...

    def node_withdrawn(self, name: str, why: str, now: float) -> None:
        """The engine no longer offers the node: it is lost, and the jobs on it fail saying why."""

    def node_seen(self, name: str, now: float, beacons: bool = False) -> bool:
        """A sign of life other than a report; `beacons`: the node's beacons prove it alive from now on
        until it registers again (`tfdist agents` says so). False if the node is not counted alive."""

    def check_silent(self, now: float) -> list[str]:
        """Watched nodes silent past `settings.lost_after` are lost (their jobs fail): their names."""

    def node_count(self) -> int:
        """How many nodes are counted alive."""

    def node(self, name: str) -> NodeView | None: ...

    def holds(self, name: str) -> bool:
        """Whether any job's allocation is on the node."""

    def on_work_changed(self, listener: Callable[[Iterable[str]], None]) -> None:
        """`listener(nodes)` after each event that changed those nodes' work (outside the coordinator's lock)."""

    def work_version(self, name: str) -> int: ...

    # ------------------------------------------------------------ what a node's workers produce
    def report_exit(self, agent: str, job_id: str, exit_: WorkerExit, now: float) -> None: ...

    def push_logs(self, agent: str, job_id: str, lines: list[LogLine], source: str = "", first_seq: int = 0) -> None: ...

    def push_metrics(self, agent: str, job_id: str, rows: list[MetricRow], source: str = "",
                     first_seq: int = 0) -> None: ...

    # ------------------------------------------------------------ gangs
    def placement(self, job_id: str) -> tuple[Allocation, ...]:
        """Where the job's current run is placed, one allocation per node (empty: nowhere)."""

    def job(self, job_id: str) -> Job | None:
        """The job as stored, read without the coordinator's lock."""

    def gang_event(self, job_id: str, event: GangEvent, now: float | None = None) -> None:
        """What the engine saw of a run; `now` None: the time the event is applied (in order with the job's)."""

    def gang_placed(self, job_id: str, attempt: int, nodes: Sequence[tuple[str, int]], now: float) -> str:
        """Where an engine that places gangs put a run it was handed ((node, slots) in node-rank order): the
        job side places it there. "" when taken; else why not (the run is no longer waiting, a node is not
        offered or lacks the slots), and nothing changed."""

    def gang_waiting(self, job_id: str, attempt: int, why: str, now: float) -> bool:
        """Why a run it was handed still waits (its quota, a scale-up): the job's waiting reason names it.
        False if that run no longer waits for the engine."""

    def nodes_expected(self, expected: Sequence[NodesExpected], now: float) -> None:
        """The nodes its cluster may still add, as of now (replacing what it said before; () for none)."""


@dataclasses.dataclass(frozen=True)
class Front:
    """The coordinator's gRPC server, for an engine's own services: added before it starts, each call
    through `gate` (the credential and role check every RPC passes): `call(method, request, context, handler)`
    answers one RPC with `handler(request, principal)` once the caller's credential and role passed, and each
    error as its status code; `verify(token)`: who a token names, if it still holds (not expired, not
    revoked), for what an engine checks itself (an agent's /metrics scraper); `holds(principal)`: whether a
    credential accepted before still holds (what a sign of life without a token, a beacon, is judged by);
    `issue(kind, name, coordinator)`: a credential of the coordinator's own, recorded in its book."""
    server: Any  # grpc.Server
    gate: Any  # rpc_edge.Gate
    host: EngineHost
    authority: Authority
    address: str  # HOST of the listen address
    port: int
    plaintext: bool = False  # served without TLS (--insecure-plaintext): credentials it issues say so
    call: Callable[[str, Any, Any, Callable[[Any, Principal], Any]], Any] = \
        dataclasses.field(default=lambda method, request, context, handler: _no_gate(method))
    verify: Callable[[str], Principal | None] = lambda token: None  # who a token names, if it still holds
    holds: Callable[[Principal], bool] = lambda principal: False  # a credential accepted before still holds
    issue: Callable[..., Credential] = dataclasses.field(  # (kind, name, coordinator): the coordinator's own, booked
        default=lambda kind, name, coordinator="": _no_gate(f"issuing a {kind} credential"))


def _no_gate(method: str) -> None:
    raise InternalError(f"{method}: this Front checks no credential (built without the coordinator's gate)")


class Engine(Protocol):
    @property
    def name(self) -> str: ...

    def event_lock(self) -> EventLock:
        """The coordinator's lock (called once, as the coordinator is built, before `serve` and `attach`)."""

    def serve(self, front: Front) -> None:
        """Before the coordinator's server starts: add the engine's own RPC services (or nothing)."""

    def attach(self, host: EngineHost) -> None:
        """Called once, when the coordinator starts: offer the nodes, start watching them."""

    def tick(self, now: float) -> None:
        """About each second, from the coordinator's watchdog loop: the engine's own watch (or nothing)."""

    def peer_addresses(self, job: Job, nodes: Sequence[str]) -> Mapping[str, str] | None:
        """Where the run's peers reach each of its nodes; None: at the address each node registered. Called
        under the coordinator's lock as each run is placed: no I/O."""

    @property
    def places_gangs(self) -> bool:
        """True: the job side hands each queued run over (`place`) instead of choosing its nodes."""

    def place(self, request: GangRequest) -> None:
        """Called (under the coordinator's lock: return at once) for each queued run, once, where the engine
        places gangs itself."""

    def demand(self, nodes: Mapping[int, int]) -> None:
        """Where it said nodes may be added (EngineHost.nodes_expected): after a scheduling round that changed
        it, how many more nodes of each size the queued jobs lack (size -> count; empty: none). Called under
        the coordinator's lock: return at once."""

    def close(self, timeout: float) -> None:
        """Stop everything it started, within `timeout` seconds (its workers get their grace)."""


class EngineBase:
    """What an engine need not write: a plain lock, no services, no watch, its nodes' own addresses."""

    def event_lock(self) -> EventLock:
        return PlainLock()

    def serve(self, front: Front) -> None:
        pass

    def tick(self, now: float) -> None:
        pass

    def peer_addresses(self, job: Job, nodes: Sequence[str]) -> Mapping[str, str] | None:
        return None

    places_gangs = False  # tfdist's own whole-node scheduler places its gangs

    def place(self, request: GangRequest) -> None:
        raise InternalError(f"{type(self).__name__} does not place gangs itself (places_gangs is False)")

    def demand(self, nodes: Mapping[int, int]) -> None:
        pass
