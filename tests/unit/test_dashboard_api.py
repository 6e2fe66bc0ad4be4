"""The dashboard's JSON: json_output's job and agent shapes with the page's keys beside them, node usage and
throughput shown when the coordinator has them, buttons only where the coordinator's access rules would
allow them, metric curves apart from tfdist's own records, refusals and silences as one-line errors, and
reads shared between tabs for a second."""

import grpc
import pytest

from cluster.client.dashboard import api as dashboard_api
from cluster.client.dashboard.api import Api, Rights, actions, can, thinned
from cluster.shared import jobspec
from cluster.shared.credentials import Principal
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.rpc import ClientError, JobList
from tests.specs import flat_spec

ALICE, BOB = Principal("user", "alice"), Principal("user", "bob")


def spec(**extra):
    return jobspec.to_pb(flat_spec(["python", "train.py"], 1, name="train", **extra))


class Coordinator:
    address = "10.0.0.1:7400"

    def __init__(self, jobs=(), agents=(), metrics=None, error=None):
        self._jobs, self._agents, self._metrics, self.error = list(jobs), list(agents), metrics, error
        self.calls = []

    def _answer(self, what, value):
        self.calls.append(what)
        if self.error is not None:
            raise self.error
        return value() if callable(value) else value

    def list_agents(self):
        return self._answer("ListAgents", self._agents)

    def jobs(self, states=(), limit=0, summary=False):
        found = [j for j in self._jobs if j.state in states]
        return self._answer("ListJobs", JobList(found[-limit:] if limit else found, len(found)))

    def job(self, job_id):
        return self._answer("GetJob", lambda: next(j for j in self._jobs if j.id.startswith(job_id)))

    def metrics(self, job_id):
        return self._answer("GetMetrics", self._metrics)

    def logs(self, job_id, after_seq=0, rank=-1, limit=1000):
        self.asked_logs = (job_id, after_seq, rank, limit)
        return self._answer("GetLogs", self._logs if hasattr(self, "_logs") else pb.GetLogsResponse())

    def cancel(self, job_id):
        return self._answer("CancelJob", "CANCELED")


@pytest.mark.parametrize("principal,owner,rights", [
    (ALICE, "alice", Rights(True, True, True)),
    (ALICE, "bob", Rights(False, False, False)),
    (Principal("admin", "root"), "bob", Rights(True, True, True)),
    (Principal("monitor", "prometheus"), "bob", Rights(False, False, True)),
    (Principal("node", "n1"), "n1", Rights(False, False, False)),
])
def test_rights_follow_the_coordinators_access_rules(principal, owner, rights):
    assert can(principal, owner) == rights


def test_buttons_by_state():
    mine = Rights(True, True, True)
    assert actions("QUEUED", mine) == ["preempt", "cancel"]
    assert actions("RUNNING", mine) == ["preempt", "cancel"]
    assert actions("PAUSED", mine) == ["resume", "cancel"]
    assert actions("SUCCEEDED", mine) == []
    assert actions("RUNNING", Rights(False, False, True)) == []


def test_jobs_are_tfdist_jobs_json_with_nodes_and_buttons():
    running = pb.Job(id="1-aa", spec=spec(), state="RUNNING", owner="alice", submitted_at=100.0)
    queued = pb.Job(id="2-bb", spec=spec(), state="QUEUED", owner="bob", submitted_at=101.0,
                    waiting_reason="waiting for 1 slot free on one node; job 1-aa (train) holds n1")
    done = pb.Job(id="3-cc", spec=spec(), state="SUCCEEDED", owner="alice", submitted_at=90.0, exit_code=0)
    agents = [pb.AgentInfo(name="n1", slots=1, state="ALIVE", jobs=["1-aa"])]
    answer = Api(Coordinator([running, queued, done], agents), ALICE).jobs()
    assert answer.status == 200
    shown = {j["id"]: j for j in answer.document["jobs"]}
    assert [j["id"] for j in answer.document["jobs"]] == ["1-aa", "2-bb", "3-cc"]  # by number, as `tfdist jobs`
    assert shown["1-aa"]["nodes"] == ["n1"] and shown["1-aa"]["actions"] == ["preempt", "cancel"]
    assert shown["2-bb"]["waiting_reason"].startswith("waiting for 1 slot") and shown["2-bb"]["actions"] == []
    assert shown["3-cc"]["exit_code"] == 0 and shown["3-cc"]["actions"] == []
    assert {"owner", "state", "distribution", "submitted_at", "restarts"} <= shown["1-aa"].keys()
    assert answer.document["left_out"] == 0 and answer.document["total"] == 3


