"""The coordinator's half of issue 19 over real gRPC + TLS and its real /metrics: agents' usage kept and
listed, their /metrics certificates (only their own names), CheckScrapeToken, the exposition (linted by
promtool), job throughput, and what a scrape costs with 1,000 agents."""

import datetime
import http.client
import ipaddress
import shutil
import ssl
import subprocess
import time

import grpc
import pytest

from cluster.coordinator import metrics
from cluster.coordinator.metrics import Throughput
from tests.agent_core import AgentsServer
from cluster.shared import jobspec
from cluster.shared.config import ExperimentConfig
from cluster.shared.credentials import Authority
from cluster.shared.metrics_http import certificate_request
from cluster.shared.model import Address, AgentRecord, Gpu
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.rpc import Client, ClientError
from cluster.shared.work import AgentReport, GpuUsage, JobUsage, NodeUsage

pytestmark = pytest.mark.timeout(120)


def gpu_usage(count=2, util=0.37):
    return pb.NodeUsage(time=time.time(), gpus=[pb.GpuUsage(index=i, utilization=util, memory_used_bytes=1 << 30,
                                                            memory_total_bytes=80 << 30) for i in range(count)])


@pytest.fixture(scope="module")
def cluster():
    server = AgentsServer(":memory:", "127.0.0.1:0", http_listen="127.0.0.1:0").start()
    node = Client(server.address, server.issue("node", "g1"))
    key_pem, csr = certificate_request("g1")
    registered = node.call(node.agents.Register, pb.RegisterRequest(
        agent=pb.AgentInfo(name="g1", slots=2, addresses=[pb.Address(ip="127.0.0.1", prefix_len=8)],
                           gpus=[pb.Gpu(index=i, uuid=f"GPU-{i}", name="H100") for i in range(2)],
                           metrics_address="127.0.0.1:7481"),
        metrics_csr=csr))
    node.call(node.agents.Heartbeat, pb.HeartbeatRequest(agent="g1", usage=gpu_usage()))
    user = Client(server.address, server.issue("user", "alice"))
    config = ExperimentConfig(entrypoint=("python", "-c", "pass"), slots_per_trial=1,
                              hyperparameters={"global_batch_size": 64})
    job_id = user.submit(jobspec.to_pb(jobspec.job_spec(config, working_dir="/")), retry_for=0)
    yield server, node, user, registered, key_pem, job_id
    node.close()
    user.close()
    server.stop(grace=0)


def scrape(server, token) -> tuple[int, str]:
    context = ssl.create_default_context(cadata=server.authority.ca_pem.decode())
    connection = http.client.HTTPSConnection("127.0.0.1", server.metrics_endpoint.port, context=context, timeout=10)
    try:
        connection.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"} if token else {})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def series(text: str, name: str) -> dict[str, float]:
    """{labels: value} of one metric in an exposition."""
    found = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            head, value = line.rsplit(" ", 1)
            found[head[len(name):]] = float(value)
    return found


def test_the_agents_usage_and_metrics_address_are_listed(cluster):
    server, _, user, *_ = cluster
    agent = user.call(user.coordinator.ListAgents, pb.ListAgentsRequest()).agents[0]
    assert agent.metrics_address == "127.0.0.1:7481"
    assert [g.utilization for g in agent.usage.gpus] == pytest.approx([0.37, 0.37])
    assert agent.usage.gpus[1].memory_total_bytes == 80 << 30


def test_the_agents_certificate_names_only_the_agent():
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    server = AgentsServer(":memory:", "127.0.0.1:0").start()
    node = Client(server.address, server.issue("node", "n7"))
    try:
        key = ec.generate_private_key(ec.SECP256R1())
        greedy = (x509.CertificateSigningRequestBuilder()
                  .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tfdist-coordinator")]))
                  .add_extension(x509.SubjectAlternativeName([
                      x509.DNSName("tfdist-coordinator"), x509.DNSName("*.example.com"),
                      x509.IPAddress(ipaddress.ip_address("10.9.9.9"))]), critical=False)
                  .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                  .sign(key, hashes.SHA256())).public_bytes(serialization.Encoding.PEM)
        answer = node.call(node.agents.Register, pb.RegisterRequest(
            agent=pb.AgentInfo(name="n7", slots=1, addresses=[pb.Address(ip="192.168.5.7", prefix_len=24),
                                                                pb.Address(ip="fe80::7", prefix_len=64)]),
            metrics_csr=greedy))
        cert = x509.load_pem_x509_certificate(answer.metrics_certificate)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert set(names.get_values_for_type(x509.DNSName)) == {"n7"}
        assert {str(ip) for ip in names.get_values_for_type(x509.IPAddress)} == {"192.168.5.7", "fe80::7"}
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "tfdist agent n7"
        assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
        assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
            ExtendedKeyUsageOID.SERVER_AUTH]
        assert cert.public_key().public_numbers() == key.public_key().public_numbers()
        lifetime = cert.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc)
        assert datetime.timedelta(days=29) < lifetime <= datetime.timedelta(days=30)
        ca = x509.load_pem_x509_certificate(server.authority.ca_pem)
        cert.verify_directly_issued_by(ca)

        with pytest.raises(ClientError) as refused:  # not a request: refused, and nothing registered
            node.call(node.agents.Register, pb.RegisterRequest(agent=pb.AgentInfo(name="n7", slots=1),
                                                               metrics_csr=b"-----BEGIN CERTIFICATE REQUEST-----\nxx"))
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "metrics_csr is not a PEM certificate request" in str(refused.value)
        with pytest.raises(ClientError) as refused:
            node.call(node.agents.Register, pb.RegisterRequest(agent=pb.AgentInfo(name="n7", slots=1),
                                                               metrics_csr=b"x" * 9000))
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT and "metrics_csr: 9,000 bytes" in str(refused.value)
    finally:
        node.close()
        server.stop(grace=0)


