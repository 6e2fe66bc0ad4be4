"""Every RPC of the service descriptors x every kind of caller, over real gRPC + TLS on loopback.

The expected table is written out here (not read from cluster/coordinator/access.py), and it must name
exactly the RPCs the descriptors have: a new RPC fails this test until someone decides who may call it.
"""

import dataclasses
import socket
import threading
import time

import grpc
import pytest

from tests.agent_core import AgentsServer
from cluster.shared import jobspec
from cluster.shared.config import ExperimentConfig
from cluster.shared.auth import call_metadata
from cluster.shared.credentials import Authority, run_name
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.rpc import Client, ClientError

pytestmark = pytest.mark.timeout(120)

CALLERS = ("none", "wrong", "owner", "other_user", "node", "other_node", "admin", "monitor", "run", "past_run",
           "run_elsewhere")
USERS = {"owner", "other_user", "admin"}
READERS = USERS | {"monitor"}
OWNED = {"owner", "admin"}
EXPECTED_ALLOWED = {
    "SubmitJob": USERS, "GetJob": READERS, "ListJobs": READERS, "ListAgents": READERS,
    "CancelJob": OWNED, "PreemptJob": OWNED, "ResumeJob": OWNED, "GetLogs": OWNED, "GetMetrics": OWNED | {"monitor"},
    # run: a Kubernetes pod's agent, its job's current run on n1; past_run: the run before (over); run_elsewhere:
    # the current run, but on a node it does not hold
    "Register": {"node", "run"}, "Heartbeat": {"node", "run"}, "WaitForWork": {"node", "run"},
    "ReportExit": {"node", "run"}, "PushLogs": {"node", "run"}, "ReportMetrics": {"node", "run"},
    "CheckScrapeToken": {"node", "run"},
    "GetExperiment": READERS, "ListExperiments": READERS,
    "IssueCredential": {"admin"}, "ListCredentials": {"admin"}, "RevokeCredential": {"admin"},
}
DENIED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


def every_rpc():
    for service in pb.DESCRIPTOR.services_by_name.values():
        for method in service.methods:
            yield service.name, method.name


def test_the_table_names_every_rpc_of_the_descriptors():
    assert {m for _, m in every_rpc()} == set(EXPECTED_ALLOWED)


@pytest.fixture(scope="module")
def cluster():
    server = AgentsServer(":memory:", "127.0.0.1:0").start()
    node = Client(server.address, server.issue("node", "n1"))
    node.call(node.agents.Register, pb.RegisterRequest(agent=pb.AgentInfo(
        name="n1", slots=2, addresses=[pb.Address(ip="127.0.0.1", prefix_len=8)])))
    owner = Client(server.address, server.issue("user", "alice"))
    spec = jobspec.to_pb(jobspec.job_spec(ExperimentConfig(entrypoint=("python", "-c", "pass"), slots_per_trial=1,
                                                           environment_variables={"API_KEY": "s3cret"}), working_dir="/"))
    job_id = owner.submit(spec, retry_for=0)
    clients = {
        # wrong: the right CA (TLS verifies) with a token another cluster's secret signed
        "none": None, "wrong": dataclasses.replace(server.issue("admin", "alice"),
                                                   token=Authority.create().issue("admin", "alice").token),
        "owner": server.issue("user", "alice"), "other_user": server.issue("user", "bob"),
        "node": server.issue("node", "n1"), "other_node": server.issue("node", "n2"),
        "admin": server.issue("admin", "root"), "monitor": server.issue("monitor", "prometheus"),
        "run": server.issue("run", run_name("n1", job_id, 0)), "past_run": server.issue("run", run_name("n1", job_id, 7)),
        "run_elsewhere": server.issue("run", run_name("n2", job_id, 0)),
    }
    yield server, job_id, spec, clients
    node.close()
    owner.close()
    server.stop(grace=0)


