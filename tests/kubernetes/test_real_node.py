"""A real node (tests/kubernetes/real_node.py: containerd + runc, CNI bridge, the kubelet and kube-proxy of the
plane's release, CoreDNS) runs what tfdist's pods rely on, the way a cluster does: a pod from an OCI image
and its log through the API; a Secret volume laid out by the kubelet's atomic writer with fsGroup; pods
naming each other through the cluster DNS and a ClusterIP Service routed by kube-proxy; SIGTERM to PID 1,
SIGKILL after the grace period. Every real-node test lives in this module (one node per session: pytest-xdist's
loadscope keeps a module on one worker)."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import threading
import time

import pytest
from lightkube.models.apps_v1 import DeploymentSpec
from lightkube.models.core_v1 import (Container, HostPathVolumeSource, PodSecurityContext, PodSpec,
                                      PodTemplateSpec, SecretVolumeSource, ServicePort, ServiceSpec, Volume,
                                      VolumeMount)
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace, Pod, Secret, Service, ServiceAccount

from tests.engines import scenarios
from tests.kubernetes.cluster_helpers import gone, wait_for
from tests.kubernetes.real_node import CLUSTER_DOMAIN, LABEL, NODE_IP, POD_SUBNET, TOLERATION, dns_query

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def ns(admin, real_node, request):
    """A namespace of the test's own (its default ServiceAccount made), deleted afterwards with its pods
    gone from the node."""
    name = "real-" + re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[5:40].strip("-")
    admin.create(Namespace(metadata=ObjectMeta(name=name)))
    wait_for(f"the default ServiceAccount of {name}", lambda: not gone(admin, ServiceAccount, "default", name))
    yield name
    admin.deletecollection(Pod, namespace=name)  # at once (the namespace's own deletion starts its pass later)
    admin.delete(Namespace, name)
    wait_for(f"the pods of {name} gone from the real node",
             lambda: not list(admin.list(Pod, namespace=name)), timeout=90, every=0.2)


def python_pod(name: str, ns: str, image: str, script: str, *args: str, **spec) -> Pod:
    """A pod on the real node running `python3 -c script args...`."""
    container = Container(name="main", image=image, imagePullPolicy="Never",
                          command=["python3", "-c", script, *args],
                          volumeMounts=spec.pop("mounts", None))
    return Pod(metadata=ObjectMeta(name=name, namespace=ns, labels=spec.pop("labels", None)),
               spec=PodSpec(containers=[container], restartPolicy=spec.pop("restartPolicy", "Never"),
                            nodeSelector=LABEL, tolerations=[TOLERATION], automountServiceAccountToken=False,
                            **spec))


def phase(admin, name: str, ns: str) -> str:
    return admin.get(Pod, name, namespace=ns).status.phase or ""


def finished(admin, name: str, ns: str, timeout: float = 60) -> str:
    return wait_for(f"pod {ns}/{name} finished", lambda: phase(admin, name, ns) in ("Succeeded", "Failed")
                    and phase(admin, name, ns), timeout=timeout)


def log(admin, name: str, ns: str) -> str:
    """pods/log: the apiserver asks the kubelet (its client certificate, the kubelet's serving one)."""
    return "".join(admin.log(name, namespace=ns))


def fields(text: str) -> dict[str, str]:
    """`key value` lines, as the pods here print what they saw (python3-minimal has no json)."""
    return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)


