"""A full disk (issue 16, Measured 10: it answered INTERNAL with SQLite's text): a write the state dir has no
room for answers RESOURCE_EXHAUSTED naming the state dir, changes nothing, loses no acknowledged job, and
the coordinator goes on answering; once there is room again it takes jobs as before.

A real coordinator process keeps its state on a real 2 MiB tmpfs (tests/private_tmpfs.py)."""

import os
import signal
import subprocess
import sys

import grpc
import pytest

from cluster.coordinator.store import SqliteStore
from cluster.shared import jobspec
from cluster.shared.credentials import Authority
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.rpc import Client, ClientError
from tests.conftest import cli_env, stop_processes
from tests.private_tmpfs import PrivateTmpfs
from tfdist.errors import ResourceExhaustedError
from tests.specs import flat_spec


def spec(i):
    return jobspec.to_pb(flat_spec(["true"], 1, name=f"job{i}", environment={"BLOB": "v" * 60_000}))


class Namespace:
    """A mount namespace with a tmpfs at `mount`, and coordinators run inside it."""

    def __init__(self, tmp_path, marker):
        self.tmp, self.marker = tmp_path, marker
        self.disk = PrivateTmpfs(str(tmp_path / "disk"), "2m", marker)
        self.mount, self.seen = self.disk.mount, self.disk.seen
        self.state_dir = os.path.join(self.mount, "state")
        self.coordinator = None

    def start_coordinator(self) -> str:
        self.coordinator = subprocess.Popen(self.disk.inside(
            [sys.executable, "-m", "cluster.client.cli", "coordinator", "--listen", "127.0.0.1:0", "--state-dir",
             self.state_dir, "--credentials-dir", str(self.tmp / "credentials")]), env=cli_env(self.marker),
            stdout=subprocess.PIPE, text=True, stderr=open(self.tmp / "coordinator.log", "a"))
        banner = self.coordinator.stdout.readline()
        assert " listening on " in banner, (self.tmp / "coordinator.log").read_text()
        return banner.split(" listening on ")[1].split()[0]

    def close(self):
        stop_processes([self.coordinator])
        self.disk.close()


@pytest.fixture
def disk(tmp_path, marker):
    made = Namespace(tmp_path, marker)
    yield made
    made.close()


def test_a_full_disk_answers_resource_exhausted_and_loses_no_acknowledged_job(disk, tmp_path):
    address = disk.start_coordinator()
    ballast = disk.seen(os.path.join(disk.mount, "ballast"))
    with open(ballast, "wb") as f:
        f.write(b"\0" * (512 * 1024))  # room to free later
    authority = Authority.load(str(tmp_path / "credentials"))
    node = Client(address, authority.issue("node", "n1"))  # a node with room for one job; the rest queue
    node.call(node.agents.Register, pb.RegisterRequest(agent=pb.AgentInfo(
        name="n1", slots=1, addresses=[pb.Address(ip="127.0.0.1", prefix_len=8)])))
    node.close()
    client = Client(address, authority.issue("user", "me"))
    acknowledged, refusal = [], None
    for i in range(200):  # 60 KB each: 2 MiB holds far fewer
        try:
            acknowledged.append(client.submit(spec(i), retry_for=0))
        except ClientError as e:
            refusal = e
            break
    assert refusal is not None and len(acknowledged) >= 3, f"the disk never filled: {len(acknowledged)} jobs"
    assert refusal.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(refusal) == (f"the coordinator's disk is full (state dir {disk.state_dir}): free space; nothing "
                            "was changed")
    for _ in range(3):  # it goes on answering, and each write is refused the same way
        with pytest.raises(ClientError) as again:
            client.submit(spec(999), retry_for=0)
        assert again.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert sorted(j.id for j in client.jobs()) == sorted(acknowledged)

    disk.coordinator.send_signal(signal.SIGKILL)  # nothing in memory helps: the file alone has every job
    disk.coordinator.wait(timeout=30)
    client.close()
    os.unlink(ballast)
    client = Client(disk.start_coordinator(), authority.issue("user", "me"))
    assert sorted(j.id for j in client.jobs()) == sorted(acknowledged)
    assert client.job(acknowledged[0]).spec.config.name == "job0"
    assert client.submit(spec(1000), retry_for=0)  # room again: taken as before
    client.close()


def test_the_store_on_a_full_disk_raises_resource_exhausted_and_keeps_every_commit(disk):
    """The same in-process: the store's own error, whichever write of a transaction meets the full disk."""
    script = ("import json, sys\n"
              "from cluster.coordinator.store import SqliteStore\n"
              "from tests.specs import flat_spec\n"
              "from tfdist.errors import ResourceExhaustedError\n"
              "s = SqliteStore(sys.argv[1])\n"
              "done, said = [], ''\n"
              "for i in range(1, 200):\n"
              "    try:\n"
              "        s.insert_job(f'{i}-a', i, flat_spec(['x'], 1, environment={'B': 'b' * 60000}), 0.0, "
              "'submitted')\n"
              "        done.append(i)\n"
              "    except ResourceExhaustedError as e:\n"
              "        said = str(e)\n"
              "        break\n"
              "seen = [j.seq for j in s.jobs()]\n"
              "s.close()\n"
              "print(json.dumps({'done': done, 'said': said, 'seen': seen}))\n")
    path = os.path.join(disk.state_dir, "coordinator.sqlite")
    ran = subprocess.run(disk.disk.inside([sys.executable, "-c", script, path]), env=cli_env(disk.marker),
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    import json

    found = json.loads(ran.stdout)
    assert found["said"] == (f"the coordinator's disk is full (state dir {disk.state_dir}): free space; nothing was "
                             "changed")
    assert len(found["done"]) >= 3 and found["seen"] == found["done"]


def test_a_full_disk_is_recognised_from_sqlites_own_code(tmp_path):
    """SQLite's SQLITE_FULL however it comes (here: the file's page limit) is the same one error, and the
    store works on once there is room."""
    s = SqliteStore(str(tmp_path / "c.sqlite"))
    s._db.execute("PRAGMA max_page_count=" + str(s._db.execute("PRAGMA page_count").fetchone()[0] + 40))
    done = []
    with pytest.raises(ResourceExhaustedError, match="disk is full"):
        for i in range(1, 50):
            s.insert_job(f"{i}-a", i, flat_spec(["x"], 1, environment={"B": "b" * 60000}), 0.0, "s")
            done.append(i)
    assert done and [j.seq for j in s.jobs()] == done and not s._db.in_transaction
    s._db.execute("PRAGMA max_page_count=1073741823")
    s.insert_job("99-a", 99, flat_spec(["x"], 1), 0.0, "s")
    assert [j.seq for j in s.jobs()] == [*done, 99]
    s.close()