def test_with_site_certificates_there_is_no_ca_key_and_no_agent_certificate(tmp_path):
    site = Authority.create()
    authority = Authority.create().with_site_tls(site.cert_pem, site.key_pem, site.ca_pem)
    server = AgentsServer(":memory:", "127.0.0.1:0", authority).start()
    node = Client(server.address, authority.issue("node", "n1"))
    try:
        answer = node.call(node.agents.Register, pb.RegisterRequest(
            agent=pb.AgentInfo(name="n1", slots=1), metrics_csr=certificate_request("n1")[1]))
        assert answer.metrics_certificate == b""
    finally:
        node.close()
        server.stop(grace=0)


def test_check_scrape_token_says_who_may_read(cluster):
    server, node, *_ = cluster

    def check(token, agent="g1"):
        return node.call(node.agents.CheckScrapeToken, pb.CheckScrapeTokenRequest(agent=agent, token=token))

    for kind in ("monitor", "user", "admin"):
        answer = check(server.issue(kind, "prom").token)
        assert (answer.kind, answer.name) == (kind, "prom")
    for token, code in ((server.issue("node", "g2").token, grpc.StatusCode.PERMISSION_DENIED),
                        (Authority.create().issue("monitor", "prom").token, grpc.StatusCode.UNAUTHENTICATED),
                        ("", grpc.StatusCode.UNAUTHENTICATED)):
        with pytest.raises(ClientError) as refused:
            check(token)
        assert refused.value.code == code, refused.value
    with pytest.raises(ClientError) as refused:  # a node asks only for its own endpoint
        check(server.issue("monitor", "prom").token, agent="g2")
    assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_the_coordinators_metrics(cluster):
    server, node, user, *_ = cluster
    assert scrape(server, "")[0] == 401
    assert scrape(server, server.issue("node", "g1").token)[0] == 403
    with pytest.raises(ClientError):
        user.call(user.coordinator.GetJob, pb.GetJobRequest(job_id="1-none"))
    status, text = scrape(server, server.issue("monitor", "prometheus").token)
    assert status == 200, text
    assert series(text, "tfdist_jobs_submitted_total")['{mode="mwms"}'] >= 1
    assert series(text, "tfdist_job_submit_to_placed_seconds_count")['{mode="mwms"}'] >= 1
    assert series(text, "tfdist_jobs")['{mode="mwms",state="STARTING"}'] == 1
    assert series(text, "tfdist_queue_length") == {"": 0.0}
    assert series(text, "tfdist_agents") == {'{state="alive"}': 1.0, '{state="lost"}': 0.0}
    assert series(text, "tfdist_agents_on_beacons") == {"": 0.0}  # it registered without beacons
    assert series(text, "tfdist_heartbeats_total")[""] >= 1
    assert series(text, "tfdist_node_slots") == {'{node="g1",state="held"}': 1.0, '{node="g1",state="free"}': 1.0}
    assert series(text, "tfdist_node_gpus") == {'{node="g1",state="held"}': 1.0, '{node="g1",state="free"}': 1.0}
    assert series(text, "tfdist_gpu_utilization_ratio") == {'{gpu="0",node="g1"}': 0.37, '{gpu="1",node="g1"}': 0.37}
    assert series(text, "tfdist_gpu_memory_total_bytes")['{gpu="1",node="g1"}'] == 80 << 30
    assert series(text, "tfdist_scheduling_round_seconds_count")[""] >= 1
    assert series(text, "tfdist_rpc_duration_seconds_count")['{method="SubmitJob"}'] >= 1
    assert series(text, "tfdist_rpc_errors_total")['{code="NOT_FOUND",method="GetJob"}'] == 1
    assert 0 <= series(text, "tfdist_agent_heartbeat_age_seconds")['{node="g1"}'] < 60