def test_a_pod_runs_from_the_image_and_its_log_comes_through_the_api(admin, real_node, real_node_image, ns):
    created = time.monotonic()
    admin.create(python_pod("hello", ns, real_node_image,
                            "import os, socket, sys; print('hello from', socket.gethostname());"
                            "print('uid', os.getuid()); print('python', sys.version.split()[0])"))
    wait_for("pod hello Running or done", lambda: phase(admin, "hello", ns) in ("Running", "Succeeded"))
    running = time.monotonic() - created
    assert finished(admin, "hello", ns) == "Succeeded", log(admin, "hello", ns)
    done = time.monotonic() - created
    seen = fields(log(admin, "hello", ns))
    assert seen["hello"] == "from hello" and seen["uid"] == "0" and seen["python"].startswith("3.11"), seen
    pod = admin.get(Pod, "hello", namespace=ns)
    assert pod.spec.nodeName == real_node.name and pod.status.hostIP == NODE_IP
    assert ipaddress.ip_address(pod.status.podIP) in ipaddress.ip_network(POD_SUBNET)
    real_node.timings["pod created→Running"] = round(running, 2)
    real_node.timings["pod created→Succeeded"] = round(done, 2)


def test_a_secret_volume_is_laid_out_by_the_atomic_writer_with_fs_group(admin, real_node, real_node_image, ns):
    admin.create(Secret(metadata=ObjectMeta(name="cred", namespace=ns),
                        stringData={"credential.json": '{"token": "t0"}'}))
    script = """
import os
d = "/etc/tfdist"
print("groups", " ".join(map(str, sorted(os.getgroups()))))
print("ids", os.getuid(), os.getgid())
st = os.stat(d)
print("mount", oct(st.st_mode & 0o7777), st.st_uid, st.st_gid)
for entry in sorted(os.listdir(d)):
    p = os.path.join(d, entry)
    if os.path.islink(p):
        print("link:" + entry, os.readlink(p))
    else:
        st = os.lstat(p)
        print("dir:" + entry if os.path.isdir(p) else "file:" + entry, oct(st.st_mode & 0o7777), st.st_uid, st.st_gid)
real = os.path.realpath(os.path.join(d, "credential.json"))
st = os.stat(real)
print("real", real, oct(st.st_mode & 0o7777), st.st_uid, st.st_gid)
print("content", open(os.path.join(d, "credential.json")).read())
"""
    admin.create(python_pod("secret", ns, real_node_image, script,
                            securityContext=PodSecurityContext(runAsUser=1000, runAsGroup=3000, fsGroup=2000),
                            volumes=[Volume(name="cred", secret=SecretVolumeSource(secretName="cred", defaultMode=0o440))],
                            mounts=[VolumeMount(name="cred", mountPath="/etc/tfdist", readOnly=True)]))
    assert finished(admin, "secret", ns) == "Succeeded", log(admin, "secret", ns)
    seen = fields(log(admin, "secret", ns))
    assert seen["ids"] == "1000 3000" and "2000" in seen["groups"].split(), seen
    timestamp = seen["link:..data"]
    assert re.fullmatch(r"\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\d+", timestamp), seen
    assert seen["link:credential.json"] == "..data/credential.json", seen
    assert seen[f"dir:{timestamp}"].split()[2] == "2000", seen  # the timestamped folder: group fsGroup
    assert seen["real"] == f"/etc/tfdist/{timestamp}/credential.json 0o440 0 2000", seen
    assert seen["mount"].split()[2] == "2000", seen  # the tmpfs' root: group fsGroup (setgid)
    assert seen["content"] == '{"token": "t0"}', seen


