"""The seam between a job's life (the coordinator's state machine, scheduler and store) and where its
processes run: an `Engine`. The job logic never imports an engine; an engine never decides a job's fate, it
offers nodes and reports what happens on them.

    Engine        name; attach(host): offer its nodes and start watching; close(timeout): stop what it
                  started (every run's workers, its threads), within the bound
    EngineHost    what an engine may tell the coordinator (the core implements it): its nodes (`offer`),
                  a node's state and the work derived for it (`report` -> Work: ports to lease, runs to start
                  or stop, a preemption to carry), a worker's exit, output lines and metric rows; and a way to
                  hear that a node's work changed (`on_work_changed`)

Engines, one package each under cluster/engines/ and one line in its ENGINES registry (mypy holds each to
this protocol: tests/unit/test_engines.py): `agents` (remote agents over gRPC: their work travels with
heartbeats and the AgentService, cluster/coordinator/agent_service.py; Slurm runs agents through srun) and
`local` (this machine's processes, no agent: what `tfdist launch` uses). docs/development.md has a skeleton.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Protocol

from cluster.shared.model import AgentRecord, LogLine, MetricRow, WorkerExit
from cluster.shared.work import AgentReport, Work


class EngineHost(Protocol):
    def offer(self, record: AgentRecord, now: float) -> None:
        """A node of the engine's, with its slots and GPUs. The engine answers for its liveness: it is never
        declared lost for silence (an agent's node is: it registers, and heartbeats or beacons)."""

    def report(self, report: AgentReport, now: float) -> Work | None:
        """What a node runs and holds now; returns its work (None: offer the node again)."""

    def report_exit(self, agent: str, job_id: str, exit_: WorkerExit, now: float) -> None: ...

    def push_logs(self, agent: str, job_id: str, lines: list[LogLine], source: str = "", first_seq: int = 0) -> None: ...

    def push_metrics(self, agent: str, job_id: str, rows: list[MetricRow], source: str = "",
                     first_seq: int = 0) -> None: ...

    def on_work_changed(self, listener: Callable[[Iterable[str]], None]) -> None:
        """`listener(nodes)` after each event that changed those nodes' work (outside the coordinator's lock)."""


class Engine(Protocol):
    @property
    def name(self) -> str: ...

    def attach(self, host: EngineHost) -> None:
        """Called once, when the coordinator starts: offer the nodes, start watching them."""

    def close(self, timeout: float) -> None:
        """Stop everything it started, within `timeout` seconds (its workers get their grace)."""


@dataclasses.dataclass(frozen=True)
class EngineOptions:
    """What `tfdist coordinator --engine NAME` and a local launch know to build an engine with."""
    slots: int = 1  # the local engine's: worker processes on this machine
