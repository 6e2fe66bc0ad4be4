"""Another local user (nobody, through setpriv) against a user's coordinator daemon and a local launch.

Measured before credentials: `nobody` found the coordinator's loopback port, sent a SubmitJob as plain
HTTP/2 and its job ran as root; it listed a local launch's running job and ran its own beside it. Here
`nobody` is a strong attacker: it knows the port and even holds the cluster's CA certificate (public
anyway), and tries plaintext, TLS without a token, a forged admin token, the CLI, and the files.
"""

import json
import os
import signal
import subprocess
import sys
import uuid

import pytest

from tests.conftest import MARKER_VAR, REPO, cli_env, run_cli, wait_for

pytestmark = [pytest.mark.timeout(180)]
SLEEPER = os.path.join(REPO, "tests", "multihost", "sleeper.py")

PROBE = r'''
import json, os, sys
import grpc
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb, cluster_pb2_grpc as pb_grpc
address, ca = os.environ["ADDRESS"], os.environ["CA_PEM"].encode()
found = {}

def code(stub_call, request, metadata=()):
    try:
        stub_call(request, timeout=5, metadata=metadata)
        return "OK"
    except grpc.RpcError as e:
        return e.code().name

spec = pb.JobSpec(config=pb.JobConfig(entrypoint=["id"], slots_per_trial=1, distribution_mode="mwms"))
plain = grpc.insecure_channel(address)
found["plaintext_list"] = code(pb_grpc.CoordinatorStub(plain).ListJobs, pb.ListJobsRequest())
found["plaintext_submit"] = code(pb_grpc.CoordinatorStub(plain).SubmitJob, pb.SubmitJobRequest(spec=spec))
tls = grpc.secure_channel(address, grpc.ssl_channel_credentials(ca),
                          options=[("grpc.ssl_target_name_override", "tfdist-coordinator")])
stub = pb_grpc.CoordinatorStub(tls)
found["tls_no_token"] = code(stub.ListJobs, pb.ListJobsRequest())
forged = (("authorization", "Bearer tfd1:admin:root:" + "A" * 43),)
found["tls_forged_list"] = code(stub.ListJobs, pb.ListJobsRequest(), forged)
found["tls_forged_submit"] = code(stub.SubmitJob, pb.SubmitJobRequest(spec=spec), forged)
found["tls_forged_register"] = code(pb_grpc.AgentServiceStub(tls).Register,
                                    pb.RegisterRequest(agent=pb.AgentInfo(name="evil", slots=64)), forged)
for what in os.environ["SECRETS"].split(os.pathsep):
    try:
        open(what).read()
        found["read " + what] = "READ"
    except OSError as e:
        found["read " + what] = type(e).__name__
print(json.dumps(found))
'''


def as_nobody(python, address: str, ca_pem: str, secrets: list[str]) -> dict:
    env = python.env(ADDRESS=address, CA_PEM=ca_pem, SECRETS=os.pathsep.join(secrets))
    result = subprocess.run(python.argv("-c", PROBE), env=env, capture_output=True, text=True, timeout=60, cwd="/")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def nobody_cli(python, args, marker) -> subprocess.CompletedProcess:
    runtime = f"/tmp/tfdist-nobody-{uuid.uuid4().hex}"  # nobody's own runtime dir (its HOME does not exist)
    env = python.env(TFDIST_RUNTIME_DIR=runtime, **{MARKER_VAR: marker})
    try:
        return subprocess.run(python.argv("-m", "cluster.client.cli", *args), env=env, cwd="/",
                              capture_output=True, text=True, timeout=60)
    finally:
        subprocess.run(["rm", "-rf", runtime], timeout=30)


def refused_everything(found: dict, register: str = "UNAUTHENTICATED") -> None:
    """`register`: what a forged agent registration meets (a local launch serves no AgentService at all:
    its engine is the local one, and nothing outside the launch can join it)."""
    assert found.pop("plaintext_list") != "OK" and found.pop("plaintext_submit") != "OK"
    assert {k: v for k, v in found.items() if k.startswith("tls_")} == {
        "tls_no_token": "UNAUTHENTICATED", "tls_forged_list": "UNAUTHENTICATED",
        "tls_forged_submit": "UNAUTHENTICATED", "tls_forged_register": register}
    assert all(v == "PermissionError" for k, v in found.items() if k.startswith("read ")), found


def test_another_user_cannot_use_a_users_coordinator(local_cluster, marker, other_user_python):
    cluster = local_cluster()
    cluster.start_agent("n1", "--slots", "1")
    cluster.wait_agents("n1")
    credentials = os.path.join(cluster.state_dir, "credentials")
    ca = open(os.path.join(credentials, "ca.pem")).read()
    runtime = os.environ["TFDIST_RUNTIME_DIR"]
    published = [os.path.join(runtime, f) for f in os.listdir(runtime) if f.startswith(
        f"coordinator-{cluster.address.rsplit(':', 1)[1]}-")]
    assert len(published) == 1
    found = as_nobody(other_user_python, cluster.address, ca, [os.path.join(credentials, "secret"), os.path.join(credentials, "ca-key.pem"),
                                            published[0], os.path.join(cluster.state_dir, "coordinator.sqlite")])
    refused_everything(found)
    cli = nobody_cli(other_user_python, ["jobs", "--coordinator", cluster.address], marker)
    assert cli.returncode == 2 and cli.stderr.startswith(
        f"tfdist: error: no credential for the coordinator at {cluster.address}") and cli.stderr.count("\n") == 1
    assert cluster.json("jobs")["jobs"] == [] and [a["name"] for a in cluster.json("agents")["agents"]] == ["n1"]


def test_another_user_cannot_use_a_local_launch(marker, tmp_path, other_user_python):
    runtime = os.environ["TFDIST_RUNTIME_DIR"]
    before = set(os.listdir(runtime))
    launch = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "launch", "--slots", "1", "--", SLEEPER,
                               "600"], env=cli_env(marker), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        assert "tick 0" in launch.stdout.readline()

        def published():  # the launch serves other terminals from a thread half a second in (launch.SERVE_AFTER)
            return [f for f in set(os.listdir(runtime)) - before if f.endswith(f"-{launch.pid}.json")]

        wait_for(lambda: published(), "the launch to publish its coordinator for this user's other terminals",
                 timeout=60, alive=lambda: launch.poll() is None)
        mine = published()
        assert len(mine) == 1
        credential = json.loads(open(os.path.join(runtime, mine[0])).read())
        found = as_nobody(other_user_python, credential["coordinator"], credential["ca_pem"], [os.path.join(runtime, mine[0])])
        refused_everything(found, register="UNIMPLEMENTED")
        shown = run_cli(["jobs", "--json", "--coordinator", credential["coordinator"]], marker, timeout=60)
        assert shown.returncode == 0, shown.stderr  # this user's other terminal needs no flag but the address
        assert [j["state"] for j in json.loads(shown.stdout)["jobs"]] == ["RUNNING"]  # nobody's jobs never ran
    finally:
        launch.send_signal(signal.SIGINT)
        launch.communicate(timeout=60)
    wait_for(lambda: not any(f.endswith(f"-{launch.pid}.json") for f in os.listdir(runtime)),
             "the launch to remove its published credential", timeout=10)
