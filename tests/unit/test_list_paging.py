"""No size cliffs (issue 16, Measured 8): ListJobs pages (capped in count and bytes, newest first, a summary
for tables), the client walks the pages, `tfdist jobs` shows active jobs and the newest finished ones by
default, and `tfdist logs ID` prints every line. A real coordinator over real gRPC + TLS, jobs made through
the store API in a real SQLite file."""

import argparse
import json
import time

import grpc
import pytest

from cluster.client import job_commands
from cluster.client.usage import UsageError
from cluster.coordinator import views
from cluster.coordinator.server import MAX_MESSAGE_BYTES
from tests.agent_core import AgentsServer
from cluster.coordinator.store import SqliteStore
from cluster.shared.model import JobState, LogLine, WorkerExit
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.rpc import Client, ClientError
from tests.conftest import LocalCluster
from tests.specs import flat_spec


def spec(**fields):
    return flat_spec(**{"entrypoint": ["x"], "slots": 1, **fields})


def fill(store, n, state=JobState.SUCCEEDED, first=1, **fields):
    """Jobs that ended a day ago, one second apart (within the default retention of 30 days)."""
    base = time.time() - 86400
    with store.transaction():
        for seq in range(first, first + n):
            store.insert_job(f"{seq}-a", seq, spec(name=f"job{seq}", **fields), base + seq, "submitted")
            if state != JobState.QUEUED:
                store.update_job(f"{seq}-a", base + seq, "ended", state=state, ended_at=base + seq)


@pytest.fixture
def server(tmp_path):
    s = AgentsServer(str(tmp_path / "state"), "127.0.0.1:0").start()
    yield s
    s.stop(grace=0)


@pytest.fixture
def client(server):
    c = Client(server.address, server.issue("admin", "me"))
    yield c
    c.close()


def numbers(jobs):
    return [int(j.id.split("-")[0]) for j in jobs]


def test_list_jobs_pages_newest_first_and_the_client_walks_every_page(server, client):
    fill(server.store, 1234)
    first = client.call(client.coordinator.ListJobs, pb.ListJobsRequest())
    assert len(first.jobs) == views.PAGE_JOBS and first.total == 1234 and numbers(first.jobs)[:2] == [1234, 1233]
    asked_for_more = client.call(client.coordinator.ListJobs, pb.ListJobsRequest(page_size=100_000,
                                                                                 page_token=first.next_page_token))
    assert numbers(asked_for_more.jobs) == list(range(734, 234, -1))  # capped, and continuing below the first
    small = client.call(client.coordinator.ListJobs, pb.ListJobsRequest(page_size=7))
    assert numbers(small.jobs) == list(range(1234, 1227, -1)) and small.next_page_token
    every = client.jobs()
    assert numbers(every) == list(range(1, 1235)) and every.total == 1234  # oldest first, as before paging
    newest = client.jobs(limit=3)
    assert numbers(newest) == [1232, 1233, 1234] and newest.total == 1234


def test_a_page_stops_short_of_the_message_limit_and_the_rest_follows(server, client):
    """Jobs of 60 KiB each: 150 of them are past gRPC's 8 MiB message limit; one answer used to fail for good."""
    fill(server.store, 150, entrypoint=["train.py", "--notes", "n" * 60_000])
    page = client.call(client.coordinator.ListJobs, pb.ListJobsRequest())
    assert 0 < len(page.jobs) < 150 and page.ByteSize() < MAX_MESSAGE_BYTES and page.next_page_token
    assert numbers(client.jobs()) == list(range(1, 151))


def test_states_filter_and_a_summary_leaves_out_what_a_table_does_not_show(server, client):
    fill(server.store, 3)
    fill(server.store, 2, JobState.QUEUED, first=4)
    server.store.record_exit("1-a", WorkerExit(0, "a1", 3, ("boom",), 2.0))
    queued = client.jobs(["QUEUED"], summary=True)
    assert numbers(queued) == [4, 5] and queued.total == 2 and queued[0].waiting_reason is not None
    full = {j.id: j for j in client.jobs(["SUCCEEDED", "FAILED"])}
    summary = {j.id: j for j in client.jobs(["SUCCEEDED"], summary=True)}
    assert [e.last_lines for e in full["1-a"].exits] == [["boom"]] and list(summary["1-a"].exits) == []
    assert summary["1-a"].spec.config.name == "job1" and summary["1-a"].state == "SUCCEEDED"


@pytest.mark.parametrize("request_, said", [
    (pb.ListJobsRequest(page_token="abc"), "page_token 'abc' is not one this coordinator gave"),
    (pb.ListJobsRequest(page_token="9" * 40), "page_token"),
    (pb.ListJobsRequest(page_token="-5"), "page_token '-5' is not one this coordinator gave"),
    (pb.ListJobsRequest(states=["QUEUED", "EXPLODED"]), "'EXPLODED'"),
])
def test_a_bad_page_token_or_state_is_invalid_argument(client, request_, said):
    with pytest.raises(ClientError) as err:
        client.call(client.coordinator.ListJobs, request_)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and said in str(err.value)