def test_pods_name_each_other_through_coredns_and_a_cluster_ip_routes(admin, real_node, real_node_image, ns):
    # A headless Service and two pods with hostname/subdomain: each resolves the other's stable name.
    admin.create(Service(metadata=ObjectMeta(name="peers", namespace=ns),
                         spec=ServiceSpec(clusterIP="None", selector={"app": "peers"}, publishNotReadyAddresses=True,
                                          ports=[ServicePort(port=7000, name="peer")])))
    resolve = """
import socket, sys, time
name = sys.argv[1]
deadline = time.monotonic() + 60
while True:
    try:
        print("resolved", name, socket.gethostbyname(name)); break
    except OSError as e:
        if time.monotonic() > deadline:
            print("failed", name, e); sys.exit(1)
        time.sleep(0.2)
print("own", socket.gethostbyname(socket.gethostname()))
"""
    for me, other in (("a", "b"), ("b", "a")):
        admin.create(python_pod(me, ns, real_node_image, resolve, f"{other}.peers.{ns}.svc.{CLUSTER_DOMAIN}",
                                hostname=me, subdomain="peers", labels={"app": "peers"}))
    # A Deployment behind a ClusterIP Service, reached by its Service name from another pod.
    server = """
import signal, socket, sys
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # PID 1: no default action on SIGTERM
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 7470)); s.listen()
while True:
    c, _ = s.accept(); c.sendall(("coordinator " + socket.gethostname() + "\\n").encode()); c.close()
"""
    labels = {"app": "tfdist-coordinator"}
    admin.create(Deployment(metadata=ObjectMeta(name="tfdist-coordinator", namespace=ns), spec=DeploymentSpec(
        replicas=1, selector=LabelSelector(matchLabels=labels),
        template=PodTemplateSpec(metadata=ObjectMeta(labels=labels),
                                 spec=python_pod("x", ns, real_node_image, server, restartPolicy="Always").spec))))
    admin.create(Service(metadata=ObjectMeta(name="tfdist-coordinator", namespace=ns),
                         spec=ServiceSpec(selector=labels, ports=[ServicePort(port=7470, name="grpc")])))
    client = """
import socket, sys, time
name = sys.argv[1]
deadline = time.monotonic() + 60
while True:
    try:
        address = socket.gethostbyname(name)
        with socket.create_connection((address, 7470), timeout=2) as c:
            print("address", address); print("answer", c.makefile().readline().strip()); break
    except OSError as e:
        if time.monotonic() > deadline:
            print("failed", name, e); sys.exit(1)
        time.sleep(0.2)
"""
    admin.create(python_pod("client", ns, real_node_image, client, f"tfdist-coordinator.{ns}.svc"))
    for name in ("a", "b"):
        assert finished(admin, name, ns) == "Succeeded", log(admin, name, ns)
    a, b = fields(log(admin, "a", ns)), fields(log(admin, "b", ns))
    assert a["resolved"] == f"b.peers.{ns}.svc.{CLUSTER_DOMAIN} {b['own']}", (a, b)
    assert b["resolved"] == f"a.peers.{ns}.svc.{CLUSTER_DOMAIN} {a['own']}", (a, b)
    assert finished(admin, "client", ns) == "Succeeded", log(admin, "client", ns)
    seen = fields(log(admin, "client", ns))
    cluster_ip = admin.get(Service, "tfdist-coordinator", namespace=ns).spec.clusterIP
    server_pod = next(iter(admin.list(Pod, namespace=ns, labels=labels)))
    assert seen["address"] == cluster_ip, seen  # the Service's name, to its ClusterIP (CoreDNS)
    assert seen["answer"] == f"coordinator {server_pod.metadata.name}", seen  # then to its pod (kube-proxy)
    # the cluster's DNS answers for the cluster only: no upstream
    assert dns_query(NODE_IP, "deb.debian.org")[0] == 5  # REFUSED


