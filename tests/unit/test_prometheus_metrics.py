"""The coordinator's and an agent's /metrics in Prometheus's own terms: `promtool check metrics` lints a
real scrape (names, units, `_total` counters), `promtool check config/rules` accept the files docs/prometheus
ships, and the endpoint asks for a token of a credential that may read (over real HTTPS on loopback)."""

import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from cluster.agent.metrics_endpoint import NodeCollector, exposition
from tests.agent_core import AgentsServer
from cluster.shared import jobspec
from cluster.shared.config import ExperimentConfig
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.rpc import Client
from cluster.shared.work import GpuUsage, JobUsage, NodeUsage

pytestmark = pytest.mark.timeout(120)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(REPO, "docs", "prometheus")
PROMTOOL = shutil.which("promtool")


def promtool(*args, stdin=None):
    assert PROMTOOL, "promtool is not installed: `make debian-packages` installs Debian's prometheus"
    return subprocess.run([PROMTOOL, *args], input=stdin, capture_output=True, text=True, timeout=60)


def get(url, token, ca):
    context = ssl.create_default_context(cadata=ca.decode() if isinstance(ca, bytes) else ca)
    context.check_hostname = False
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture(scope="module")
def coordinator():
    server = AgentsServer(":memory:", "127.0.0.1:0", http_listen="127.0.0.1:0").start()
    node = Client(server.address, server.issue("node", "g1"))
    node.call(node.agents.Register, pb.RegisterRequest(agent=pb.AgentInfo(
        name="g1", slots=2, gpus=[pb.Gpu(index=0, uuid="GPU-0"), pb.Gpu(index=1, uuid="GPU-1")],
        addresses=[pb.Address(ip="127.0.0.1", prefix_len=8)])))
    node.call(node.agents.Heartbeat, pb.HeartbeatRequest(agent="g1", usage=pb.NodeUsage(time=time.time(), gpus=[
        pb.GpuUsage(index=0, utilization=0.5, memory_used_bytes=1 << 30, memory_total_bytes=80 << 30)])))
    user = Client(server.address, server.issue("user", "alice"))
    user.submit(jobspec.to_pb(jobspec.job_spec(ExperimentConfig(entrypoint=("python", "-c", "pass"),
                                                                slots_per_trial=2), working_dir="/")), retry_for=0)
    yield server
    node.close()
    user.close()
    server.stop(grace=0)


def test_only_credentials_that_may_read_scrape_the_coordinator(coordinator):
    url, ca = coordinator.metrics_endpoint.url, coordinator.authority.ca_pem
    assert get(url, None, ca)[0] == 401
    assert get(url, "tfd1:monitor:prom:forged", ca)[0] == 401
    status, body = get(url, coordinator.issue("node", "g1").token, ca)
    assert status == 403 and "monitor credential" in body
    for kind in ("monitor", "user", "admin"):
        assert get(url, coordinator.issue(kind, "someone").token, ca)[0] == 200
    assert get(url.replace("/metrics", "/"), coordinator.issue("monitor", "m").token, ca)[0] == 404


def test_a_scrape_shows_the_cluster(coordinator):
    status, body = get(coordinator.metrics_endpoint.url, coordinator.issue("monitor", "m").token,
                       coordinator.authority.ca_pem)
    assert status == 200
    for line in ('tfdist_jobs{mode="mwms",state="STARTING"} 1.0', 'tfdist_agents{state="alive"} 1.0',
                 'tfdist_node_slots{node="g1",state="held"} 2.0', 'tfdist_node_gpus{node="g1",state="free"} 0.0',
                 'tfdist_gpu_utilization_ratio{gpu="0",node="g1"} 0.5', 'tfdist_jobs_submitted_total{mode="mwms"} 1.0',
                 'tfdist_job_submit_to_placed_seconds_count{mode="mwms"} 1.0', "tfdist_heartbeats_total 1.0"):
        assert line in body, body
    assert 'tfdist_rpc_duration_seconds_count{method="Register"} 1.0' in body


def test_promtool_accepts_the_coordinators_and_an_agents_metrics(coordinator):
    _, body = get(coordinator.metrics_endpoint.url, coordinator.issue("monitor", "m").token,
                  coordinator.authority.ca_pem)
    checked = promtool("check", "metrics", stdin=body)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    sample = NodeUsage(time.time(), (GpuUsage(0, 0.9, 1 << 30, 80 << 30),), (JobUsage("1-ab", 12.5, 1 << 28, 3),))
    agent = exposition(NodeCollector("g1", 1, (0,), lambda: sample, lambda: ["1-ab"], lambda: 0)).decode()
    assert 'tfdist_gpu_utilization_ratio{gpu="0",node="g1"} 0.9' in agent
    assert 'tfdist_job_worker_cpu_seconds_total{job_id="1-ab",node="g1"} 12.5' in agent
    checked = promtool("check", "metrics", stdin=agent)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_cpu_agent_has_no_gpu_series():
    sample = NodeUsage(time.time(), (), (JobUsage("1-ab", 1.0, 1 << 20, 1),))
    text = exposition(NodeCollector("c1", 2, (), lambda: sample, lambda: [], lambda: 0)).decode()
    assert "tfdist_gpu_" not in text and 'tfdist_job_worker_resident_bytes{job_id="1-ab",node="c1"}' in text


def test_the_shipped_prometheus_config_and_rules_are_valid(tmp_path):
    rules = promtool("check", "rules", os.path.join(DOCS, "rules.yml"))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    # The example's paths, pointed at files that exist here (promtool checks that they do).
    (tmp_path / "ca.pem").write_text("x")
    (tmp_path / "prometheus.token").write_text("x")
    with open(os.path.join(DOCS, "prometheus.yml")) as f:
        config = f.read().replace("/etc/prometheus/tfdist", str(tmp_path))
    (tmp_path / "prometheus.yml").write_text(config)
    shutil.copy(os.path.join(DOCS, "rules.yml"), tmp_path / "rules.yml")
    checked = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
