"""Issue 49, Measured 2: only Ready nodes that existed were offered and tfdist left no pending pod, so a job
that would fit once a scale-from-zero pool grew was refused at submit. Now a pool the coordinator is told may
grow (--pool-max-nodes, --pool-node-slots) keeps such a job queued with a reason naming the autoscaler, and
keeps one pending placeholder pod per missing node (what a cluster autoscaler answers); the nodes that appear
are offered and the job placed there, its placeholders gone. The engine on its lean tier (an API kept in
memory; tests/kubernetes/test_autoscaled_pool.py has the real one), and the pure parts as tables."""

from __future__ import annotations

import argparse
import time

import pytest

from cluster.coordinator import growth
from cluster.coordinator.core import CoordinatorCore
from cluster.coordinator.engine import NodesExpected
from cluster.coordinator.scheduler import PendingJob
from cluster.coordinator.store import SqliteStore
from cluster.coordinator.values import BadRequest, Settings
from cluster.engines.kubernetes.options import options_from
from cluster.shared.model import JobState
from tests.conftest import wait_for
from tests.unit.test_kubernetes_engine import MemoryApi, start, submit

PLACEHOLDER = "tfdist.io/placeholder"


@pytest.fixture
def pool(tmp_path):
    """An engine whose pool (label pool=gpu) has no node yet and may grow to 3 nodes of 8 GPUs."""
    store = SqliteStore(str(tmp_path / "coordinator.sqlite"))
    core = CoordinatorCore(store, Settings(port_range=(23000, 23999)), now=time.time())
    api = MemoryApi("ml", nodes=())
    engine = start(core, api, node_selector="pool=gpu", pool_max_nodes=3, pool_node_slots=8)
    yield core, engine, api
    engine.close(timeout=5)
    store.close()


def placeholders(api) -> list[dict]:
    with api.lock:
        return [o for (kind, _), o in api.objects.items() if kind == "Pod" and o["metadata"]["labels"].get(PLACEHOLDER)]


def made(api) -> int:
    """How many placeholder pods were ever created."""
    return sum(name.startswith("Pod/tfdist-placeholder-") for name in api.created)


def test_a_job_that_fits_once_the_pool_grew_waits_asks_for_nodes_and_runs_on_them(pool):
    core, engine, api = pool
    job_id = submit(core, slots=16)  # two whole nodes of 8: the pool has none yet
    assert core.store.job(job_id).state == JobState.QUEUED
    why = core.waiting[job_id]
    assert "the autoscaler of pool pool=gpu (--pool-max-nodes 3) may add up to 3 nodes of 8 slots" in why, why
    assert "it starts once they are added and Ready" in why, why
    wait_for(lambda: len(placeholders(api)) == 2, "a pending placeholder per missing node", timeout=10)
    pod = placeholders(api)[0]
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu"} and not pod["spec"].get("nodeName")
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False
    api.add_node("gpu-1", {"pool": "gpu"})  # the autoscaler's first node; the scheduler binds a placeholder
    api.add_node("gpu-2", {"pool": "gpu"})
    wait_for(lambda: not placeholders(api), "the bound placeholders deleted, none pending", timeout=10)
    wait_for(lambda: sum(not n.startswith("tfdist-placeholder") for n in api.pod_names()) == 2, "the job's pods",
             timeout=10)
    assert sorted(a.agent for a in core.store.job(job_id).placement) == ["gpu-1", "gpu-2"]
    rounds = engine.rounds
    wait_for(lambda: engine.rounds >= rounds + 3, "more of the engine's rounds")
    assert not placeholders(api) and made(api) == 2  # one per node that came, none made again


def test_an_idle_node_of_the_pool_is_used_and_never_taken_by_a_placeholder(pool):
    """A review's finding: a placeholder that only named the pool was bound to its idle node at once, deleted
    as 'found its node', made again, bound again: the autoscaler never saw a pending pod."""
    core, engine, api = pool
    api.add_node("gpu-0", {"pool": "gpu"})
    wait_for(lambda: "gpu-0" in core.agents, "the pool's first node offered", timeout=10)
    job_id = submit(core, slots=16)
    wait_for(lambda: len(placeholders(api)) == 1, "one placeholder: the idle node is the job's", timeout=10)
    terms = placeholders(api)[0]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-0"]}]}]
    api.add_node("gpu-1", {"pool": "gpu"})
    wait_for(lambda: sorted(a.agent for a in core.store.job(job_id).placement) == ["gpu-0", "gpu-1"],
             "the job on the idle node and the new one", timeout=10)
    wait_for(lambda: not placeholders(api), "no placeholder left", timeout=10)
    assert made(api) == 1