def args(**given):
    return argparse.Namespace(**{"json": False, "all": False, "state": None, "limit": None, **given})


def test_tfdist_jobs_selects_active_jobs_and_the_newest_finished_ones(server, client, capsys):
    fill(server.store, 25)
    fill(server.store, 2, JobState.QUEUED, first=26)
    fill(server.store, 3, JobState.FAILED, first=28)
    shown = lambda: [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]  # noqa: E731
    assert job_commands._jobs(client, args()) == 0
    out = capsys.readouterr()
    # 26 and 27 are active; of the 28 finished (1-25, 28-30), the newest 20 are 9-25 and 28-30.
    assert [line.split()[0] for line in out.out.splitlines()[1:]] == [f"{i}-a" for i in range(9, 31)]
    assert out.err == ("tfdist: 8 older finished jobs not shown; --all lists every job, --limit N the newest N, "
                       "--state STATE those in a state\n")
    job_commands._jobs(client, args(all=True))
    assert shown() == [f"{i}-a" for i in range(1, 31)]
    job_commands._jobs(client, args(state=["queued"]))
    assert shown() == ["26-a", "27-a"]
    job_commands._jobs(client, args(state="FAILED,QUEUED", limit=3))
    assert shown() == ["28-a", "29-a", "30-a"]
    job_commands._jobs(client, args(limit=2, json=True))
    out = capsys.readouterr()
    listed = json.loads(out.out)
    assert ([j["id"] for j in listed["jobs"]], listed["total"], listed["left_out"], out.err) == \
        (["29-a", "30-a"], 30, 28, "")  # --json says what it left out in the document
    with pytest.raises(UsageError, match="unknown --state EXPLODED; expected one of QUEUED"):
        job_commands._jobs(client, args(state=["EXPLODED"]))
    with pytest.raises(UsageError, match="--limit must be at least 1, got 0"):
        job_commands._jobs(client, args(limit=0))


# ---------------------------------------------------------------- the real CLI against a real coordinator
def populated(tmp_path, make):
    state_dir = tmp_path / "state"
    store = SqliteStore(str(state_dir / "coordinator.sqlite"))
    make(store)
    store.close()
    return str(state_dir)


def test_tfdist_jobs_lists_jobs_with_64_kib_environments(tmp_path, marker):
    """Measured 8: `tfdist jobs` failed for good after 130 jobs with a 64 KiB environment value each."""
    def make(store):
        fill(store, 200, environment={"BLOB": "v" * 65536})
        assert len(store.job("1-a").spec.config.environment_variables["BLOB"]) == 65536

    state_dir = populated(tmp_path, make)
    cluster = LocalCluster(tmp_path, marker, state_dir=state_dir)
    try:
        listed = cluster.cli("jobs")
        assert listed.returncode == 0, listed.stderr
        assert len(listed.stdout.splitlines()) == 1 + 20 and "180 older finished jobs not shown" in listed.stderr
        every = cluster.cli("jobs", "--json", timeout=180)
        assert every.returncode == 0, every.stderr
        assert len(json.loads(every.stdout)["jobs"]) == 20  # the same selection as the table, in full
    finally:
        cluster.close()


def test_tfdist_logs_prints_every_line(tmp_path, marker):
    """Measured 8: `tfdist logs ID` without -f printed the first 1,000 lines and exited 0."""
    def make(store):
        fill(store, 1, JobState.QUEUED)
        for batch in range(5):
            store.append_logs("1-a", [LogLine(0, "stdout", f"line {batch * 700 + i}", 1.0) for i in range(700)])

    cluster = LocalCluster(tmp_path, marker, state_dir=populated(tmp_path, make))
    try:
        printed = cluster.cli("logs", "1")
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout.splitlines() == [f"[rank=0] line {i}" for i in range(3500)]
    finally:
        cluster.close()


def test_a_job_listing_never_waits_for_the_coordinators_lock(server, client):
    """Listing reads through its own connection: a held coordinator lock (a long event) does not block it."""
    fill(server.store, 10)
    with server.core.lock:
        assert numbers(client.jobs(summary=True)) == list(range(1, 11))


def test_the_coordinators_retention_flags_prune_old_finished_jobs(tmp_path, marker):
    """--keep-finished-jobs N: the coordinator keeps the newest N finished jobs (and every active one)."""
    def make(store):
        fill(store, 30)
        fill(store, 2, state=JobState.QUEUED, first=31)

    cluster = LocalCluster(tmp_path, marker, ["--keep-finished-jobs", "5"], state_dir=populated(tmp_path, make))
    try:
        cluster.wait_for(lambda: [j["id"] for j in cluster.json("jobs", "--all")["jobs"]] ==
                         [f"{i}-a" for i in range(26, 33)], "the coordinator to prune to the newest 5 finished jobs")
    finally:
        cluster.close()
