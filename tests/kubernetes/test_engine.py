"""The Kubernetes engine end to end on the real control plane: `tfdist coordinator --engine kubernetes` with
exactly the shipped RBAC (its ServiceAccount's token), two nodes of test kubelets that run each pod's command
as processes in network namespaces of their own (tests/kubernetes/kubelet.py), and the same `tfdist launch`
as on agents. A job's pods are created together, are each their node's agent for the run, train with real
TensorFlow, and leave nothing behind."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import uuid

import numpy as np
import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod, Secret, Service
from lightkube.resources.networking_v1 import NetworkPolicy

from tests.conftest import REPO, LocalCluster, cli_env, processes_with_marker, wait_for
from tests.kubernetes.cluster_helpers import coordinator_rights, remove_rights
from tests.kubernetes.kubelet import PodNetwork, TestKubelet

pytestmark = pytest.mark.timeout(600)
NS = "tfdist-engine"
NODES = ("train-1", "train-2")
TRAIN = os.path.join(REPO, "tests", "integration", "workers", "train_worker.py")


class Kube:
    """The coordinator on the pods' network, its kubelets and what the tests read of the API."""

    def __init__(self, admin: Client, cluster: LocalCluster, kubelets: list[TestKubelet], marker: str):
        self.admin, self.cluster, self.kubelets, self.marker = admin, cluster, kubelets, marker

    def objects(self) -> list[str]:
        """What tfdist has for jobs in its namespace (pods, Services, Secrets, NetworkPolicies)."""
        found = []
        for resource in (Pod, Service, Secret, NetworkPolicy):
            found += [f"{resource.__name__}/{o.metadata.name}" for o in self.admin.list(resource, namespace=NS)
                      if (o.metadata.labels or {}).get("app.kubernetes.io/managed-by") == "tfdist" and
                      (o.metadata.labels or {}).get("tfdist.io/job")]
        return found

    def launch(self, *args, timeout=300):
        return self.cluster.cli("launch", *args, timeout=timeout)

    def pods(self) -> dict[str, str]:
        """The namespace's tfdist pods: name -> phase."""
        return {p.metadata.name: p.status.phase or "" for p in self.admin.list(Pod, namespace=NS)
                if (p.metadata.labels or {}).get("tfdist.io/job")}

    def kill_pod(self, name: str) -> None:
        next(k for k in self.kubelets if name in k.running_pods()).kill(name)

    def restart_coordinator(self) -> None:
        """kill -9, then the same coordinator again (state dir, address, options)."""
        self.cluster.coordinator.send_signal(signal.SIGKILL)
        self.cluster.coordinator.wait(timeout=30)
        os.environ["TFDIST_POD_AGENT_COMMAND"] = f"{sys.executable} -m cluster.client.cli"
        try:
            self.cluster.start_coordinator(self.cluster.address)
        finally:
            del os.environ["TFDIST_POD_AGENT_COMMAND"]


