"""The coordinator's entry point: what another side of the house may start and ask in-process.

`tfdist coordinator`, a local launch's embedded cluster and a Slurm batch script start a coordinator
through this module and nothing else of `cluster.coordinator` (tests/unit/test_layout.py checks it);
everything else they learn over gRPC, or, a local launch, through its in-process client. The gRPC server
is imported on first use (PEP 562): a local launch starts its coordinator without gRPC or TLS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cluster.coordinator.heap import freeze_after_full_collections
from cluster.coordinator.in_process import InProcessClient
from cluster.coordinator.process import STATE_FILE, CoordinatorProcess
from cluster.coordinator.values import Settings
from cluster.shared.model import AgentRecord, JobSpec, JobState

if TYPE_CHECKING:
    from cluster.coordinator.server import CoordinatorServer


def __getattr__(name: str):
    if name == "CoordinatorServer":
        from cluster.coordinator.server import CoordinatorServer

        return CoordinatorServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def alive_agents(server: CoordinatorServer) -> list[AgentRecord]:
    """The agents registered and heartbeating now."""
    from cluster.coordinator import views

    return [a.record for a in views.agents_view(server.core) if a.state == "ALIVE"]


def latest_paused_job(server: CoordinatorServer) -> str | None:
    """The newest PAUSED job's id (a requeued Slurm batch script resumes it), if any."""
    paused = server.core.store.jobs([JobState.PAUSED])
    return paused[-1].id if paused else None


__all__ = ["CoordinatorProcess", "CoordinatorServer", "InProcessClient", "STATE_FILE", "Settings", "alive_agents",
           "freeze_after_full_collections", "latest_paused_job"]


def stored_spec(state_dir: str, job_ref: str) -> JobSpec | None:
    """A job's spec as a stopped coordinator stored it in `state_dir`, its environment's values too (a local
    run's state: the user's own files, which no coordinator answer hands out); None if it holds no such job."""
    from cluster.coordinator.store.sqlite import SqliteStore

    store = SqliteStore(f"{state_dir}/{STATE_FILE}")
    try:
        job = store.job(job_ref) or (store.job_by_seq(int(job_ref)) if job_ref.isdigit() else None)
        return job.spec if job is not None else None
    finally:
        store.close()
