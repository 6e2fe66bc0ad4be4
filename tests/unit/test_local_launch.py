"""A local launch's own path: it submits and follows in-process (no gRPC, TLS or Prometheus before its job
ended), and serves the same answers over gRPC, a moment later, to its user's other terminals."""

import subprocess
import sys

from tests.conftest import REPO, cli_env, wait_for

CODE = r"""
import sys
from cluster.client import cli, launch
launch.SERVE_AFTER = 3600.0  # the front for other terminals never starts: what the launch itself needs
code = cli.main(["launch", "--slots", "2", "--", sys.executable, "-c", "print('hi')"])
heavy = sorted(m for m in ("grpc", "cryptography", "prometheus_client") if m in sys.modules)
print("HEAVY", ",".join(heavy) or "-", "CODE", code)
"""


def test_a_local_launch_runs_its_job_without_grpc_tls_or_prometheus(marker, tmp_path):
    env = cli_env(marker, TFDIST_RUNTIME_DIR=str(tmp_path / "run"), XDG_STATE_HOME=str(tmp_path / "state"))
    done = subprocess.run([sys.executable, "-c", CODE], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "HEAVY - CODE 0", done.stdout + done.stderr
    assert "[rank=0] hi" in done.stdout and "[rank=1] hi" in done.stdout


def test_the_in_process_answers_are_the_grpc_servers(marker, tmp_path, monkeypatch):
    """The same job, the same log page, the same job list, in-process and from another terminal over gRPC
    (TLS, the published credential), once the launch serves it."""
    monkeypatch.setenv("TFDIST_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("TFDIST_TEST_MARKER", marker)
    from cluster.client import launch
    from cluster.shared import jobspec
    from cluster.shared.auth import published
    from cluster.shared.config import config_from_dict
    from cluster.shared.rpc import Client

    monkeypatch.setattr(launch, "SERVE_AFTER", 0.0)
    config = config_from_dict({"entrypoint": f"{sys.executable} -c \"print('hi')\"",
                               "resources": {"slots_per_trial": 1}})
    embedded = launch.EmbeddedCluster(1, str(tmp_path / "coordinator"))
    try:
        local = embedded.client
        job_id = local.submit(jobspec.to_pb(jobspec.job_spec(config, submission_id="s1")))
        wait_for(lambda: local.job(job_id).state == "SUCCEEDED", f"job {job_id} to succeed", timeout=60)
        wait_for(lambda: embedded._published is not None, "the launch to publish its coordinator", timeout=60)
        [(_, credential)] = published()
        remote = Client(credential.coordinator, credential)
        try:
            mine, theirs = local.job(job_id), remote.job(job_id)
            assert mine == theirs and mine.owner and mine.exits
            assert local.logs(job_id) == remote.logs(job_id) and [l.text for l in local.logs(job_id).lines] == ["hi"]
            assert list(local.jobs()) == list(remote.jobs()) and len(local.jobs()) == 1
        finally:
            remote.close()
    finally:
        embedded.close()
    assert published() == []  # unpublished on close
