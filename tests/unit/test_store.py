"""One contract, run against the SQLite store in a file and in memory."""

import pytest

from cluster.store import Store


@pytest.fixture(params=["file", "memory"])
def store(request, tmp_path):
    s = Store(str(tmp_path / "state" / "c.sqlite") if request.param == "file" else ":memory:")
    yield s
    s.close()


def test_job_roundtrip_and_events(store):
    store.insert_job("1-ab", 1, {"slots": 2, "entrypoint": ["x"]}, 0, 2, 10.0, "submitted")
    store.update_job("1-ab", 11.0, "placed", state="STARTING")
    job = store.job("1-ab")
    assert job["state"] == "STARTING" and job["spec"] == {"slots": 2, "entrypoint": ["x"]} and job["seq"] == 1
    assert [e["message"] for e in store.events("1-ab")] == ["submitted", "placed"]
    assert store.next_job_seq() == 2
    assert [j["id"] for j in store.jobs(["STARTING"])] == ["1-ab"] and store.jobs(["QUEUED"]) == []


def test_allocations_exits_logs(store):
    store.insert_job("j", 1, {}, 0, 2, 0.0, "s")
    store.set_allocations("j", [{"agent": "a", "node_rank": 0, "slots": 2, "address": "h", "ports": [1, 2],
                                 "state": "PREPARING"}])
    store.set_allocation_state("j", "a", "READY")
    assert store.allocations("j") == [{"job_id": "j", "agent": "a", "node_rank": 0, "slots": 2, "address": "h",
                                       "ports": [1, 2], "state": "READY"}]
    assert store.record_exit("j", 0, "a", 0, ["bye"], 1.0) is True
    assert store.record_exit("j", 0, "a", 0, ["bye"], 1.0) is False  # a retried report counts once
    store.append_logs("j", [(0, "stdout", "one", 1.0), (1, "stderr", "two", 1.1)])
    store.append_logs("j", [(0, "stdout", "three", 1.2)])
    assert [(l["seq"], l["text"]) for l in store.logs("j")] == [(1, "one"), (2, "two"), (3, "three")]
    assert [l["text"] for l in store.logs("j", after_seq=1, rank=0)] == ["three"]


def test_survives_reopen(tmp_path):
    path = str(tmp_path / "c.sqlite")
    s = Store(path)
    s.insert_job("j", 1, {"a": 1}, 0, 1, 0.0, "s")
    s.upsert_agent("n1", 4, False, [{"ip": "1.2.3.4", "prefix_len": 24}], 0.0)
    s.append_logs("j", [(0, "stdout", "x", 0.0)])
    s.close()
    s = Store(path)
    assert s.job("j")["spec"] == {"a": 1} and s.agents()[0]["name"] == "n1"
    s.append_logs("j", [(0, "stdout", "y", 0.0)])
    assert [l["seq"] for l in s.logs("j")] == [1, 2]


def test_metrics_and_latest(store):
    store.append_metrics("j", [(0, 1, "loss", 0.9, 1.0), (0, 1, "acc", 0.5, 1.0), (1, 2, "loss", 0.7, 2.0)])
    store.append_metrics("j", [(0, 2, "loss", 0.6, 2.1)])
    assert [(m["step"], m["value"]) for m in store.metrics("j", "loss")] == [(1, 0.9), (2, 0.7), (2, 0.6)]
    latest = {m["name"]: (m["rank"], m["step"], m["value"]) for m in store.latest_metrics("j")}
    assert latest == {"acc": (0, 1, 0.5), "loss": (0, 2, 0.6)}
    assert store.latest_metrics("other") == []
