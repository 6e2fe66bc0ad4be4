"""Determined's Core API tutorial stage 4 across two hosts (network namespaces), under real agents: a script that
imports `determined` and names no launcher runs once per node (mode per_node) with every slot of its node, starts
its own workers, and the two nodes' workers meet through the job's store on node 0's address (on one machine:
tests/integration/test_determined.py::test_stage_4_its_own_launcher_runs_once_per_node_and_its_workers_meet)."""

import json
import os
import re

import pytest
import yaml

from tests.integration.test_determined import SCRIPTS

pytestmark = [pytest.mark.multihost, pytest.mark.timeout(300)]
LAUNCHER = os.path.join(SCRIPTS, "count_launcher.py")


def test_stage_4_runs_one_launcher_per_host_and_their_workers_meet(make_cluster, tmp_path):
    cluster = make_cluster(slots_per_agent=2)
    storage = tmp_path / "checkpoints"  # one filesystem under both hosts: the chief's checkpoints
    storage.mkdir()
    config = tmp_path / "4_distributed.yaml"
    config.write_text(yaml.safe_dump({
        "name": "core-api-stage-4", "entrypoint": f"python3 {LAUNCHER} launcher",
        "resources": {"slots_per_trial": 4}, "hyperparameters": {"increment_by": 3},
        "searcher": {"name": "single", "metric": "x"}, "max_restarts": 0,
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)}}))
    result = cluster.cli("launch", "--config", str(config), timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + str(cluster.logs())
    job_id = re.search(r"tfdist: job (\S+) submitted", result.stderr).group(1)
    job = cluster.json("job", job_id)
    assert job["state"] == "SUCCEEDED" and job["distribution"]["mode"] == "per_node", job
    assert sorted((p["node"], p["address"]) for p in job["placement"]) == [("a1", "198.18.0.2"), ("a2", "198.18.0.3")]

    logs = cluster.cli("logs", job_id).stdout
    launchers = re.findall(r"launcher on node (\d) of 2: 2 workers at \d+, container_addrs (\[.*\])", logs)
    assert sorted(node for node, _ in launchers) == ["0", "1"], logs[-3000:]  # one launcher per host
    nodes = [p["address"] for p in sorted(job["placement"], key=lambda p: p["node_rank"])]
    for _, addrs in launchers:  # each node sees both hosts' addresses, node 0's (the chief's) first
        assert json.loads(addrs) == nodes, (addrs, nodes)
    for rank in range(4):  # each worker added all 4 workers' increment (3) 30 times: they met across hosts
        assert f"[rank={rank}] worker {rank} of 4 done: x=360" in logs, logs[-3000:]
    metrics = [json.loads(line) for line in cluster.cli("metrics", job_id, "--json").stdout.splitlines()]
    assert [(m["step"], m["metrics"]["x"]) for m in metrics if "x" in m["metrics"]] == \
        [(10, 120.0), (20, 240.0), (30, 360.0)]
    assert len(list(storage.glob(f"{job_id}/*/state"))) == 3, list(storage.rglob("*"))