def job_id_of(result) -> str:
    found = re.search(r"tfdist: job (\S+) submitted", result.stderr)
    assert found, result.stderr[-3000:]
    return found.group(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def kube(plane, admin, tmp_path_factory):
    root = tmp_path_factory.mktemp("k8s-engine")
    marker = uuid.uuid4().hex
    kubeconfig, objects = coordinator_rights(plane, admin, NS)
    network = PodNetwork(str(root), subnet="198.19.7")
    kubelets: list[TestKubelet] = []
    cluster = None
    try:
        host = network.join_host()
        env = cli_env(marker)
        kubelets = [TestKubelet(admin, name, {"cpu": "1", "memory": "8Gi", "pods": "10"}, str(root), network=network,
                                env=env).start() for name in NODES]
        port = _free_port()
        os.environ["TFDIST_POD_AGENT_COMMAND"] = f"{sys.executable} -m cluster.client.cli"
        try:
            cluster = LocalCluster(root, marker, listen=f"{host}:{port}", coordinator_args=[
                "--engine", "kubernetes", "--namespace", NS, "--kubeconfig", kubeconfig, "--image", "tfdist-test",
                "--node-selector", "type=test-kubelet", "--pod-start-timeout", "60"])
        finally:
            del os.environ["TFDIST_POD_AGENT_COMMAND"]
        cluster.wait_for(lambda: {a["name"] for a in cluster.listed_agents() if a["state"] == "ALIVE"}
                         >= set(NODES), "the cluster's nodes offered")
        yield Kube(admin, cluster, kubelets, marker)
    finally:
        if cluster is not None:
            cluster.close()
        for kubelet in kubelets:
            kubelet.stop()
        network.remove()
        remove_rights(admin, objects)
        wait_for(lambda: not processes_with_marker(marker), "every process of the module to end", timeout=30)


def test_a_two_node_mwms_job_trains_through_pods_with_identical_weights_and_leaves_nothing(kube, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = kube.launch("--slots", "2", "--distribution", "mwms", "--", sys.executable, TRAIN, "--out", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + json.dumps(kube.cluster.logs())[-6000:]
    placement = kube.cluster.job(job_id_of(result))["placement"]
    assert sorted(p["node"] for p in placement) == list(NODES), placement
    first, second = (np.load(out / f"rank{r}.npz") for r in (0, 1))
    assert sorted(first.files) == sorted(second.files) and first.files
    for name in first.files:
        np.testing.assert_array_equal(first[name], second[name])
    context = json.loads((out / "rank0.json").read_text())
    assert context["size"] == 2, context
    wait_for(lambda: not kube.objects(), "the job's pods, Service and Secret to be deleted", timeout=60,
             logs=kube.objects)


def test_each_run_s_pods_take_connections_from_each_other_alone(kube, tmp_path):
    """Issue 49, Must 4, as objects on the real API server (the test kubelets' network enforces no policy): the
    run's NetworkPolicy, made with it through the shipped RBAC, selects its pods and lets in only them; it goes
    with the run."""
    started = kube.cluster.cli("launch", "--detach", "--slots", "2", "--", sys.executable, "-c",
                               "import time; print('up', flush=True); time.sleep(600)", timeout=120)
    assert started.returncode == 0, started.stderr
    job_id = started.stdout.strip()
    wait_for(lambda: len(kube.pods()) == 2, "the gang's pods", timeout=120)
    policies = [p for p in kube.admin.list(NetworkPolicy, namespace=NS) if (p.metadata.labels or {}).get("tfdist.io/job")]
    assert len(policies) == 1, [p.metadata.name for p in policies]
    spec, pod_labels = policies[0].spec, [p.metadata.labels for p in kube.admin.list(Pod, namespace=NS)
                                          if (p.metadata.labels or {}).get("tfdist.io/job")]
    assert spec.policyTypes == ["Ingress"] and len(spec.ingress) == 1 and len(spec.ingress[0].from_) == 1
    assert spec.ingress[0].from_[0].podSelector.matchLabels == spec.podSelector.matchLabels
    assert all(spec.podSelector.matchLabels.items() <= labels.items() for labels in pod_labels)
    assert kube.cluster.cli("cancel", job_id, timeout=60).returncode == 0
    wait_for(lambda: not kube.objects(), "the run's objects, its NetworkPolicy among them, deleted", timeout=90,
             logs=kube.objects)


def test_ps_mode_runs_chief_worker_and_ps_in_pods_and_ends_with_no_pod_left(kube, tmp_path):
    """The chief's end ends the job: the ps task's pod (it never returns on its own) is deleted with the rest."""
    script = os.path.join(REPO, "tests", "integration", "workers", "ps_fit.py")
    result = kube.launch("--slots", "2", "--distribution", "ps", "--", sys.executable, script)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"\[rank=0\] keras=tf_keras strategy=ParameterServerStrategyV2 iterations=(\d+) expected=\1",
                     result.stdout + result.stderr), result.stdout[-3000:]
    wait_for(lambda: not kube.objects(), "the ps job's pods, Service and Secret to be deleted", timeout=60,
             logs=kube.objects)


def test_a_killed_pod_restarts_the_whole_gang_from_its_checkpoint_as_max_restarts_says(kube, tmp_path):
    """SIGKILL to one pod (its agent and, with it, its workers): the run fails naming the pod, the gang is
    torn down and placed again as the job's next run with new pods, which resume from the checkpoint."""
    from tests.integration.test_restarts import TOTAL_STEPS, steps_by_attempt, trained, write_config

    config = write_config(tmp_path, {"SLOW": 0.2, "SLOW_RUNS": 1}, max_restarts=1)
    launched = __import__("subprocess").Popen(
        [sys.executable, "-m", "cluster.client.cli", "launch", "--config", config], cwd=REPO,
        env=cli_env(kube.marker, **kube.cluster.env), stdout=__import__("subprocess").PIPE,
        stderr=__import__("subprocess").PIPE, text=True)
    try:
        wait_for(lambda: trained(tmp_path, 0) >= 6, "the first run's step 6", timeout=240,
                 alive=lambda: launched.poll() is None)
        victim = next(name for name in kube.pods() if name.endswith("-a0-n1"))
        kube.kill_pod(victim)
        out, err = launched.communicate(timeout=300)
    finally:
        if launched.poll() is None:
            launched.kill()
            launched.communicate()
    assert launched.returncode == 0, err[-4000:]
    assert "lost its pod" in err or f"its pod {victim}" in err, err[-4000:]
    assert "restarting the job (restart 1 of 1)" in err, err[-4000:]
    runs = steps_by_attempt(tmp_path)
    assert sorted(runs) == [0, 1] and min(runs[1]) <= max(runs[0]) + 1
    assert max(runs[1]) == TOTAL_STEPS and min(runs[1]) % 5 == 1, runs  # resumed after a checkpoint (every 5)
    wait_for(lambda: not kube.objects(), "both runs' objects to be deleted", timeout=60, logs=kube.objects)


def test_a_coordinator_killed_re_adopts_its_pods_and_preempt_and_resume_work_as_on_agents(kube, tmp_path):
    """kill -9 mid-run; the coordinator started again lists its pods, their agents register again saying what
    they run, and the run goes on in the same pods (never made twice). Then `tfdist preempt`: every rank stops
    at one step with a checkpoint, the job pauses and its pods go; `tfdist resume`: new pods resume there."""
    from tests.integration.test_restarts import TOTAL_STEPS, steps_by_attempt, stopped_steps, trained, write_config

    # 1.5 s a step in the first run: the pods train on while the coordinator is down (its restart took
    # 16 s on a loaded machine, and a run of 0.3 s steps had ended before the preemption was asked).
    job = kube.cluster.cli("launch", "--detach", "--config", write_config(tmp_path, {"SLOW": 1.5, "SLOW_RUNS": 1}))
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip()
    wait_for(lambda: trained(tmp_path, 0) >= 3, "step 3", timeout=240)
    before = {p.metadata.name: p.metadata.uid for p in kube.admin.list(Pod, namespace=NS)}
    kube.restart_coordinator()
    restarted_at = trained(tmp_path, 0)
    assert restarted_at < TOTAL_STEPS - 4, f"the run reached step {restarted_at} while the coordinator restarted"
    kube.cluster.wait_for(lambda: any(a["state"] == "ALIVE" and a["jobs"] for a in kube.cluster.listed_agents()),
                          "the pods' agents registered again", timeout=60)
    assert {p.metadata.name: p.metadata.uid for p in kube.admin.list(Pod, namespace=NS)} == before, \
        "the pods were not the same ones after the restart"
    assert kube.cluster.cli("preempt", job_id).returncode == 0
    kube.cluster.wait_for(lambda: kube.cluster.job(job_id)["state"] == "PAUSED", "the job to pause", timeout=120)
    stops = stopped_steps(kube.cluster.cli("logs", job_id).stdout)
    assert set(stops) == {0, 1} and len(set(stops.values())) == 1, stops
    wait_for(lambda: not kube.objects(), "the paused job's pods deleted", timeout=60, logs=kube.objects)
    assert kube.cluster.cli("resume", job_id).returncode == 0
    kube.cluster.wait_for(lambda: kube.cluster.job(job_id)["state"] == "SUCCEEDED", "the job to finish", timeout=240)
    runs = steps_by_attempt(tmp_path)
    assert sorted(runs) == [0, 1] and min(runs[1]) == stops[0] + 1, runs  # resumed right after the common step
    assert sorted(s for a in runs for s in runs[a]) == list(range(1, TOTAL_STEPS + 1)), runs  # every step once
    wait_for(lambda: not kube.objects(), "the job's objects to be deleted", timeout=60, logs=kube.objects)


def test_a_single_node_mode_runs_in_one_pod(kube, tmp_path):
    script = os.path.join(REPO, "tests", "integration", "workers", "single_node.py")
    result = kube.launch("--slots", "1", "--distribution", "one_device", "--", sys.executable, script)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "strategy=OneDeviceStrategy replicas=1 size=1" in result.stdout + result.stderr
    wait_for(lambda: not kube.objects(), "its pod deleted", timeout=60, logs=kube.objects)


def test_a_job_no_set_of_nodes_can_hold_is_refused_at_submit_naming_what_fits(kube, tmp_path):
    result = kube.launch("--slots", "3", "--distribution", "mwms", "--", sys.executable, "-c", "pass", timeout=60)
    assert result.returncode == 125 and "Traceback" not in result.stderr, result.stderr  # refused: tfdist's code
    assert "slots_per_trial=3 can never be scheduled on this cluster (2 nodes of 1 slot)" in result.stderr, result.stderr
    assert "Sizes that fit: 1, 2" in result.stderr or "Sizes that fit: 1-2" in result.stderr, result.stderr
    assert not kube.objects()


def test_horovod_runs_across_two_pods_with_one_set_of_weights(kube, tmp_path):
    """Horovod (Gloo) across the pods: its rendezvous on the job store, its hosts the pods' DNS names."""
    script = os.path.join(REPO, "tests", "integration", "workers", "horovod_fit.py")
    result = kube.launch("--slots", "2", "--distribution", "horovod", "--", sys.executable, script)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    digests = {line.split("weights=")[1].split()[0] for line in out.splitlines() if "weights=" in line}
    assert len(digests) == 1 and out.count("loss_fell=True") == 2, out[-3000:]
    wait_for(lambda: not kube.objects(), "the Horovod job's objects to be deleted", timeout=60, logs=kube.objects)


def test_an_asha_search_pauses_a_trial_s_pods_and_resumes_it_in_new_pods_from_its_checkpoint(kube, tmp_path):
    """Issue 33 on the Kubernetes engine: each trial is a gang of pods; a trial paused at its rung gives its node
    up (its pods deleted), the next trial's pods take it, and the promoted trial's new pods continue from the
    checkpoint it paused at (every step trained once); the losing trial is stopped and nothing is left."""
    from tests.integration.test_experiments import trained_steps, write_config

    # Seed 7: trial 1 (learning rate 3.4e-3) beats trial 2 (3.9e-4) at the rung of 8 batches; one trial at a
    # time, so trial 1 waits there alone (paused) until trial 2 loses to it. 0.5 s a step leaves a paused trial
    # 4 s to stop in before its end.
    searcher = {"name": "adaptive_asha", "metric": "val_loss", "max_trials": 2, "max_length": {"batches": 16},
                "max_rungs": 2, "divisor": 2, "mode": "aggressive", "max_concurrent_trials": 1}
    config = write_config(tmp_path, searcher, slow=0.5, reproducibility={"experiment_seed": 7})
    result = kube.launch("--config", config)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "COMPLETED: best: trial 1" in result.stdout, result.stdout[-3000:]
    shown = kube.cluster.json("experiment", "e1")
    first, second = shown["trials"]
    assert first["state"] == "SUCCEEDED" and first["rung"] == 1, shown
    assert second["state"] == "CANCELED" and second["why"].startswith("stopped early"), shown
    runs = trained_steps(tmp_path, first["job_id"])
    paused_at = max(step for attempt, step in runs if attempt == 0)
    assert 8 <= paused_at < 16, runs  # paused at (or just past) its rung, before its end
    assert [step for _, step in runs] == list(range(1, 17)), runs  # every step once, in order
    assert [attempt for attempt, step in runs if step > paused_at] == [1] * (16 - paused_at), runs  # in new pods
    assert max(step for _, step in trained_steps(tmp_path, second["job_id"])) < 16
    for trial in (first, second):
        job = kube.cluster.job(trial["job_id"])
        assert len(job["placement"]) == 1 and job["placement"][0]["node"] in NODES, job
    wait_for(lambda: not kube.objects(), "the trials' pods, Services and Secrets deleted", timeout=60,
             logs=kube.objects)


@pytest.mark.parametrize("mode", ["jax", "torch"])
def test_jax_and_torch_jobs_join_across_two_pods(kube, tmp_path, mode):
    """Issue 34 on the Kubernetes engine: a plain JAX script's `jax.distributed.initialize()` with no arguments,
    and a torchrun DDP script unchanged, each as a gang of two pods that rendezvous on rank 0's pod by its DNS
    name (its Service's), then leave nothing behind."""
    from tests.conftest import WITH_JAX

    if mode == "jax":
        script, args, variables = os.path.join(REPO, "tests", "integration", "workers", "jax_plain.py"), [], WITH_JAX
    else:
        script, args, variables = os.path.join(REPO, "examples", "torch", "ddp.py"), ["--out", str(tmp_path)], {}
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"entrypoint": [sys.executable, script, *args], "resources": {"slots_per_trial": 2},
                                  "distribution": {"mode": mode}, "environment": {"variables": variables}}))
    result = kube.launch("--config", str(config))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:] + json.dumps(kube.cluster.logs())[-4000:]
    placement = kube.cluster.job(job_id_of(result))["placement"]
    assert sorted(p["node"] for p in placement) == list(NODES), placement
    if mode == "jax":
        assert "[rank=0] process 0 of 2 gathered [1, 2]" in out and "[rank=1] process 1 of 2 gathered [1, 2]" in out, \
            out[-3000:]
    else:
        assert "[rank=0] rank 0 of 2 (local 0) done" in out and "[rank=1] rank 1 of 2 (local 0) done" in out, out[-3000:]
        first, second = (np.load(tmp_path / f"rank{r}.npz") for r in (0, 1))
        for name in first.files:
            np.testing.assert_array_equal(first[name], second[name])
    wait_for(lambda: not kube.objects(), f"the {mode} job's pods, Service and Secret deleted", timeout=60,
             logs=kube.objects)
