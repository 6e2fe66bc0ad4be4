"""Issue 49, Measured 5: every 5 s the coordinator listed every pod of every namespace and every node, and no
Kubernetes Event explained a torn-down gang. Now what the engine reads of the cluster is listed once and then
watched (watched.py: only what it keeps wakes it), and what it decides about a run's pods is said as Events on
them (pod_events.py). On the engine's lean tier (an API kept in memory); tests/kubernetes has the real one."""

from __future__ import annotations

import threading
import time

from hypothesis import given, strategies as st

from cluster.engines.kubernetes.api import ApiRefused
from cluster.engines.kubernetes.offers import node_offers, slim_node, slim_pod
from cluster.engines.kubernetes.watched import Watched
from cluster.shared.model import JobState
from tests.conftest import wait_for
from tests.unit import test_kubernetes_engine as lean
from tests.unit.test_kubernetes_engine import placed_gang
from tests.unit.test_kubernetes_offers import node, pod


kube = lean.kube  # the engine's fixture


def free(core) -> dict[str, int]:
    from cluster.coordinator.views import agents_view

    return {v.record.name: v.free_slots for v in agents_view(core)}


def test_the_cluster_is_listed_once_then_watched_and_offers_follow_each_change(kube):
    core, engine, api = kube
    wait_for(lambda: free(core) == {"g1": 8, "g2": 8}, "both nodes offered")
    api.change_node("g2", unschedulable=True)  # a cordon, seen through the node watch alone
    wait_for(lambda: free(core)["g2"] == 0, "the cordoned node offered no more")
    api.add_foreign(pod("g1", gpus=8, namespace="team-b") | {"metadata": {"name": "big", "namespace": "team-b"}})
    wait_for(lambda: free(core)["g1"] == 0, "the other workload's pod seen holding g1")
    api.change_node("g2", unschedulable=False)
    wait_for(lambda: free(core)["g2"] == 8, "the node offered again once uncordoned")
    rounds = engine.rounds
    wait_for(lambda: engine.rounds >= rounds + 3, "a few more of the engine's rounds")
    assert api.lists == {"pods": 1, "nodes": 1, "bound pods": 1}  # listed once each, never again


