"""An experiment, and the jax and torch modes, inside a Slurm allocation (their own module, so this Slurm
cluster runs on another pytest worker than tests/slurm/test_slurm.py's, off that module's long path): trials
share the allocation's nodes; JAX and torch processes join across its nodes."""

import os
import re
import sys

import pytest
import yaml

from tests.conftest import JAX_SITE, REPO, processes_with_marker
from tests.slurm.cluster import SlurmCluster
from tests.slurm.test_slurm import job_output, sbatch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with SlurmCluster(tmp_path_factory.mktemp("slurm-experiments"), nodes=2, cpus=2) as cluster:
        yield cluster


def test_an_experiments_horovod_trials_share_the_allocations_nodes(slurm, tmp_path, marker):
    """A random search inside an sbatch script: two 2-slot Horovod trials at once, one on each node."""
    (tmp_path / "search.yaml").write_text(yaml.safe_dump({
        "name": "search", "entrypoint": f"{sys.executable} {os.path.join(REPO, 'tests', 'integration', 'workers', 'search_trial.py')}",
        "resources": {"slots_per_trial": 2}, "distribution": {"mode": "horovod"},
        "searcher": {"name": "random", "metric": "val_loss", "max_trials": 2, "max_concurrent_trials": 2,
                     "max_length": {"batches": 3}},
        "hyperparameters": {"learning_rate": {"type": "log", "base": 10, "minval": -4, "maxval": -1}},
        "checkpoint_storage": str(tmp_path / "checkpoints"),
        "environment": {"variables": [f"OUT={tmp_path}", "SLOW=0.1"]}}))
    result = sbatch(slurm, tmp_path, marker, f"""
        {sys.executable} -m cluster.client.cli launch --config {tmp_path / 'search.yaml'}
        """, "--nodes=2", "--ntasks-per-node=2")
    out = job_output(tmp_path)
    assert result.returncode == 0, out[-3000:]
    assert ": 2 node(s) (node1, node2), 2 slot(s) per trial" in out
    assert " COMPLETED: best: trial " in out and "2 of 2 trials made, 2 ended" in out, out[-3000:]
    trials = re.findall(r"^([12]) +(\S+) +SUCCEEDED ", out, re.M)
    assert {n for n, _ in trials} == {"1", "2"}, out[-3000:]
    for _, job_id in set(trials):  # each trial's chief trained steps 1-3 once
        assert (tmp_path / f"steps-{job_id}").read_text().split("\n")[:3] == ["0 1", "0 2", "0 3"]
    assert not processes_with_marker(marker)


@pytest.mark.parametrize("mode", ["jax", "torch"])
def test_jax_and_torch_processes_join_across_the_allocations_nodes(slurm, tmp_path, marker, mode):
    """Inside an allocation every srun task carries Slurm's variables, which JAX's own Slurm detection would
    read (a coordinator on a port nobody leased, a process count of the allocation's): tfdist's job comes first.
    A torchrun script gets the same environment as on agents."""
    script = {"jax": os.path.join(REPO, "tests", "integration", "workers", "jax_plain.py"),
              "torch": os.path.join(REPO, "examples", "torch", "ddp.py")}[mode]
    result = sbatch(slurm, tmp_path, marker, f"""
        export PYTHONPATH={JAX_SITE}
        {sys.executable} -m cluster.client.cli launch --distribution {mode} -- {sys.executable} {script}
        """, "--nodes=2", "--ntasks-per-node=1")
    out = job_output(tmp_path)
    assert result.returncode == 0, out[-3000:]
    assert ": 2 node(s) (node1, node2), 2 slot(s)" in out, out[-3000:]
    if mode == "jax":
        assert "process 0 of 2 gathered [1, 2]" in out and "process 1 of 2 gathered [1, 2]" in out, out[-3000:]
    else:
        assert "rank 0 of 2 (local 0) done" in out and "rank 1 of 2 (local 0) done" in out, out[-3000:]
    assert not processes_with_marker(marker)
