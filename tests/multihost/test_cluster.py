"""A real cluster on three hosts (network namespaces): coordinator, two agents, real gRPC and TF."""

import json
import os
import re
import select
import signal
import subprocess
import time

import numpy as np
import pytest

from tests.conftest import cli_env

pytestmark = [pytest.mark.multihost, pytest.mark.timeout(300)]
HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(os.path.dirname(HERE), "integration", "workers", "train_worker.py")
SLEEPER = os.path.join(HERE, "sleeper.py")
CRASHER = os.path.join(HERE, "crasher.py")


def _job(cluster, job_id):
    return cluster.json("job", job_id)


def test_two_node_mwms_training_has_identical_weights(make_cluster, tmp_path):
    cluster = make_cluster(slots_per_agent=1)
    out = tmp_path / "out"
    out.mkdir()
    result = cluster.cli("launch", "--slots", "2", "--", WORKER, "--mode", "fit", "--out", str(out), timeout=240)
    assert result.returncode == 0, result.stderr[-3000:] + str(cluster.logs())
    weights = [list(np.load(out / f"rank{r}.npz").values()) for r in range(2)]
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)
    infos = [json.load(open(out / f"rank{r}.json")) for r in range(2)]
    assert infos[0]["losses"][-1] < infos[0]["losses"][0] and infos[1]["replicas"] == 2
    job = cluster.json("jobs")["jobs"][0]
    placement = _job(cluster, job["id"])["placement"]
    assert sorted((p["node"], p["address"]) for p in placement) == [("a1", "198.18.0.2"), ("a2", "198.18.0.3")]
    assert "[rank=1] rank 1 done" in result.stdout


def test_small_jobs_pack_and_a_job_waits_for_capacity(make_cluster):
    cluster = make_cluster(slots_per_agent=2)
    first = cluster.cli("launch", "--detach", "--slots", "1", "--", SLEEPER, "600").stdout.strip()
    second = cluster.cli("launch", "--detach", "--slots", "1", "--", SLEEPER, "600").stdout.strip()
    cluster.wait_for(lambda: {_job(cluster, j)["state"] for j in (first, second)} == {"RUNNING"}, "both running")
    nodes = {_job(cluster, j)["placement"][0]["node"] for j in (first, second)}
    assert len(nodes) == 1  # best fit: both on one node

    big = cluster.cli("launch", "--detach", "--slots", "4", "--", SLEEPER, "1").stdout.strip()
    job = _job(cluster, big)
    assert job["state"] == "QUEUED"
    assert job["waiting_reason"].startswith("waiting for whole idle nodes totalling 4 slots; idle now: a")
    shown = cluster.cli("job", big)
    assert "waiting:   waiting for whole idle nodes totalling 4 slots" in shown.stdout
    for small in (first, second):  # capacity frees up: the queued job starts on its own
        assert cluster.cli("cancel", small).returncode == 0
    cluster.wait_for(lambda: _job(cluster, big)["state"] == "SUCCEEDED", "the queued job to run", timeout=90)


def test_infeasible_job_is_refused_at_submit(make_cluster):
    cluster = make_cluster(slots_per_agent=2)
    result = cluster.cli("launch", "--slots", "3", "--", SLEEPER, "1")
    assert result.returncode == 125  # tfdist refused: nothing ran
    assert result.stderr == (
        "tfdist: error: slots_per_trial=3 can never be scheduled on this cluster (2 nodes of 2 slots): a job larger "
        "than one node takes whole nodes, so its slots must be a sum of whole nodes. Sizes that fit: 1-2, 4. "
        "Nearest: 2 or 4.\n")
    assert cluster.json("jobs")["jobs"] == []


def test_agent_killed_mid_job_fails_the_job_and_stops_the_other_node(make_cluster):
    cluster = make_cluster(slots_per_agent=2)
    job_id = cluster.cli("launch", "--detach", "--slots", "4", "--", SLEEPER, "120").stdout.strip()
    cluster.wait_for(lambda: _job(cluster, job_id)["state"] == "RUNNING", "the job to run")
    cluster.kill("a2")
    cluster.wait_for(lambda: _job(cluster, job_id)["state"] == "FAILED", "the job to fail", timeout=30)
    job = _job(cluster, job_id)
    assert job["outcome"] == "node a2 was lost (no heartbeat for 4s); the other nodes' workers were stopped" or \
        job["outcome"].startswith("node a2 was lost")
    agents = {a["name"]: a for a in cluster.json("agents")["agents"]}
    assert agents["a2"]["state"] == "LOST"
    cluster.wait_for(lambda: agents_free(cluster, "a1"), "a1's workers to be stopped")
    logs = cluster.cli("logs", job_id)
    assert "[rank=0] rank 0 tick 0" in logs.stdout


