"""Issue 49, Measured 1, on the engine's lean tier: with --kueue-queue each run's pods are one Kueue pod group
(its labels and total count), and a gang whose pods Kueue's scheduling gate holds waits for the admission
instead of being torn down and placed again at each start bound (what Kueue's gating made of tfdist's gangs:
a loop every 120 s, without end). tests/kubernetes/test_kueue.py has it with a real Kueue."""

from __future__ import annotations

import time

import pytest

from cluster.coordinator.core import CoordinatorCore
from cluster.coordinator.store import SqliteStore
from cluster.coordinator.values import Settings
from cluster.shared.model import JobState
from tests.conftest import wait_for
from tests.unit.test_kubernetes_engine import MemoryApi, placed_gang, start


@pytest.fixture
def kueued(tmp_path):
    store = SqliteStore(str(tmp_path / "coordinator.sqlite"))
    # The job side's start-up watchdog at 1 s: a gang held longer than that must not fail for it.
    core = CoordinatorCore(store, Settings(port_range=(23000, 23999), startup_timeout=1.0), now=time.time())
    api = MemoryApi("ml")
    engine = start(core, api, start_timeout=0.5, kueue_queue="team-a")  # pods have 0.5 s to be bound
    yield core, engine, api
    engine.close(timeout=5)
    store.close()


def gate(api, *names, gates=("kueue.x-k8s.io/admission",)):
    """Kueue's webhook gates a pod (here after its creation; it does so as the pod is made)."""
    for name in names:
        with api.lock:
            pod = api.objects[("Pod", name)]
            pod["spec"]["schedulingGates"] = [{"name": g} for g in gates]
        api._tell("MODIFIED", pod)


def test_a_gang_kueue_holds_waits_for_its_admission_then_starts(kueued):
    core, engine, api = kueued
    job_id = placed_gang(core, api)
    pods = api.pod_names()
    for name in pods:
        meta = api.objects[("Pod", name)]["metadata"]
        assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
        assert meta["labels"]["kueue.x-k8s.io/pod-group-name"] == f"tfdist-{job_id}-a0"
        assert meta["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "2"
        assert meta["annotations"]["kueue.x-k8s.io/retriable-in-group"] == "false"  # a failed pod ends the group
    gate(api, *pods)
    rounds = engine.rounds
    wait_for(lambda: engine.rounds >= rounds + 4, "rounds past the 0.5 s start bound")
    assert api.pod_names() == pods and core.store.job(job_id).attempt == 0  # held, not torn down
    assert core.store.job(job_id).state == JobState.STARTING  # nor failed by the start-up watchdog
    assert "waiting for Kueue to admit the gang" in core.waiting[job_id], core.waiting[job_id]
    assert all(api.said(p)[-1] == "GangHeld" for p in pods), [api.said(p) for p in pods]
    held = next(e for e in api.events if e["reason"] == "GangHeld")
    assert "waiting for Kueue to admit the gang" in held["message"], held["message"]
    gate(api, *pods, gates=())  # admitted: Kueue lifts the gates, the scheduler binds them
    api.set_phase("Running", *pods)
    wait_for(lambda: all(g.ready for g in engine._gangs.values()), "the gang running", timeout=10)
    assert "Kueue" not in core.waiting.get(job_id, "")  # no longer held
    assert core.store.job(job_id).attempt == 0  # its pods' agents (none here) would start the workers now