def test_usage_and_throughput_are_shown_when_present():
    bare = pb.AgentInfo(name="c1", slots=2, state="ALIVE")
    gpu = pb.AgentInfo(name="g1", slots=2, state="ALIVE", gpu=True,
                       gpus=[pb.Gpu(index=0, uuid="GPU-0", name="H100"), pb.Gpu(index=1, uuid="GPU-1", name="H100")],
                       free_gpus=[1], usage=pb.NodeUsage(time=50.0, gpus=[
                           pb.GpuUsage(index=0, utilization=0.75, memory_used_bytes=2**30, memory_total_bytes=2**34)],
                           jobs=[pb.JobUsage(job_id="1-aa", cpu_seconds=12.5, rss_bytes=2**28, processes=2)]))
    agents = Api(Coordinator(agents=[bare, gpu]), ALICE).cluster().document["agents"]
    assert agents[0]["usage"] is None
    assert agents[1]["usage"] == {
        "time": 50.0, "gpus": [{"index": 0, "utilization": 0.75, "memory_used_bytes": 2**30,
                                "memory_total_bytes": 2**34}],
        "jobs": [{"job_id": "1-aa", "cpu_seconds": 12.5, "rss_bytes": 2**28, "processes": 2}]}
    assert [g["free"] for g in agents[1]["gpus"]] == [False, True]

    slow = pb.Job(id="1-aa", spec=spec(), state="RUNNING", owner="alice")
    fast = pb.Job(id="2-bb", spec=spec(), state="RUNNING", owner="alice",
                  throughput=pb.Throughput(steps_per_second=12.5, examples_per_second=400.0, time=99.0))
    api = Api(Coordinator([slow, fast]), ALICE)
    assert api.job("1-aa").document["throughput"] is None
    assert api.job("2-bb").document["throughput"] == {"steps_per_second": 12.5, "examples_per_second": 400.0,
                                                      "time": 99.0}


def test_metric_curves_and_checkpoint_records():
    history = pb.GetMetricsResponse(job_id="1-aa", metrics=[
        *(pb.Metric(rank=0, step=s, name="loss", value=1.0 / (s + 1), time=10.0 + s) for s in range(3)),
        pb.Metric(rank=1, step=2, name="loss", value=0.4),
        pb.Metric(rank=0, step=2, name="val_loss", value=float("nan")),
        pb.Metric(rank=0, step=2, name="tfdist.checkpoint", value=0, note="/ckpt/1-aa/ckpt-2", time=12.5),
        pb.Metric(rank=0, step=3, name="tfdist.preempted", value=0, time=13.0),
        pb.Metric(rank=0, step=3, name="tfdist.preemptible", value=0)])
    job = pb.Job(id="1-aa", spec=spec(), state="RUNNING", owner="alice")
    document = Api(Coordinator([job], metrics=history), ALICE).metrics("1").document
    assert document["curves"] == [
        {"name": "loss", "ranks": [{"rank": 0, "points": [[0, 1.0], [1, 0.5], [2, 1 / 3]]},
                                   {"rank": 1, "points": [[2, 0.4]]}]},
        {"name": "val_loss", "ranks": [{"rank": 0, "points": [[2, None]]}]}]
    assert document["checkpoints"] == [{"step": 2, "path": "/ckpt/1-aa/ckpt-2", "attempt": 0, "time": 12.5}]
    assert document["preempted"] == [{"step": 3, "attempt": 0, "time": 13.0}]


def test_long_curves_are_thinned_keeping_both_ends():
    points = [[i, float(i)] for i in range(10_001)]
    kept = thinned(points)
    assert len(kept) == dashboard_api.MAX_POINTS and kept[0] == [0, 0.0] and kept[-1] == [10_000, 10_000.0]
    assert thinned(points[:5]) == points[:5]