def request_for(method: str, job_id: str, spec, scraper_token: str = ""):
    agent = "n1"
    return {
        "SubmitJob": pb.SubmitJobRequest(spec=spec), "GetJob": pb.GetJobRequest(job_id=job_id),
        "ListJobs": pb.ListJobsRequest(), "ListAgents": pb.ListAgentsRequest(),
        "CancelJob": pb.CancelJobRequest(job_id=job_id), "PreemptJob": pb.PreemptJobRequest(job_id=job_id),
        "ResumeJob": pb.ResumeJobRequest(job_id=job_id), "GetLogs": pb.GetLogsRequest(job_id=job_id),
        "GetMetrics": pb.GetMetricsRequest(job_id=job_id),
        "Register": pb.RegisterRequest(agent=pb.AgentInfo(name=agent, slots=2, addresses=[
            pb.Address(ip="127.0.0.1", prefix_len=8)])),
        "Heartbeat": pb.HeartbeatRequest(agent=agent), "WaitForWork": pb.WaitForWorkRequest(agent=agent, wait_ms=0),
        "ReportExit": pb.ReportExitRequest(agent=agent, job_id=job_id, exit=pb.WorkerExit(rank=0, exit_code=0,
                                                                                          attempt=99)),
        "PushLogs": pb.PushLogsRequest(agent=agent, job_id=job_id, lines=[pb.LogLine(rank=0, text="hi")],
                                       source="n1/x"),
        "ReportMetrics": pb.ReportMetricsRequest(agent=agent, job_id=job_id, source="n1/x", metrics=[
            pb.Metric(rank=0, step=1, name="loss", value=1.0)]),
        "CheckScrapeToken": pb.CheckScrapeTokenRequest(agent=agent, token=scraper_token),
        "GetExperiment": pb.GetExperimentRequest(experiment_id="e1"), "ListExperiments": pb.ListExperimentsRequest(),
        # names no caller of this table holds: revoking one changes nothing for them
        "IssueCredential": pb.IssueCredentialRequest(kind="user", name="zed"),
        "ListCredentials": pb.ListCredentialsRequest(),
        "RevokeCredential": pb.RevokeCredentialRequest(kind="user", name="yves"),
    }[method]


def answer(server, credential, service: str, method: str, request) -> grpc.StatusCode:
    metadata = ()
    if credential is None:  # no credential at all: a bare TLS channel that trusts the server, no token
        ca = server.authority.ca_pem
        channel = grpc.secure_channel(server.address, grpc.ssl_channel_credentials(ca),
                                      options=[("grpc.ssl_target_name_override", server.authority.server_name)])
    else:
        channel, metadata = Client(server.address, credential).channel, call_metadata(credential)
    call = channel.unary_unary(f"/tfdist.v1.{service}/{method}", request_serializer=type(request).SerializeToString,
                               response_deserializer=lambda b: b)
    try:
        call(request, timeout=10, metadata=metadata)
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()
    finally:
        channel.close()


# Calls that change state (cancel, submit, register...) go last, so earlier rows see the job as it was.
ORDER = sorted(every_rpc(), key=lambda rpc: rpc[1] in ("CancelJob", "PreemptJob", "ResumeJob", "SubmitJob"))


@pytest.mark.parametrize("service,method", ORDER)
def test_who_may_call_each_rpc(cluster, service, method):
    server, job_id, spec, clients = cluster
    request = request_for(method, job_id, spec, clients["monitor"].token)
    outcomes = {caller: answer(server, clients[caller], service, method, request) for caller in CALLERS}
    allowed = {caller for caller, code in outcomes.items() if code not in DENIED}
    assert allowed == EXPECTED_ALLOWED[method], outcomes
    assert outcomes["none"] == outcomes["wrong"] == grpc.StatusCode.UNAUTHENTICATED


def test_environment_values_are_never_shown_back(cluster):
    server, job_id, _, clients = cluster
    for caller in ("owner", "admin", "monitor", "other_user"):
        client = Client(server.address, clients[caller])
        shown = [client.job(job_id), *[j for j in client.jobs() if j.id == job_id]]
        client.close()
        assert all(dict(j.spec.config.environment_variables) == {"API_KEY": "(hidden)"} for j in shown)
        assert all(j.owner == "alice" for j in shown)
    assert server.store.job(job_id).spec.config.environment_variables == {"API_KEY": "s3cret"}  # the workers still get it


def test_a_node_cannot_report_for_another_nodes_job(cluster):
    """Measured: ReportExit(agent="evil", rank=0, code=0) ended a running job SUCCEEDED. n2, registered
    with its own valid credential, reports about n1's job as itself."""
    server, job_id, _, clients = cluster
    n2 = Client(server.address, clients["other_node"])
    n2.call(n2.agents.Register, pb.RegisterRequest(agent=pb.AgentInfo(name="n2", slots=64, addresses=[
        pb.Address(ip="127.0.0.1", prefix_len=8)])))
    before = server.store.job(job_id).state
    for method, request in (
            (n2.agents.ReportExit, pb.ReportExitRequest(agent="n2", job_id=job_id, exit=pb.WorkerExit(rank=0))),
            (n2.agents.PushLogs, pb.PushLogsRequest(agent="n2", job_id=job_id, lines=[pb.LogLine(text="forged")])),
            (n2.agents.ReportMetrics, pb.ReportMetricsRequest(agent="n2", job_id=job_id, metrics=[
                pb.Metric(rank=0, step=1, name="acc", value=1.0)]))):
        with pytest.raises(ClientError) as err:
            n2.call(method, request)
        assert err.value.code == grpc.StatusCode.PERMISSION_DENIED and "does not run on node n2" in str(err.value)
    with pytest.raises(ClientError) as err:  # nor claim n1's name
        n2.call(n2.agents.Register, pb.RegisterRequest(agent=pb.AgentInfo(name="n1", slots=64)))
    assert err.value.code == grpc.StatusCode.PERMISSION_DENIED
    n2.close()
    assert server.store.job(job_id).state == before
    assert all(l.text != "forged" for l in server.store.logs(job_id))
    assert {a.name: a.slots for a in server.store.agents()}.get("n1") == 2