def test_promtool_lints_a_real_scrape(cluster):
    server, *_ = cluster
    assert shutil.which("promtool"), "promtool is missing: Debian's prometheus package (make test installs it)"
    status, text = scrape(server, server.issue("admin", "root").token)
    assert status == 200
    linted = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_throughput_is_the_lowest_ranks_steps_over_the_window():
    rate = Throughput(window=30.0)
    for t in range(0, 21):  # rank 0 at 5 steps/s, rank 1 behind it
        rate.note("1-a", {1: (t * 2, 1000.0 + t), 0: (t * 5, 1000.0 + t)})
    assert rate.steps_per_second("1-a", 1020.0) == pytest.approx(5.0)
    assert rate.steps_per_second("1-a", 1020.0 + 31) == 0.0  # no step for longer than the window: stalled
    rate.note("1-a", {0: (10, 1060.0)})  # a restart from a checkpoint: counted afresh
    rate.note("1-a", {0: (20, 1062.0)})
    assert rate.steps_per_second("1-a", 1062.0) == pytest.approx(5.0)
    assert rate.steps_per_second("1-b", 1062.0) == 0.0
    rate.forget_except([])
    assert rate.steps_per_second("1-a", 1062.0) == 0.0
    for i in range(metrics.MAX_TRACKED + 1):  # ended jobs, and nobody scrapes: the stale ones are dropped
        rate.note(f"{i}-x", {0: (1, 1000.0)})
    rate.note("1-a", {0: (30, 1100.0)})
    assert len(rate._samples) == 1


def test_examples_per_second_use_the_configs_global_batch_size(cluster):
    server, *_, job_id = cluster
    assert metrics.global_batch_size(server.core.store.job(job_id)) == 64
    now = time.time()
    for step in range(0, 50, 10):
        server.core.throughput.note(job_id, {0: (step, now - 4 + step / 10)})
    assert server.core.throughput.steps_per_second(job_id, now) == pytest.approx(10.0)


def test_a_scrape_with_1000_agents_is_cheap():
    server = AgentsServer(":memory:", "127.0.0.1:0")
    try:
        now = time.time()
        for i in range(1000):
            name = f"node{i:04d}"
            server.core.nodes.register(AgentRecord(name, 8, (Address(f"10.0.{i // 250}.{i % 250 + 1}", 16),),
                                             tuple(Gpu(g, f"GPU-{i}-{g}", "H100") for g in range(8))), (), (), now)
            server.core.nodes.heartbeat(AgentReport(name, usage=NodeUsage(now, tuple(
                GpuUsage(g, 0.5, 1 << 30, 80 << 30) for g in range(8)), (JobUsage("1-abcd", 100.0, 1 << 30, 4),))),
                now)
        metrics.exposition(server.core.telemetry, server.core)  # warm
        started = time.perf_counter()
        for _ in range(5):
            text = metrics.exposition(server.core.telemetry, server.core)
        cost = (time.perf_counter() - started) / 5
        print(f"scrape with 1,000 agents x 8 GPUs: {cost * 1000:.0f} ms, {len(text) / 1e6:.1f} MB")
        assert len(series(text.decode(), "tfdist_gpu_utilization_ratio")) == 8000
        assert cost < 5.0  # a 15 s scrape interval; measured ~0.3 s on a 2-core machine (docs/observability.md)
    finally:
        server.stop(grace=0)


def test_experiments_and_their_trials_by_state():
    """On a coordinator of its own: its node registered just now (the module's may be lost by this test's turn)."""
    server = AgentsServer(":memory:", "127.0.0.1:0", http_listen="127.0.0.1:0").start()
    node = Client(server.address, server.issue("node", "n1"))
    user = Client(server.address, server.issue("user", "alice"))
    try:
        node.call(node.agents.Register, pb.RegisterRequest(agent=pb.AgentInfo(
            name="n1", slots=1, addresses=[pb.Address(ip="127.0.0.1", prefix_len=8)])))
        config = ExperimentConfig(entrypoint=("python", "-c", "pass"), slots_per_trial=1, hyperparameters={
            "lr": {"type": "double", "minval": 0.1, "maxval": 0.2}}, searcher={
            "name": "random", "metric": "loss", "max_trials": 3, "max_concurrent_trials": 2})
        experiment_id = user.submit(jobspec.to_pb(jobspec.job_spec(config, working_dir="/")), retry_for=0)
        status, text = scrape(server, server.issue("monitor", "prometheus").token)
        assert status == 200
        assert series(text, "tfdist_experiments") == {'{state="ACTIVE"}': 1.0}
        # two trials at once on a node of one slot: one placed, one waiting for it
        assert series(text, "tfdist_experiment_trials") == {f'{{experiment="{experiment_id}",state="QUEUED"}}': 1.0,
                                                           f'{{experiment="{experiment_id}",state="STARTING"}}': 1.0}
        user.cancel(experiment_id)
        text = scrape(server, server.issue("monitor", "prometheus").token)[1]
        assert series(text, "tfdist_experiments") == {'{state="CANCELED"}': 1.0}
        assert series(text, "tfdist_experiment_trials") == {}
    finally:
        node.close()
        user.close()
        server.stop(grace=0)
