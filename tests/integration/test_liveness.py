"""Liveness at scale, in the small: agents prove they are alive with UDP beacons, not heartbeat calls
(cluster/shared/beacon.py). Real coordinator and agents on loopback (no TensorFlow): a node on beacons
stays alive with heartbeats far apart, gets new work through a poke at once, and is lost when its
beacons stop; agents on heartbeats alone (what an older agent does) work beside it; forged beacons from
another user keep no stopped node alive."""

import os
import re
import signal
import subprocess
import time

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.timeout(240)]
SLEEPER = os.path.join(REPO, "tests", "multihost", "sleeper.py")


def agent(cluster, name):
    return next(a for a in cluster.listed_agents() if a["name"] == name)


def loss_seconds(cluster, name):
    """Stops the agent's process (a node that hangs: its sockets stay open, nothing is sent) and returns how
    long the coordinator took to list it LOST."""
    stopped = time.monotonic()
    os.kill(cluster.agents[name].pid, signal.SIGSTOP)
    cluster.wait_for(lambda: agent(cluster, name)["state"] == "LOST", f"{name} to be lost", timeout=60)
    return time.monotonic() - stopped


def start_on_beacons(cluster, name):
    cluster.start_agent(name, "--slots", "1")
    cluster.wait_agents(name)
    cluster.wait_for(lambda: agent(cluster, name)["liveness"] == "beacons", f"{name}'s first beacon")


def run_one_slot_job(cluster):
    """With heartbeats minutes apart, only a poke starts it within the wait."""
    job_id = cluster.cli("launch", "--detach", "--slots", "1", "--", SLEEPER, "1").stdout.strip()
    cluster.wait_for(lambda: cluster.job(job_id)["state"] == "SUCCEEDED", f"job {job_id} to run on a poke")


def resume(cluster):
    for process in cluster.agents.values():
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)


def test_beacons_keep_a_node_alive_and_pokes_bring_its_work_between_heartbeats(local_cluster):
    # Heartbeats 120 s apart: only the beacons can keep the node alive past --lost-after (6 s), and only a
    # poke can start a job on it within the minute.
    cluster = local_cluster(["--heartbeat-interval", "120"])
    try:
        start_on_beacons(cluster, "n1")
        first = agent(cluster, "n1")["last_heartbeat"]
        cluster.wait_for(lambda: agent(cluster, "n1")["last_heartbeat"] > first + 3 * 6.0, "three lost_after periods")
        assert agent(cluster, "n1")["state"] == "ALIVE"
        assert "agent n1 lost" not in (cluster.tmp / "coordinator.log").read_text()

        run_one_slot_job(cluster)

        print(f"beacon node lost {loss_seconds(cluster, 'n1'):.1f} s after it stopped (--lost-after 6)")
    finally:
        resume(cluster)


def test_agents_on_beacons_and_on_heartbeats_share_a_cluster(local_cluster):
    cluster = local_cluster()
    try:
        cluster.start_agent("new", "--slots", "1")
        cluster.start_agent("old", "--slots", "1", "--no-beacons")  # on the wire, an agent from before beacons
        cluster.wait_agents("new", "old")
        cluster.wait_for(lambda: agent(cluster, "new")["liveness"] == "beacons", "new's first beacon")
        assert agent(cluster, "old")["liveness"] == "heartbeats"

        job_id = cluster.cli("launch", "--detach", "--slots", "2", "--", SLEEPER, "2").stdout.strip()
        cluster.wait_for(lambda: cluster.job(job_id)["state"] == "SUCCEEDED", f"job {job_id} across both nodes")
        assert {p["node"] for p in cluster.job(job_id)["placement"]} == {"new", "old"}

        old_lost = loss_seconds(cluster, "old")
        new_lost = loss_seconds(cluster, "new")
        print(f"lost after: heartbeat node {old_lost:.1f} s, beacon node {new_lost:.1f} s (--lost-after 6)")
    finally:
        resume(cluster)


FORGER = """
import os, socket, sys, time
from cluster.shared import beacon
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for counter in range(1, 100000):
    sock.sendto(beacon.encode(beacon.BEACON, sys.argv[2], counter, 1 << 40, os.urandom(32)),
                ("127.0.0.1", int(sys.argv[1])))
    time.sleep(0.05)
"""


def test_forged_beacons_from_another_user_keep_no_stopped_node_alive(local_cluster, tmp_path, other_user_python):
    assert os.geteuid() == 0, "acting as another user (setpriv) needs root, as make test runs"
    cluster = local_cluster()
    forger = None
    try:
        start_on_beacons(cluster, "n1")
        port = re.search(r"liveness beacons on UDP port (\d+)", (cluster.tmp / "coordinator.log").read_text()).group(1)
        forger = subprocess.Popen(other_user_python.argv("-c", FORGER, port, "n1"), env=other_user_python.env(),
                                  cwd="/", stderr=open(tmp_path / "forger.log", "w"))
        lost = loss_seconds(cluster, "n1")
        assert forger.poll() is None, (tmp_path / "forger.log").read_text()  # it sent all along
        print(f"n1 lost {lost:.1f} s after it stopped, forged beacons notwithstanding")
    finally:
        if forger is not None:
            forger.kill()
            forger.wait(timeout=10)
        resume(cluster)


def test_a_restarted_coordinator_keeps_nodes_on_beacons_alive(local_cluster):
    # Heartbeats 120 s apart: after the restart only beacons under the registration made before it can keep
    # the node alive past --lost-after, and keep it on beacons (not on 2 s heartbeats).
    cluster = local_cluster(["--heartbeat-interval", "120"])
    try:
        start_on_beacons(cluster, "n1")
        address = cluster.address
        cluster.coordinator.terminate()
        cluster.coordinator.wait(timeout=30)
        cluster.start_coordinator(address)
        cluster.wait_for(lambda: agent(cluster, "n1")["liveness"] == "beacons", "n1's beacons after the restart")
        restarted = agent(cluster, "n1")["last_heartbeat"]
        cluster.wait_for(lambda: agent(cluster, "n1")["last_heartbeat"] > restarted + 2 * 6.0, "two lost_after periods")
        assert agent(cluster, "n1")["state"] == "ALIVE"
        assert "agent n1 lost" not in (cluster.tmp / "coordinator.log").read_text()
        run_one_slot_job(cluster)
    finally:
        resume(cluster)