def test_a_run_credential_reports_only_about_its_own_job():
    """access.decide alone: a run credential (NODE@JOB+ATTEMPT) speaks for its node, about its job only."""
    from cluster.coordinator import access
    from cluster.shared.credentials import Principal
    from tfdist.errors import PermissionDeniedError

    run = Principal("run", run_name("gpu-1", "7-ab", 2))
    access.decide("PushLogs", run, pb.PushLogsRequest(agent="gpu-1", job_id="7-ab"), lambda _: None)
    with pytest.raises(PermissionDeniedError, match="cannot report for job '8-cd'"):
        access.decide("PushLogs", run, pb.PushLogsRequest(agent="gpu-1", job_id="8-cd"), lambda _: None)
    with pytest.raises(PermissionDeniedError, match="cannot speak for node 'gpu-2'"):
        access.decide("Heartbeat", run, pb.HeartbeatRequest(agent="gpu-2"), lambda _: None)
    with pytest.raises(PermissionDeniedError, match="needs a user or admin credential; yours is a run credential"):
        access.decide("SubmitJob", run, pb.SubmitJobRequest(), lambda _: None)


def test_a_token_is_never_sent_to_a_server_that_fails_verification(cluster):
    """Measured: `tfdist jobs --token-file` sent its bearer token to a fake plaintext server."""
    _, _, _, clients = cluster
    received = bytearray()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(10)

    def serve():
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        conn.settimeout(0.5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                chunk = conn.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not chunk:
                break
            received.extend(chunk)
            conn.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")  # an empty HTTP/2 SETTINGS frame: "plaintext"
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    credential = clients["owner"]
    client = Client(f"127.0.0.1:{listener.getsockname()[1]}", credential, timeout=3)
    with pytest.raises(ClientError) as err:
        client.jobs()
    client.close()
    thread.join(timeout=10)
    listener.close()
    assert err.value.code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAVAILABLE,
                              grpc.StatusCode.DEADLINE_EXCEEDED)
    assert received  # the client did connect (a TLS ClientHello) ...
    assert credential.token.encode() not in bytes(received)  # ... and never sent the token
    assert credential.token.split(":")[-1].encode() not in bytes(received)


def test_another_clusters_coordinator_is_not_trusted(cluster):
    server, _, _, _ = cluster
    impostor = AgentsServer(":memory:", "127.0.0.1:0").start()  # its own authority
    try:
        client = Client(impostor.address, server.issue("admin", "root"), timeout=5)
        with pytest.raises(ClientError) as err:
            client.jobs()
        client.close()
        assert err.value.code == grpc.StatusCode.UNAUTHENTICATED
        assert "did not prove it is the coordinator your credential trusts" in str(err.value)
    finally:
        impostor.stop(grace=0)


def test_only_its_owner_or_an_admin_acts_on_an_experiment(cluster):
    server, _, _, clients = cluster
    config = ExperimentConfig(entrypoint=("python", "-c", "pass"), slots_per_trial=1, hyperparameters={
        "lr": {"type": "double", "minval": 0.1, "maxval": 0.2}}, searcher={
        "name": "random", "metric": "loss", "max_trials": 2, "max_concurrent_trials": 1})
    owner = Client(server.address, clients["owner"])
    experiment_id = owner.submit(jobspec.to_pb(jobspec.job_spec(config, working_dir="/")), retry_for=0)
    assert experiment_id.startswith("e") and owner.experiment(experiment_id).owner == "alice"
    for caller in ("other_user", "monitor"):
        other = Client(server.address, clients[caller])
        for act in (other.cancel, other.preempt):
            with pytest.raises(ClientError) as e:
                act(experiment_id)
            assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert other.experiment(experiment_id).id == experiment_id  # reading is allowed
        other.close()
    assert owner.cancel(experiment_id) == "CANCELED"
    owner.close()
