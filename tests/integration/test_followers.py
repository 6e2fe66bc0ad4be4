"""Log followers never starve the cluster: 64 long-polling followers over real gRPC while an agent
heartbeats and users submit, and a follower answered while the coordinator's lock is held."""

import threading
import time

import pytest

from cluster.shared.rpc import Client
from cluster.coordinator.server import FOLLOWER_THREADS, RPC_THREADS
from tests.agent_core import AgentsServer
from cluster.shared import jobspec
from cluster.shared.config import ExperimentConfig
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

pytestmark = [pytest.mark.timeout(180)]


@pytest.fixture
def server(tmp_path):
    s = AgentsServer(str(tmp_path), "127.0.0.1:0").start()
    yield s
    s.stop(grace=0)


def register(server, name):
    node = Client(server.address, server.issue("node", name))
    node.call(node.agents.Register, pb.RegisterRequest(agent=pb.AgentInfo(
        name=name, slots=4, addresses=[pb.Address(ip="127.0.0.1", prefix_len=8)])))
    return node


def submit(client, slots=1):
    config = ExperimentConfig(entrypoint=("python", "x.py"), slots_per_trial=slots)
    return client.submit(jobspec.to_pb(jobspec.job_spec(config, working_dir="/")), retry_for=0)


def test_64_followers_leave_heartbeats_and_submissions_alone(server):
    assert FOLLOWER_THREADS >= 64 > RPC_THREADS  # without a budget of their own, 64 followers take every thread
    setup = Client(server.address, server.issue("admin", "test"))
    register(server, "n1").close()
    job_id = submit(setup)  # placed; the scripted agent below never starts it, so followers wait
    stop = threading.Event()
    polls, errors = [], []

    def follow():
        client = Client(server.address, server.issue("admin", "test"), timeout=15)
        while not stop.is_set():
            try:
                polls.append(len(client.logs(job_id, wait=10).lines))
            except Exception as e:  # noqa: BLE001 - collected and asserted below
                errors.append(e)
                return
        client.close()

    followers = [threading.Thread(target=follow, daemon=True) for _ in range(64)]
    for t in followers:
        t.start()
    time.sleep(1.0)  # every follower is now inside a long poll
    # A heartbeat queued behind followers would wait for a 10 s long poll to end: 5 s tells them apart.
    agent = Client(server.address, server.issue("node", "n1"), timeout=5.0)
    latencies = []
    for i in range(40):
        t0 = time.monotonic()
        response = agent.call(agent.agents.Heartbeat, pb.HeartbeatRequest(agent="n1"))
        latencies.append(time.monotonic() - t0)
        assert not response.reregister
    submitted = [submit(setup) for _ in range(3)]
    stop.set()
    for t in followers:
        t.join(timeout=30)
    assert not errors and len(submitted) == 3
    assert all(n == 0 for n in polls)
    latencies.sort()
    print(f"heartbeat latency with 64 followers: p50 {latencies[20] * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms")
    agent.close()
    setup.close()


def test_a_follower_is_answered_while_the_coordinator_lock_is_held(server):
    client = Client(server.address, server.issue("admin", "test"), timeout=5.0)
    register(server, "n1").close()
    job_id = submit(client)
    held, release = threading.Event(), threading.Event()

    def hold():
        with server.core.lock:
            held.set()
            release.wait(30)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    held.wait(10)
    try:
        response = client.logs(job_id, wait=0.2)  # would block until `release` if it took the lock
        assert list(response.lines) == [] and not response.job_ended
        assert client.logs(job_id.split("-")[0]).job_ended is False  # job numbers resolve without it too
    finally:
        release.set()
        t.join(timeout=10)
    client.close()