def test_deleting_a_pod_sends_sigterm_to_pid_1_then_sigkill_after_the_grace(admin, real_node, real_node_image, ns):
    out = os.path.join(real_node.root, f"hostpath-{ns}")
    os.makedirs(out, mode=0o700)
    script = """
import os, signal, time
def term(*_):
    with open("/out/events", "a") as f:
        f.write(f"TERM {time.time()}\\n")
signal.signal(signal.SIGTERM, term)
with open("/out/events", "a") as f:
    f.write(f"START {time.time()} pid {os.getpid()}\\n")
while True:  # does not exit on SIGTERM, as a TensorFlow worker does not (FACTS)
    with open("/out/alive.tmp", "w") as f:
        f.write(str(time.time()))
    os.replace("/out/alive.tmp", "/out/alive")
    time.sleep(0.05)
"""
    grace = 3
    admin.create(python_pod("stubborn", ns, real_node_image, script, terminationGracePeriodSeconds=grace,
                            volumes=[Volume(name="out", hostPath=HostPathVolumeSource(path=out, type="Directory"))],
                            mounts=[VolumeMount(name="out", mountPath="/out")]))
    events = os.path.join(out, "events")
    wait_for("the stubborn pod started", lambda: os.path.exists(events) and "START" in open(events).read())
    seen: list = []
    watching = threading.Event()

    def watch() -> None:
        try:
            for kind, pod in admin.watch(Pod, namespace=ns, fields={"metadata.name": "stubborn"}):
                watching.set()
                seen.append((kind, pod))
                if kind == "DELETED":
                    return
        except Exception as e:  # noqa: BLE001 (reported by the assertions below)
            seen.append(("ERROR", e))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    wait_for("the pod watch started", watching.is_set, timeout=10)
    deleted = time.time()
    admin.delete(Pod, "stubborn", namespace=ns)
    watcher.join(timeout=60)
    assert not watcher.is_alive(), "the stubborn pod was not deleted within 60 s"
    lines = open(events).read().split("\n")
    start = next(line.split() for line in lines if line.startswith("START"))
    terms = [float(line.split()[1]) for line in lines if line.startswith("TERM")]
    with open(os.path.join(out, "alive")) as f:
        last_alive = float(f.read())
    assert start[3] == "1", start  # the container's command is its PID 1
    assert len(terms) == 1 and terms[0] - deleted < 2, (terms, deleted)  # SIGTERM, once, at deletion
    assert grace - 0.5 < last_alive - terms[0] < grace + 2, (terms[0], last_alive)  # lived out the grace...
    terminated = [c.state.terminated for _, p in seen if not isinstance(p, Exception)
                  for c in (p.status.containerStatuses or ()) if c.state and c.state.terminated]
    assert terminated and terminated[-1].exitCode == 137, seen  # ...then SIGKILL (128 + 9)
    real_node.timings["SIGTERM→SIGKILL"] = round(last_alive - terms[0], 2)


# ---------------------------------------------------------------- tfdist on the real node (issue 45, Must 1)
# The coordinator as a pod from `tfdist kubernetes manifests | kubectl apply -f -`, unchanged, on a volume whose
# root is root's; the admin credential from the Secret tfdist-admin and a user's issued with it over the API (no
# `kubectl exec`); `tfdist launch` through `kubectl port-forward`
# from a directory no pod has; every job's pods from the image `tfdist kubernetes image` built
# (tests/kubernetes/tfdist_on_node.py).
DIGITS = """name: digits-real
entrypoint: python /opt/tfdist/examples/digits/train.py --save /tmp/digits.keras
resources: {slots_per_trial: 2}
distribution: {mode: %s}
hyperparameters: {global_batch_size: 64, learning_rate: 0.003, epochs: %d}
"""
RESUMABLE = """name: resumable-real
entrypoint: python workers/resumable_fit.py
resources: {slots_per_trial: 2}
distribution: {mode: mwms}
max_restarts: %(restarts)s
checkpoint_storage: {host_path: /ckpt/%(name)s/checkpoints}
environment: {variables: {OUT: /ckpt/%(name)s, SLOW: '%(slow)s', SLOW_RUNS: '%(slow_runs)s', SAVE_FREQ: '3'}}
kubernetes:
  pod_spec:
    containers: [{name: tfdist-worker, volumeMounts: [{name: ckpt, mountPath: /ckpt}]}]
    volumes: [{name: ckpt, persistentVolumeClaim: {claimName: checkpoints}}]
"""


@pytest.fixture(scope="module")
def deployed(admin, plane, real_node, tmp_path_factory):
    from tests.kubernetes import tfdist_on_node as on_node

    on_node.load(real_node, on_node.image_archive())
    started = time.monotonic()
    cluster = on_node.Deployed(admin, plane, real_node)
    try:
        cluster.up(str(tmp_path_factory.mktemp("volumes")))
        print(f"\ntfdist on the real node: the coordinator's pod ready and reached in {time.monotonic() - started:.1f} s")
        yield cluster
    finally:
        cluster.down()