@pytest.mark.parametrize("code,status", [(grpc.StatusCode.UNAVAILABLE, 502), (grpc.StatusCode.DEADLINE_EXCEEDED, 504),
                                         (grpc.StatusCode.PERMISSION_DENIED, 403), (grpc.StatusCode.NOT_FOUND, 404),
                                         (grpc.StatusCode.INVALID_ARGUMENT, 400)])
def test_refusals_and_silences_are_one_line_errors(code, status):
    error = ClientError("the coordinator at 10.0.0.1:7400 did not answer in time", code)
    api = Api(Coordinator(error=error), ALICE)
    for answer in (api.jobs(), api.cluster(), api.job("1"), api.logs("1", 0, -1), api.metrics("1"),
                   api.act("1", "cancel")):
        assert answer.status == status and answer.document == {"error": str(error)}


def test_reads_are_shared_for_a_second_and_actions_refresh_them():
    now = [0.0]
    job = pb.Job(id="1-aa", spec=spec(), state="RUNNING", owner="alice")
    coordinator = Coordinator([job])
    api = Api(coordinator, ALICE, clock=lambda: now[0])
    for _ in range(5):  # five tabs polling
        api.jobs()
        api.job("1-aa")
    assert coordinator.calls.count("ListJobs") == 2 and coordinator.calls.count("GetJob") == 1  # active, finished
    assert coordinator.calls.count("ListAgents") == 1
    now[0] = 1.5
    api.job("1-aa")
    assert coordinator.calls.count("GetJob") == 2
    assert api.act("1-aa", "cancel").document == {"state": "CANCELED", "message": "job 1-aa: CANCELED"}
    api.job("1-aa")
    assert coordinator.calls.count("GetJob") == 3  # not the answer from before the cancel
    assert api.act("1-aa", "delete").status == 404


def test_tensorboard_beside_the_job(tmp_path):
    events = tmp_path / "tfdist-tensorboard" / "1-aa"
    job = pb.Job(id="1-aa", spec=spec(), state="RUNNING", owner="alice")
    job.spec.working_dir = str(tmp_path)
    theirs = pb.Job(id="2-bb", spec=spec(), state="RUNNING", owner="bob")
    api = Api(Coordinator([job, theirs]), ALICE)
    board = api.job("1-aa").document["tensorboard"]
    assert board["dir"] == str(events) and board["command"] == "tfdist tensorboard 1-aa"
    assert not board["visible"] and "no event files in" in board["problem"]
    events.mkdir(parents=True)
    board = api.job("1-aa").document["tensorboard"]
    assert board["visible"] and board["installed"] and board["problem"] is None
    assert board["url"] == "/tensorboard/1-aa/"  # served by the dashboard itself, behind its login
    theirs = api.job("2-bb").document["tensorboard"]
    assert "belongs to user bob" in theirs["problem"] and theirs["url"] is None
    refused = api.tensorboard("2-bb")
    assert refused.status == 403 and "only its owner or an admin may read its metrics" in refused.document["error"]


def test_log_lines_after_a_cursor_with_tensorflows_chatter_marked():
    coordinator = Coordinator()
    coordinator._logs = pb.GetLogsResponse(job_ended=True, lines=[
        pb.LogLine(seq=8, rank=0, stream="stderr", time=5.0,
                   text="I0000 00:00:1795560304.555409   28509 port.cc:153] oneDNN custom operations are on."),
        pb.LogLine(seq=9, rank=0, stream="stdout", time=5.5, text="\x1b[1mepoch 1\x1b[0m loss 0.3   "),
        pb.LogLine(seq=10, rank=-1, stream="stdout", time=6.0, text="tfdist: restarting (attempt 1)")])
    document = Api(coordinator, ALICE).logs("1-aa", 7, 0).document
    assert coordinator.asked_logs == ("1-aa", 7, 0, dashboard_api.LOG_PAGE)
    assert document == {"more": False, "job_ended": True, "lines": [
        {"seq": 8, "rank": 0, "stream": "stderr", "time": 5.0, "noise": True,
         "text": "I0000 00:00:1795560304.555409   28509 port.cc:153] oneDNN custom operations are on."},
        {"seq": 9, "rank": 0, "stream": "stdout", "time": 5.5, "text": "epoch 1 loss 0.3", "noise": False},
        {"seq": 10, "rank": None, "stream": "stdout", "time": 6.0, "text": "tfdist: restarting (attempt 1)",
         "noise": False}]}
