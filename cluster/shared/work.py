"""What the coordinator asks of an agent, as typed values both sides share: the answer to a heartbeat
(ports to check, peers to probe, workers to start, jobs to stop). The agent converts the wire into these
at its edge, the coordinator builds them; neither works on protobuf messages."""

from __future__ import annotations

import dataclasses

from cluster.shared.modes.base import ProcessPlan

PROBE_TIMEOUT = 3.0  # seconds a node waits for each peer's port to accept a connection


@dataclasses.dataclass(frozen=True)
class ProbeTask:
    job_id: str
    targets: tuple[tuple[str, str, int], ...]  # (peer agent, address, port)
    timeout: float


@dataclasses.dataclass(frozen=True)
class StartTask:
    job_id: str
    working_dir: str
    command: tuple[str, ...]
    processes: tuple[ProcessPlan, ...]
    failure_grace: float
    store_port: int = 0  # >0: this node serves the job's key-value store on it
    attempt: int = 0  # which run of the job (an agent starts each run once)


@dataclasses.dataclass
class Work:
    """What one heartbeat answers an agent."""

    check_ports: list[tuple[str, tuple[int, ...]]] = dataclasses.field(default_factory=list)
    probes: list[ProbeTask] = dataclasses.field(default_factory=list)
    start: list[StartTask] = dataclasses.field(default_factory=list)
    stop_jobs: list[str] = dataclasses.field(default_factory=list)
    stop_grace: dict[str, float] = dataclasses.field(default_factory=dict)
    dump_stacks: list[str] = dataclasses.field(default_factory=list)
    preempt: list[str] = dataclasses.field(default_factory=list)  # jobs whose store must carry a preemption request
    attempts: dict[str, int] = dataclasses.field(default_factory=dict)  # job -> its current run, for port checks