def test_a_node_still_booting_is_still_to_come_and_a_placeholder_left_behind_is_deleted(tmp_path):
    store = SqliteStore(str(tmp_path / "coordinator.sqlite"))
    core = CoordinatorCore(store, Settings(port_range=(23000, 23999)), now=time.time())
    api = MemoryApi("ml", nodes=("booting",))
    api.nodes_["booting"]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    api.create({"kind": "Pod", "metadata": {"name": "tfdist-placeholder-old", "labels": {PLACEHOLDER: "true"}},
                "spec": {}})  # an earlier coordinator's
    engine = start(core, api, node_selector="pool=gpu", pool_max_nodes=2, pool_node_slots=8)
    try:
        assert not placeholders(api)
        job_id = submit(core, slots=16)  # the booting node and one more: both still to come
        assert "may add up to 2 nodes of 8 slots" in core.waiting[job_id], core.waiting[job_id]
    finally:
        engine.close(timeout=5)
        store.close()


def test_placeholders_follow_the_queue_and_go_when_it_needs_no_node(pool):
    core, engine, api = pool
    first, second = submit(core, slots=8), submit(core, slots=16)
    wait_for(lambda: len(placeholders(api)) == 3, "one placeholder per missing node, at most the pool's room",
             timeout=10)
    core.cancel(second, now=time.time())
    wait_for(lambda: len(placeholders(api)) == 1, "the canceled job's placeholders deleted", timeout=10)
    core.cancel(first, now=time.time())
    wait_for(lambda: not placeholders(api), "no placeholder once nothing waits", timeout=10)


def test_a_job_larger_than_the_pool_can_ever_grow_is_refused_at_submit(pool):
    core, engine, api = pool
    with pytest.raises(BadRequest, match="slots_per_trial=32 can never be scheduled on this cluster .3 nodes of 8"):
        submit(core, slots=32)


@pytest.mark.parametrize("queued, idle, lack", [
    ([PendingJob("a", 16)], {}, {8: 2}),  # two whole nodes, none idle
    ([PendingJob("a", 16)], {8: 1}, {8: 1}),  # one idle node taken first
    ([PendingJob("a", 4), PendingJob("b", 8)], {8: 1}, {8: 1}),  # one node each; the idle one is a's
    ([PendingJob("a", 12)], {}, {}),  # 12 is no sum of whole 8s: the pool cannot hold it
    ([PendingJob("a", 80)], {}, {8: 3}),  # at most the pool's room
    ([PendingJob("a", 8, nodes=("n1",))], {}, {}),  # pinned to named nodes: no new node serves it
    ([], {}, {}),
])
def test_the_nodes_the_queue_lacks(queued, idle, lack):
    assert growth.missing_nodes(queued, idle, [NodesExpected(8, 3, "the autoscaler")]) == lack


def test_expected_nodes_count_for_admission_only_while_there_is_room():
    assert growth.with_expected({8: 1}, [NodesExpected(8, 2, "x"), NodesExpected(4, 0, "y")]) == {8: 3}


@pytest.mark.parametrize("flags, message", [
    ({"pool_max_nodes": 4}, "--pool-max-nodes needs --pool-node-slots too"),
    ({"pool_node_slots": 8, "node_selector": "pool=gpu"}, "--pool-node-slots needs --pool-max-nodes too"),
    ({"pool_max_nodes": 4, "pool_node_slots": 8}, "--pool-max-nodes needs --node-selector LABEL=VALUE"),
])
def test_an_autoscaled_pool_is_named_whole_or_refused_in_one_line(flags, message):
    from tfdist.errors import UserError

    args = argparse.Namespace(namespace="ml", kubeconfig=None, advertise=None, image=None, pod_start_timeout=1.0,
                              image_pull_timeout=1.0, node_selector=None, tolerate=None, node_kind="auto",
                              offer_system_nodes=False, job_service_account="tfdist-job", pod_qos="burstable",
                              allow_secret=None, pool_max_nodes=None, pool_node_slots=None)
    for key, value in flags.items():
        setattr(args, key, value)
    with pytest.raises(UserError, match=message):
        options_from(args)


def test_a_placeholder_the_api_refuses_is_asked_for_again_after_a_pause_not_each_round(pool, caplog):
    """A review's finding: a placeholder the API refused for good (an invalid spec, a quota) was made again at
    every round, each second, and said again each time."""
    from cluster.engines.kubernetes.api import ApiRefused

    core, engine, api = pool
    api.refuse = ApiRefused("create Pod", 403, "exceeded quota: gpus")
    submit(core, slots=16)
    wait_for(lambda: api.refused >= 1, "a placeholder refused", timeout=10)
    rounds = engine.rounds
    wait_for(lambda: engine.rounds >= rounds + 4, "more of the engine's rounds")
    assert api.refused == 1  # not again before the pause is over
    said = [r.message for r in caplog.records if "placeholder pods" in r.message]
    assert len(said) == 1 and "exceeded quota: gpus" in said[0] and "tried again every 30s" in said[0], said


@pytest.mark.parametrize("queue", ["Team A", "-a"])
def test_a_kueue_queue_that_is_no_name_is_refused_in_one_line(queue):
    from cluster.engines.kubernetes.options import kueue_queue
    from tfdist.errors import UserError

    with pytest.raises(UserError, match="is not a LocalQueue's name"):
        kueue_queue(queue)