def agents_free(cluster, name):
    a = {a["name"]: a for a in cluster.json("agents")["agents"]}[name]
    return a["free_slots"] == a["slots"] and not a.get("jobs")


def test_coordinator_kill9_and_restart_mid_job(make_cluster, hosts, marker):
    cluster = make_cluster(slots_per_agent=2)
    job_id = cluster.cli("launch", "--detach", "--slots", "4", "--", SLEEPER, "16").stdout.strip()
    cluster.wait_for(lambda: _job(cluster, job_id)["state"] == "RUNNING", "the job to run")
    # A user following the job from another host must ride out the restart.
    follower = subprocess.Popen(hosts["a1"].command(["logs", job_id, "-f", "--coordinator", cluster.address,
                                                     "--credentials", cluster.user_credential]),
                                env=cli_env(marker), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Killed once the follower follows (its first line printed), not while it starts: its first call, the job's
    # lookup, fails at once on an unreachable coordinator, as any command does (seen under load after a 1 s sleep).
    ready, _, _ = select.select([follower.stdout], [], [], 60)
    assert ready and follower.stdout.readline(), "the follower printed nothing in 60 s"
    cluster.kill("c", signal.SIGKILL)
    time.sleep(2)  # workers go on; agents buffer output and retry
    cluster.start_coordinator()
    cluster.wait_for(lambda: _job(cluster, job_id)["state"] == "SUCCEEDED", "the job to finish", timeout=90)
    job = _job(cluster, job_id)
    assert job["slots"] == 4 and len(job["placement"]) == 2
    out, err = follower.communicate(timeout=60)
    assert follower.returncode == 0, err
    assert "lost the coordinator" in err and "reconnected to the coordinator" in err
    assert "[rank=3] rank 3 tick 15" in out
    logs = cluster.cli("logs", job_id).stdout
    for rank in range(4):
        assert f"[rank={rank}] rank {rank} tick 15" in logs  # nothing lost across the restart
    assert cluster.json("agents")["agents"][0]["state"] == "ALIVE"


def test_credentials_are_required_and_checked_across_hosts(make_cluster, hosts, marker, tmp_path):
    """From another host: no credential, a forged one, another cluster's, and a node's credential used as
    a user's are all refused with one line; nothing is logged with a token in it."""
    cluster = make_cluster(slots_per_agent=1)
    empty_runtime = str(tmp_path / "empty-runtime")  # another host: this user's local coordinators are not there
    bare = hosts["a1"].run(["jobs", "--coordinator", cluster.address], marker, 60, TFDIST_RUNTIME_DIR=empty_runtime)
    assert bare.returncode == 2 and bare.stderr.count("\n") == 1  # a missing flag: the user's to give
    assert bare.stderr.startswith(f"tfdist: error: no credential for the coordinator at {cluster.address}: pass "
                                  "--credentials FILE")
    forged = json.loads(open(cluster.user_credential).read())
    forged["token"] = forged["token"][:-4] + ("AAAA" if not forged["token"].endswith("AAAA") else "BBBB")
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    other = hosts["a1"].run(["credentials", str(tmp_path / "other-cluster"), "--user", "tester", "-o",
                             str(tmp_path / "other.json")], marker, 60)
    assert other.returncode == 0, other.stderr
    for credential, expected in ((tmp_path / "forged.json", "missing or wrong credential"),
                                 (tmp_path / "other.json", "did not prove it is the coordinator your credential trusts"),
                                 (cluster.credential("node", "a1"), "ListJobs needs a user, admin or monitor credential")):
        result = hosts["a1"].run(["jobs", "--coordinator", cluster.address, "--credentials", str(credential)], marker,
                                 60, TFDIST_RUNTIME_DIR=empty_runtime)
        assert result.returncode == 1 and result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
    tokens = [json.loads(open(cluster.credential(k, n)).read())["token"] for k, n in
              (("node", "a1"), ("node", "a2"), ("user", "tester"))]
    assert all(t.split(":")[-1] not in p.read_text() for p in tmp_path.glob("*.log") for t in tokens)  # never logged


def test_a_dying_worker_stops_its_gang_on_every_node(make_cluster):
    cluster = make_cluster(slots_per_agent=2)
    result = cluster.cli("launch", "--slots", "4", "--", CRASHER, "3", timeout=120)
    assert result.returncode == 5
    assert "failed: rank 3 on node" in result.stderr and "exited with code 5; the other workers were stopped" \
        in result.stderr
    assert "  rank 3 giving up" in result.stderr
    cluster.wait_for(lambda: agents_free(cluster, "a1") and agents_free(cluster, "a2"), "every node to be freed")


def test_a_blocked_link_fails_the_job_before_tensorflow_starts(make_cluster, hosts):
    cluster = make_cluster(slots_per_agent=2)
    # a1's packets to a2 now go to a MAC address nobody has: silently dropped, like a firewall's DROP.
    subprocess.run(["ip", "-n", hosts["a1"].ns, "neigh", "replace", hosts["a2"].ip, "lladdr", "02:00:00:00:00:99",
                    "dev", "eth0", "nud", "permanent"], check=True, timeout=30)
    result = cluster.cli("launch", "--slots", "4", "--", SLEEPER, "600", timeout=120)
    assert result.returncode == 1, result.stderr
    assert re.search(r"failed: node (a1 cannot reach node a2 at 198\.18\.0\.3|a2 cannot reach node a1 at "
                     r"198\.18\.0\.2):2950\d: no answer within 3s \(packets dropped: a firewall\?\) \(and 1 more\)\. "
                     r"Nothing was started\.", result.stderr), result.stderr
    assert "[rank=" not in result.stdout  # no worker ran anywhere
    cluster.wait_for(lambda: agents_free(cluster, "a1") and agents_free(cluster, "a2"), "every node to be freed")


HOROVOD_FIT = os.path.join(os.path.dirname(HERE), "integration", "workers", "horovod_fit.py")
PS_FIT = os.path.join(os.path.dirname(HERE), "integration", "workers", "ps_fit.py")


def test_horovod_across_two_hosts_with_the_rendezvous_served_by_tfdist(make_cluster):
    cluster = make_cluster(slots_per_agent=1)
    result = cluster.cli("launch", "--slots", "2", "--distribution", "horovod", "--", HOROVOD_FIT, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:] + str(cluster.logs())
    digests = set(re.findall(r"\[rank=\d\] rank=\d size=2 per_worker=12 .* weights=(\w+)", result.stdout))
    assert len(digests) == 1, result.stdout
    job = cluster.json("jobs")["jobs"][0]
    assert sorted(p["node"] for p in _job(cluster, job["id"])["placement"]) == ["a1", "a2"]


def test_parameter_servers_across_two_hosts(make_cluster):
    cluster = make_cluster(slots_per_agent=1)
    result = cluster.cli("launch", "--slots", "2", "--distribution", "ps", "--", PS_FIT, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:] + str(cluster.logs())
    assert ("[rank=0] keras=tf_keras strategy=ParameterServerStrategyV2 iterations=40 expected=40 loss_fell=True"
            in result.stdout)


COLLECTIVES = os.path.join(os.path.dirname(HERE), "integration", "workers", "collectives.py")


def test_collectives_and_cluster_info_across_two_hosts(make_cluster):
    cluster = make_cluster(slots_per_agent=2)
    result = cluster.cli("launch", "--slots", "4", "--", COLLECTIVES, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:] + str(cluster.logs())
    got = {r["rank"]: r for r in (json.loads(m) for m in re.findall(r"RESULT (\{.*\})", result.stdout))}
    assert sorted(got) == [0, 1, 2, 3]
    for r in got.values():
        assert r["everyone"] == [{"rank": i, "node": i // 2} for i in range(4)]
        assert r["nodes"] == [["198.18.0.2", [0, 1]], ["198.18.0.3", [2, 3]]]
    assert got[0]["on_chief"] == [0, 1, 4, 9] and got[3]["on_chief"] is None
