"""GPU nodes with a stand-in nvidia-smi (8 GPUs): devices are assigned, never shared, and each worker
process sees exactly its own through CUDA_VISIBLE_DEVICES; on a cluster's agents and in a local launch."""

import os

import pytest

from tests.conftest import FAKES, JAX_SITE, REPO, run_cli

pytestmark = [pytest.mark.timeout(180)]
SHOW_DEVICES = os.path.join(REPO, "tests", "integration", "workers", "show_devices.py")


def gpu_env():
    return {"PATH": FAKES + os.pathsep + os.environ["PATH"]}


def launch_env(**extra):
    """A local launch's: the stand-in nvidia-smi, and JAX for the jax mode's check of it."""
    return {**gpu_env(), "PYTHONPATH": REPO + os.pathsep + JAX_SITE, **extra}


def test_packed_jobs_get_disjoint_gpus_and_see_only_them(local_cluster):
    cluster = local_cluster()
    cluster.start_agent("g1", env=gpu_env())  # no --slots: slots are the node's GPUs
    cluster.wait_agents("g1")
    agents = cluster.cli("agents").stdout
    assert "GPU 0-7 (free 0-7)" in agents, agents
    jobs = [cluster.cli("launch", "--detach", "--slots", str(n), "--", SHOW_DEVICES).stdout.strip()
            for n in (2, 1, 1)]
    cluster.wait_for(lambda: all(cluster.job(j)["state"] == "RUNNING" for j in jobs), "the three jobs to run")
    held = {j: [int(g) for g in cluster.job(j)["placement"][0]["gpus"]] for j in jobs}
    assert sorted(g for gpus in held.values() for g in gpus) == [0, 1, 2, 3]  # disjoint, lowest first
    assert [len(held[j]) for j in jobs] == [2, 1, 1]
    for j in jobs:
        cluster.wait_for(lambda: "cuda_visible_devices=" in cluster.cli("logs", j).stdout, f"job {j}'s output")
        out = cluster.cli("logs", j).stdout
        expected = ",".join(map(str, held[j]))
        assert f"[rank=0] cuda_visible_devices={expected} tfdist_gpus={expected} order=PCI_BUS_ID" in out
        assert "[rank=1]" not in out  # one process drives the node's GPUs
        shown = cluster.cli("job", j).stdout
        assert f"GPUs {expected}, ports" in shown, shown
    assert "GPU 0-7 (free 4-7)" in cluster.cli("agents").stdout
    for j in jobs:
        assert cluster.cli("cancel", j).returncode == 0
    cluster.wait_for(lambda: "GPU 0-7 (free 0-7)" in cluster.cli("agents").stdout, "the GPUs to be free")


def test_an_agent_under_a_restricted_cuda_visible_devices_offers_only_those(local_cluster):
    cluster = local_cluster()
    cluster.start_agent("g2", env={**gpu_env(), "CUDA_VISIBLE_DEVICES": "5,GPU-00000006-fake-4000-8000-000000000006"})
    cluster.wait_agents("g2")
    agent = cluster.json("agents")["agents"][0]
    assert agent["slots"] == 2 and [g["index"] for g in agent["gpus"]] == [5, 6]


@pytest.mark.parametrize("mode, expected", [
    # Horovod: one process per GPU, each seeing only its own.
    ("horovod", ["[rank=0] cuda_visible_devices=0 tfdist_gpus=0", "[rank=1] cuda_visible_devices=1 tfdist_gpus=1"]),
    # Parameter servers: one worker task per GPU; the chief and the ps task see none.
    ("ps", ["[rank=0] cuda_visible_devices= tfdist_gpus= ", "[rank=1] cuda_visible_devices=0 tfdist_gpus=0",
            "[rank=2] cuda_visible_devices=1 tfdist_gpus=1", "[rank=3] cuda_visible_devices= tfdist_gpus= "]),
])
def test_modes_with_a_process_per_gpu_pin_each_to_its_device(local_cluster, mode, expected):
    cluster = local_cluster()
    cluster.start_agent("g1", env={**gpu_env(), "CUDA_VISIBLE_DEVICES": "0,1"})
    cluster.wait_agents("g1")
    job = cluster.cli("launch", "--detach", "--slots", "2", "--distribution", mode, "--", SHOW_DEVICES).stdout.strip()
    cluster.wait_for(lambda: all(line in cluster.cli("logs", job).stdout for line in expected),
                     f"every {mode} process's devices")
    assert cluster.cli("cancel", job).returncode == 0


@pytest.mark.parametrize("mode", ["mwms", "jax"])
def test_a_local_launch_on_a_gpu_machine_gives_its_slots_gpus(marker, mode):
    """As an agent offers its GPUs as its slots: one process drives the job's GPUs in these modes."""
    result = run_cli(["launch", "--slots", "2", "--distribution", mode, "--", "python", SHOW_DEVICES, "--then-exit"],
                     marker, timeout=120, **launch_env(TFDIST_FAKE_GPUS="4"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[rank=0] cuda_visible_devices=0,1 tfdist_gpus=0,1 order=PCI_BUS_ID slots=2" in result.stdout, result.stdout
    assert "[rank=1]" not in result.stdout and "warning" not in result.stderr, result.stderr


def test_a_local_launch_takes_the_gpus_its_own_cuda_visible_devices_leaves(marker):
    result = run_cli(["launch", "--slots", "1", "--distribution", "jax", "--", "python", SHOW_DEVICES, "--then-exit"],
                     marker, timeout=120, **launch_env(CUDA_VISIBLE_DEVICES="GPU-00000003-fake-4000-8000-000000000003"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[rank=0] cuda_visible_devices=3 tfdist_gpus=3 order=PCI_BUS_ID slots=1" in result.stdout, result.stdout


def test_a_local_launch_of_more_slots_than_gpus_runs_cpu_slots_and_says_so(marker):
    result = run_cli(["launch", "--slots", "3", "--distribution", "horovod", "--", "python", SHOW_DEVICES,
                      "--then-exit"], marker, timeout=120, **launch_env(TFDIST_FAKE_GPUS="2"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("tfdist: warning: --slots 3 is more than this machine's 2 GPUs: the workers run on CPU slots and see "
            "no GPU; --slots 2 or fewer trains on the GPUs\n") in result.stderr
    for rank in range(3):
        assert f"[rank={rank}] cuda_visible_devices= tfdist_gpus=None order=None slots=3" in result.stdout, result.stdout
