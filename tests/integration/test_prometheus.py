"""A real Prometheus (Debian's) scrapes a real coordinator and two agents over HTTPS with a monitor
credential's token while a real TensorFlow job trains; its HTTP API then shows the series moved: the job
counted, a latency histogram observed, the stand-in nvidia-smi's GPU utilisation from the GPU node, the
job's workers' memory from the agents, its steps/s and latest loss. The endpoints refuse a missing token
(401) and a node's token (403), and say nothing to a client that does not trust the cluster's CA."""

import json
import os
import shutil
import socket
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.conftest import FAKES, REPO, stop_processes, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
WORKER = os.path.join(REPO, "tests", "integration", "workers", "observed_fit.py")
PROMETHEUS = shutil.which("prometheus")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def private(path, data):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(data)
    return str(path)


def scrape(url, token=None, ca=None):
    """(status, body) of a GET of `url`, verifying the server against `ca` (PEM text)."""
    context = ssl.create_default_context(cadata=ca)
    context.check_hostname = False  # the CA is what is checked; the coordinator's name is tfdist-coordinator
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def query(port, promql):
    """The samples of an instant query: [(labels, value)]."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    return [(r["metric"], float(r["value"][1])) for r in answer["data"]["result"]]


def test_prometheus_scrapes_the_coordinator_and_agents_during_a_real_job(tmp_path, local_cluster):
    from cluster.shared.credentials import Authority

    assert PROMETHEUS, "Debian's prometheus is not installed: `make debian-packages` (make test runs it) installs it"

    cluster = local_cluster()
    banner = cluster.coordinator.stdout.readline()  # "tfdist: Prometheus metrics on https://127.0.0.1:P/metrics ..."
    assert "Prometheus metrics on https://" in banner, banner
    coordinator_url = banner.split(" on ")[1].split()[0]
    authority = Authority.load(os.path.join(cluster.state_dir, "credentials"))
    monitor, node = authority.issue("monitor", "prometheus"), authority.issue("node", "g1")
    ca = authority.ca_pem.decode()

    gpu_port, cpu_port = free_port(), free_port()
    cluster.start_agent("g1", "--metrics-listen", f"127.0.0.1:{gpu_port}",
                        env={"PATH": FAKES + os.pathsep + os.environ["PATH"], "TFDIST_FAKE_GPUS": "2",
                             "TFDIST_FAKE_GPU_UTIL": "37"})
    cluster.start_agent("c1", "--slots", "1", "--metrics-listen", f"127.0.0.1:{cpu_port}")
    cluster.wait_agents("g1", "c1")
    agents = {a["name"]: a for a in cluster.json("agents")["agents"]}
    assert agents["g1"]["metrics_address"] == f"127.0.0.1:{gpu_port}", agents["g1"]

    # Who may scrape: a monitor token, verified TLS; no token 401, a node's token 403; untrusted TLS fails.
    for url in (coordinator_url, f"https://127.0.0.1:{gpu_port}/metrics"):
        assert scrape(url, None, ca)[0] == 401
        assert scrape(url, node.token, ca)[0] == 403
        wait_for(lambda: scrape(url, monitor.token, ca)[0] == 200, f"{url} to answer a monitor token")
        with pytest.raises(urllib.error.URLError):
            scrape(url, monitor.token, Authority.create().ca_pem.decode())
    assert scrape(coordinator_url, "tfd1:monitor:prometheus:forged", ca)[0] == 401

    token_file = private(tmp_path / "prometheus.token", monitor.token)
    ca_file = private(tmp_path / "ca.pem", ca)
    tls = {"ca_file": ca_file}
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {"job_name": "tfdist-coordinator", "scheme": "https",
             "tls_config": {**tls, "server_name": "tfdist-coordinator"},
             "authorization": {"credentials_file": token_file},
             "static_configs": [{"targets": [coordinator_url.split("//")[1].split("/")[0]]}]},
            {"job_name": "tfdist-agents", "scheme": "https", "tls_config": tls,
             "authorization": {"credentials_file": token_file},
             "static_configs": [{"targets": [f"127.0.0.1:{gpu_port}", f"127.0.0.1:{cpu_port}"]}]},
        ]}
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))  # YAML is a superset of JSON
    web = free_port()
    prometheus = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{web}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "w"), start_new_session=True)
    job = None
    try:
        def ready():
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{web}/-/ready", timeout=2).status == 200
            except OSError:
                return False
        wait_for(ready, "Prometheus to start", logs=lambda: {"prometheus": (tmp_path / "prometheus.log").read_text()})

        (tmp_path / "observed.yaml").write_text("hyperparameters: {global_batch_size: 16}\n")
        job = cluster.cli("launch", "--detach", "--slots", "1", "--config", str(tmp_path / "observed.yaml"), "--",
                          WORKER).stdout.strip()
        cluster.wait_for(lambda: cluster.job(job)["state"] == "RUNNING", f"job {job} to run", timeout=90)

        def moved():
            up = query(web, "up")
            return (len(up) == 3 and all(v == 1 for _, v in up)
                    and query(web, 'tfdist_jobs{state="RUNNING",mode="mwms"}') == [
                        ({"__name__": "tfdist_jobs", "state": "RUNNING", "mode": "mwms",
                          "instance": coordinator_url.split("//")[1].split("/")[0], "job": "tfdist-coordinator"}, 1.0)]
                    and query(web, "tfdist_job_submit_to_placed_seconds_count") != []
                    and any(v > 0 for _, v in query(web, "tfdist_job_submit_to_placed_seconds_count"))
                    and any(v > 0 for _, v in query(web, 'tfdist_job_worker_resident_bytes{job="tfdist-agents"}'))
                    and any(v > 0 for _, v in query(web, "tfdist_job_steps_per_second"))
                    and query(web, 'tfdist_job_metric{name="loss"}') != [])
        cluster.wait_for(moved, "Prometheus to see the job, its latency, its workers, its steps/s and its loss",
                         timeout=120)
        gpus = query(web, 'tfdist_gpu_utilization_ratio{job="tfdist-agents"}')
        assert sorted((m["node"], m["gpu"], v) for m, v in gpus) == [("g1", "0", 0.37), ("g1", "1", 0.37)]
        assert query(web, 'tfdist_gpu_utilization_ratio{node="c1"}') == []  # a CPU node has no GPU series
        steps = query(web, "tfdist_job_steps_per_second")[0][1]
        examples = query(web, "tfdist_job_examples_per_second")[0][1]
        assert 0 < steps < 100 and examples == pytest.approx(16 * steps, rel=0.5)
        assert any(v > 0 for _, v in query(web, 'tfdist_rpc_duration_seconds_count{method="Heartbeat"}'))
        assert [v for _, v in query(web, "tfdist_agents_on_beacons")] == [2]  # both nodes beacon
    finally:
        if job:
            cluster.cli("cancel", job)
        stop_processes([prometheus])