@pytest.mark.timeout(600)
def test_the_shipped_coordinator_runs_as_a_pod_on_a_volume_whose_root_is_roots(deployed):
    """Measured 2: its state is a folder of its own under the volume the kubelet's fsGroup pass made
    root:1000 2775; the pod runs as 1000 with its ServiceAccount's token (it lists nodes and pods)."""
    st = os.stat(deployed.state_volume)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 1000, 0o2775), oct(st.st_mode)
    state = os.stat(os.path.join(deployed.state_volume, "state"))
    assert (state.st_uid, state.st_mode & 0o777) == (1000, 0o700)
    agents = deployed.cli("agents", "--json")
    assert agents.returncode == 0, agents.stderr
    listed = json.loads(agents.stdout)
    assert [(a["name"], a["slots"]) for a in listed["agents"]] == [(deployed.node.name, 2)], listed


@pytest.mark.timeout(300)
def test_users_are_issued_and_revoked_over_the_api_with_the_admin_credential_the_secret_holds(deployed):
    """Issue 49, Must 3: the fixture read the admin credential from the Secret tfdist-admin with kubectl and issued
    alice's over the API (no shell in the coordinator's pod). Revoking bob refuses bob alone."""
    from tests.kubernetes.tfdist_on_node import CLI

    def as_admin(*args: str):
        return subprocess.run([*CLI, *args, "--credentials", deployed.admin_credential, "--coordinator",
                               f"{deployed.address}:{deployed.port}"], cwd=deployed.home, env=deployed.env(),
                              capture_output=True, text=True, timeout=120)

    bob = os.path.join(deployed.home, "bob.json")
    assert as_admin("credentials", "--user", "bob", "-o", bob).returncode == 0
    as_bob = [*CLI, "agents", "--credentials", bob, "--coordinator", f"{deployed.address}:{deployed.port}"]
    assert subprocess.run(as_bob, env=deployed.env(), capture_output=True, timeout=120).returncode == 0
    assert as_admin("credentials", "--revoke", "user:bob").returncode == 0
    refused = subprocess.run(as_bob, env=deployed.env(), capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "user credential bob was revoked" in refused.stderr, refused.stderr
    assert deployed.cli("agents", timeout=60).returncode == 0  # alice's: untouched
    listed = json.loads(as_admin("credentials", "--list", "--json").stdout)
    assert {i["name"] for i in listed["issued"] if i["kind"] == "user"} >= {"alice", "bob"}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("scenario", scenarios.SCENARIOS, ids=lambda s: s.__name__)
def test_the_kubernetes_engine_passes_the_contract_s_scenario_with_real_containers(deployed, scenario):
    """Issue 48, Must 5: the engine contract suite's scenarios (tests/engines/scenarios.py), which the local,
    agents and minimal engines pass in tests/integration/test_engine_contract.py, run by the Kubernetes engine
    behind the shipped coordinator's pod, each rank a process in a real container."""
    from tests.kubernetes.tfdist_on_node import ThroughTheCli

    deployed.idle()
    scenario(ThroughTheCli(deployed))


@pytest.mark.timeout(700)
def test_an_mwms_job_launched_from_a_directory_the_pods_do_not_have_trains_in_real_containers(deployed):
    """Measured 3: the job ran in the client's working directory, which no pod has. Its logs and metrics come
    back as on agents, and its pods, Service, budget and Secret go when it ends."""
    deployed.idle()
    config = deployed.config("digits.yaml", DIGITS % ("mwms", 8))
    result = deployed.cli("launch", "--config", config, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert re.search(r"\[rank=0\] final test accuracy: 0\.9\d+ \(target 0\.93; 2 workers", result.stdout), \
        result.stdout[-3000:]
    job_id = re.search(r"job (\S+) submitted", result.stderr + result.stdout).group(1)
    job = deployed.job(job_id)
    assert job["state"] == "SUCCEEDED" and [p["node"] for p in job["placement"]] == [deployed.node.name], job
    logs = deployed.cli("logs", job_id)
    assert "[rank=0] final test accuracy" in logs.stdout and "[rank=1]" in logs.stdout
    metrics = deployed.cli("metrics", job_id, "--json")
    assert any(json.loads(line)["metrics"].get("test_accuracy", 0) >= 0.93 for line in metrics.stdout.splitlines()), \
        metrics.stdout[-2000:]
    wait_for("the job's objects deleted", lambda: not deployed.objects(), timeout=90)


@pytest.mark.timeout(700)
def test_a_parameter_server_job_runs_chief_worker_and_ps_in_a_real_container_and_ends(deployed):
    deployed.idle()
    config = deployed.config("ps.yaml", DIGITS.replace("examples/digits", "examples/ps").replace(
        "distribution: {mode: %s}", "distribution: {mode: %s, num_ps: 1}") % ("ps", 10))  # asynchronous: 4 epochs reached 0.897 of 0.9 once
    result = deployed.cli("launch", "--config", config, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "final test accuracy" in result.stdout, result.stdout[-3000:]
    wait_for("the ps job's objects deleted (its ps task never ends by itself)", lambda: not deployed.objects(),
             timeout=90)


@pytest.mark.timeout(600)
def test_a_jax_job_joins_its_processes_in_a_real_container(deployed):
    """The jax mode's environment in a real pod: a plain `jax.distributed.initialize()` with no arguments."""
    deployed.idle()
    config = deployed.config("jax.yaml", "entrypoint: python workers/jax_plain.py\n"
                                         "resources: {slots_per_trial: 2}\ndistribution: {mode: jax}\n"
                                         "environment: {variables: {PYTHONPATH: /opt/jax-site}}\n")
    result = deployed.cli("launch", "--config", config, timeout=500)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "[rank=0] process 0 of 2 gathered [1, 2]" in out and "[rank=1] process 1 of 2 gathered [1, 2]" in out, \
        out[-3000:]
    wait_for("the jax job's objects deleted", lambda: not deployed.objects(), timeout=90)


@pytest.mark.timeout(1200)
def test_preempt_resume_a_killed_container_and_cancel_on_real_containers(deployed):
    """`tfdist preempt`: every rank stops at one step with a checkpoint on the job's volume, the job pauses and
    its pod goes; `tfdist resume`: a new pod resumes there; SIGKILL to the container's PID 1 (the pod's agent)
    restarts the gang from the latest checkpoint (max_restarts: 1); every step is trained once. Then a job
    canceled mid-run ends CANCELED with nothing left."""
    deployed.idle()
    from tests.integration.test_restarts import TOTAL_STEPS
    from tests.kubernetes.tfdist_on_node import steps_by_attempt, trained

    out = deployed.job_dir("resumable")
    config = deployed.config("resumable.yaml", RESUMABLE % {"name": "resumable", "slow": 0.8, "slow_runs": 2, "restarts": 1})
    job = deployed.cli("launch", "--detach", "--config", config)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip()
    wait_for("the first run's step 4", lambda: trained(out, 0) >= 4, timeout=300, every=0.5)
    assert deployed.cli("preempt", job_id).returncode == 0
    wait_for("the job paused", lambda: deployed.job(job_id)["state"] == "PAUSED", timeout=120, every=0.5)
    wait_for("the paused job's pod deleted", lambda: not deployed.objects(), timeout=90)
    paused_at = trained(out, 0)
    assert deployed.cli("resume", job_id).returncode == 0
    wait_for("the resumed run's step", lambda: trained(out, 1) >= paused_at + 3, timeout=300, every=0.5)
    deployed.kill_container_pid1(job_id)
    wait_for("the job to finish", lambda: deployed.job(job_id)["state"] in ("SUCCEEDED", "FAILED"), timeout=400,
             every=1.0)
    shown = deployed.job(job_id)
    runs = steps_by_attempt(out)
    assert shown["state"] == "SUCCEEDED" and shown["restarts"] == 1, (shown, runs)
    assert sorted(runs) == [0, 1, 2] and min(runs[1]) == paused_at + 1, runs  # resumed right after the common step
    assert max(runs[2]) == TOTAL_STEPS and (min(runs[2]) - 1) % 3 == 0, runs  # from a checkpoint (every 3 steps)
    assert set(s for a in runs for s in runs[a]) == set(range(1, TOTAL_STEPS + 1)), runs
    wait_for("the job's objects deleted", lambda: not deployed.objects(), timeout=90)

    canceled = deployed.cli("launch", "--detach", "--config", deployed.config(
        "cancel.yaml", RESUMABLE % {"name": "canceled", "slow": 2.0, "slow_runs": 9, "restarts": 1}))
    cancel_id = canceled.stdout.strip()
    canceled_out = deployed.job_dir("canceled")
    wait_for("the job to run", lambda: trained(canceled_out, 0) >= 1, timeout=300, every=0.5)
    assert deployed.cli("cancel", cancel_id).returncode == 0
    wait_for("the job canceled", lambda: deployed.job(cancel_id)["state"] == "CANCELED", timeout=60, every=0.5)
    wait_for("the canceled job's objects deleted", lambda: not deployed.objects(), timeout=90)


@pytest.mark.timeout(900)
def test_a_drained_node_stops_the_job_at_a_common_step_and_it_is_placed_again_without_a_restart(deployed):
    """Measured 7: a drain's first step, `kubectl cordon`, while a job trains: the coordinator stops every rank
    at one step with a checkpoint and places the job again (max_restarts: 0, so a restart spent would fail it);
    once the node is back (`kubectl uncordon`) the next run resumes right after that step."""
    deployed.idle()
    from tests.integration.test_restarts import TOTAL_STEPS, stopped_steps
    from tests.kubernetes.tfdist_on_node import steps_by_attempt, trained

    out = deployed.job_dir("drained")
    job = deployed.cli("launch", "--detach", "--config", deployed.config(
        "drained.yaml", RESUMABLE % {"name": "drained", "slow": 0.8, "slow_runs": 1, "restarts": 0}))
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip()
    wait_for("the first run's step 4", lambda: trained(out, 0) >= 4, timeout=300, every=0.5)
    deployed.kubectl("cordon", deployed.node.name)
    try:
        wait_for("the job placed again", lambda: deployed.job(job_id)["attempt"] == 1, timeout=180, every=0.5)
        shown, logs = deployed.job(job_id), deployed.cli("logs", job_id).stdout
        assert shown["restarts"] == 0 and "was cordoned (a drain)" in logs, (shown, logs[-3000:])
        stops = stopped_steps(logs)
        assert set(stops) == {0, 1} and len(set(stops.values())) == 1, stops  # every rank at one step
        wait_for("the drained node's pods gone", lambda: not deployed.objects(), timeout=90)
    finally:
        deployed.kubectl("uncordon", deployed.node.name)
    wait_for("the job to finish", lambda: deployed.job(job_id)["state"] in ("SUCCEEDED", "FAILED"), timeout=400,
             every=1.0)
    runs, shown = steps_by_attempt(out), deployed.job(job_id)
    if shown["state"] != "SUCCEEDED":  # what the coordinator did, in the test's output
        print("\n".join(line for line in deployed.kubectl("-n", "tfdist-real", "logs", "deploy/tfdist-coordinator")
                        .splitlines() if "HTTP Request" not in line))
    assert shown["state"] == "SUCCEEDED", (shown["outcome"], runs)
    assert sorted(runs) == [0, 1] and min(runs[1]) == stops[0] + 1, runs
    assert sorted(s for a in runs for s in runs[a]) == list(range(1, TOTAL_STEPS + 1)), runs