def test_only_what_the_engine_reads_wakes_it():
    woken = []
    watched = Watched("nodes", threading.Event(), lambda: woken.append(1), slim_node)
    first = node("g1", gpus=8)
    first["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-29T10:00:00Z"
    watched._listed([first])
    assert watched.version == 1 and len(woken) == 1
    beat = node("g1", gpus=8)
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-29T10:00:40Z"
    watched._seen("MODIFIED", beat)  # a node's heartbeat: nothing the offers read
    assert watched.version == 1 and len(woken) == 1
    watched._seen("MODIFIED", node("g1", gpus=8, cordoned=True))
    assert watched.version == 2 and watched.get("g1")["spec"]["unschedulable"]
    watched._seen("DELETED", node("g1", gpus=8, cordoned=True))
    assert watched.all() == [] and watched.version == 3
    watched._listed([])  # a listing again after an error, the same as kept: no wake
    assert watched.version == 3 and len(woken) == 3


def test_a_pod_that_holds_nothing_is_not_kept():
    assert slim_pod(pod("", gpus=8)) is None  # not bound
    assert slim_pod(pod("g1", gpus=8, phase="Succeeded")) is None
    kept = slim_pod(pod("g1", gpus=8) | {"status": {"phase": "Running", "podIP": "10.0.0.9", "conditions": []}})
    assert kept == slim_pod(pod("g1", gpus=8))  # its status beyond its phase is not kept


_quantities = st.sampled_from(["1", "2", "8", "500m", "1Gi", "3"])


@st.composite
def _pods(draw):
    made = pod(draw(st.sampled_from(["a", "b", "c", ""])), gpus=draw(st.integers(0, 8)),
               cpu=draw(st.none() | _quantities), phase=draw(st.sampled_from(["Running", "Pending", "Succeeded",
                                                                               "Failed"])),
               tfdist=draw(st.booleans()), init_gpus=draw(st.integers(0, 8)),
               namespace=draw(st.sampled_from(["", "ml", "other"])), memory=draw(st.none() | _quantities))
    made["metadata"]["labels"]["other"] = "x"
    return made


@st.composite
def _nodes(draw):
    return [node(name, gpus=draw(st.sampled_from([0, 0, 4, 8])), cpu=draw(st.sampled_from(["4", "8", "7500m"])),
                 ready=draw(st.sampled_from(["True", "False"])), cordoned=draw(st.booleans()),
                 taints=draw(st.sampled_from([(), ({"key": "nvidia.com/gpu", "effect": "NoSchedule"},),
                                              ({"key": "dedicated", "value": "x", "effect": "NoExecute"},)])),
                 labels=draw(st.sampled_from([{}, {"node-role.kubernetes.io/control-plane": ""}])))
            for name in ("a", "b", "c")]


@given(_nodes(), st.lists(_pods(), max_size=12), st.sampled_from(["auto", "gpu", "cpu"]))
def test_what_is_kept_of_nodes_and_pods_offers_what_they_would(nodes, pods, kind):
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    kept = [p for p in map(slim_pod, pods) if p is not None]
    assert node_offers(list(map(slim_node, nodes)), kept, tolerations=tolerations, namespace="ml", kind=kind) == \
        node_offers(nodes, pods, tolerations=tolerations, namespace="ml", kind=kind)


def test_each_run_s_pods_say_where_they_were_placed_and_why_they_were_torn_down(kube):
    core, engine, api = kube
    job_id = placed_gang(core, api)
    pods = api.pod_names()
    wait_for(lambda: all(api.said(p) == ["GangPlaced"] for p in pods), "an Event on each pod: placed")
    placed = [e for e in api.events if e["reason"] == "GangPlaced"]
    assert {e["involvedObject"]["uid"] for e in placed} == {api.objects[("Pod", p)]["metadata"]["uid"] for p in pods}
    assert "placed together on whole nodes g1, g2 by tfdist" in placed[0]["message"] and placed[0]["type"] == "Normal"
    api.set_phase("Running", *pods)
    core.cancel(job_id, now=time.time())
    wait_for(lambda: not api.pod_names(), "the canceled job's pods deleted", timeout=40)
    assert all(api.said(p) == ["GangPlaced", "GangTornDown"] for p in pods), api.events
    torn = next(e for e in api.events if e["reason"] == "GangTornDown")
    assert "the job is CANCELED" in torn["message"], torn["message"]


def test_a_gang_that_cannot_start_says_so_on_its_pods_as_a_warning(kube):
    core, engine, api = kube
    job_id = placed_gang(core, api)
    bad = api.pod_names()[0]
    api.set_phase("Pending", bad, containerStatuses=[{"name": "tfdist-worker", "state": {
        "waiting": {"reason": "InvalidImageName", "message": "tfdist:1:: is no name"}}}])
    wait_for(lambda: core.store.job(job_id).state == JobState.FAILED, "the job to fail", timeout=10)
    failed = [e for e in api.events if e["reason"] == "GangFailed"]
    assert len(failed) == 2 and all(e["type"] == "Warning" for e in failed)
    assert "InvalidImageName: tfdist:1:: is no name" in failed[0]["message"]
    assert api.said(bad) == ["GangPlaced", "GangFailed", "GangTornDown"]


def test_events_the_api_refuses_change_nothing_of_the_job(kube, monkeypatch, caplog):
    core, engine, api = kube
    create = api.create

    def refuse_events(obj, dry_run=False):
        if obj["kind"] == "Event":
            raise ApiRefused("create Event", 403, "events is forbidden")
        return create(obj, dry_run)

    monkeypatch.setattr(api, "create", refuse_events)
    job_id = placed_gang(core, api)
    api.set_phase("Running", *api.pod_names())
    wait_for(lambda: core.store.job(job_id).state == JobState.RUNNING or engine._gangs and
             all(g.ready for g in engine._gangs.values()), "the gang running")
    assert core.store.job(job_id).state != JobState.FAILED and not api.events
    assert sum("no Events on tfdist's pods" in r.message for r in caplog.records) == 1


def test_a_bound_placeholder_holds_its_node_until_it_is_deleted():
    """A placeholder an earlier coordinator left (or one not deleted yet) takes the node's GPUs for the
    scheduler: the offers must not count the node free under it (a review's finding)."""
    held = pod("a", gpus=8, namespace="ml", tfdist=True)
    held["metadata"]["labels"]["tfdist.io/placeholder"] = "true"
    assert node_offers([node("a", gpus=8)], [slim_pod(held)], namespace="ml")[0].taken == 8
    assert node_offers([node("a", gpus=8)], [slim_pod(pod("a", gpus=8, namespace="ml", tfdist=True))],
                       namespace="ml")[0].taken == 0  # a job's own pod: its allocation, not another workload
