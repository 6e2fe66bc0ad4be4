"""Keras 3 on JAX and a torchrun DDP script across two hosts (network namespaces), under real agents: the
framework's rendezvous is served by rank 0 at the first node's address for the job, on a port its agent
leased (on one machine: tests/integration/test_jax_torch.py). Measured 1 of issue 34: nothing a JAX or torch
process reads reached it; now keras.io's LayoutMap script, unchanged but for the multi-process
`keras.distribution.initialize()` Keras asks for, shards its Dense layers over both hosts, and a DDP script
written for torchrun trains across them, each with one set of weights."""

import os
import sys

import pytest
import yaml

from tests.conftest import WITH_JAX
from tests.integration.test_jax_torch import KERAS_JAX, TORCH_DDP, same_weights

pytestmark = [pytest.mark.multihost, pytest.mark.timeout(300)]


def _placement(cluster, result):
    job = cluster.json("jobs")["jobs"][0]
    assert job["state"] == "SUCCEEDED", (job, result.stderr[-3000:])
    return cluster.json("job", job["id"])["placement"]


@pytest.mark.parametrize("mode, script, args", [("jax", KERAS_JAX, ["--model-parallel"]), ("torch", TORCH_DDP, [])])
def test_a_two_host_job_trains_with_one_set_of_weights(make_cluster, tmp_path, mode, script, args):
    cluster = make_cluster(slots_per_agent=1)
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(tmp_path, 0o755)
    config = tmp_path / "job.yaml"  # the agents' workers get the config's variables (JAX sits beside the venv)
    config.write_text(yaml.safe_dump({"entrypoint": [sys.executable, script, *args, "--out", str(out)],
                                      "resources": {"slots_per_trial": 2}, "distribution": {"mode": mode},
                                      "environment": {"variables": WITH_JAX if mode == "jax" else {}}}))
    os.chmod(config, 0o644)
    result = cluster.cli("launch", "--config", str(config), timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + str(cluster.logs())
    placement = _placement(cluster, result)
    assert sorted((p["node"], p["address"]) for p in placement) == [("a1", "198.18.0.2"), ("a2", "198.18.0.3")]
    weights = same_weights(out)
    if mode == "jax":
        assert weights["d1.kernel"].shape == (784, 200)  # gathered whole from both hosts' shards
