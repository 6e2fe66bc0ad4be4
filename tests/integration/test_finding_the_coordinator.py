"""Every client command finds its coordinator in one order (issue 30, Measured 5; docs/cluster.md): --coordinator,
$TFDIST_COORDINATOR, the credential's own, this user's coordinators on this machine. Measured: `tfdist launch
--credentials user-alice.json --slots 2 --detach -- sleep 60` said "--detach needs --coordinator or --slurm"
although the credential names its coordinator and `tfdist jobs --credentials user-alice.json` found it.
A real coordinator and agent over TLS; the commands are the real CLI."""

import json
import os

import pytest

from cluster.shared.credentials import Authority
from tests.conftest import run_cli

pytestmark = [pytest.mark.timeout(180)]


@pytest.fixture
def cluster(local_cluster, tmp_path, monkeypatch):
    runtime = tmp_path / "runtime"  # this coordinator alone publishes here (other tests' run beside it)
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("TFDIST_RUNTIME_DIR", str(runtime))
    cluster = local_cluster()
    cluster.start_agent("n1", "--slots", "2")
    cluster.wait_agents("n1")
    return cluster


def user_credential(cluster, name, coordinator) -> str:
    path = str(cluster.tmp / f"user-{name}.json")
    Authority.load(os.path.join(cluster.state_dir, "credentials")).issue("user", name, coordinator).save(path)
    return path


def cli(cluster, *args, **env):
    """The CLI with nothing of the test run's own coordinator settings: only what the case gives."""
    env.setdefault("TFDIST_COORDINATOR", "")
    env.setdefault("TFDIST_CREDENTIALS", "")
    env.setdefault("TFDIST_RUNTIME_DIR", str(cluster.tmp / "empty-runtime"))  # no local coordinator to find
    return run_cli(list(args), cluster.marker, timeout=120, **env)


def test_launch_detach_takes_the_coordinator_from_the_credential(cluster):
    alice = user_credential(cluster, "alice", cluster.address)
    done = cli(cluster, "launch", "--credentials", alice, "--slots", "2", "--detach", "--", "true")
    assert done.returncode == 0, done.stderr  # on main: "--detach needs --coordinator or --slurm", 2
    job_id = done.stdout.strip()
    shown = cli(cluster, "job", job_id, "--json", TFDIST_CREDENTIALS=alice)  # the same file, from the environment
    assert shown.returncode == 0 and json.loads(shown.stdout)["owner"] == "alice", shown.stderr


def test_the_flag_comes_before_the_environment_and_both_before_the_credential(cluster):
    nowhere = "127.0.0.1:9"  # nothing listens there: whoever answers was asked elsewhere
    named_nowhere = user_credential(cluster, "bob", nowhere)
    by_flag = cli(cluster, "jobs", "--json", "--credentials", named_nowhere, "--coordinator", cluster.address,
                  TFDIST_COORDINATOR=nowhere)
    assert by_flag.returncode == 0, by_flag.stderr
    by_env = cli(cluster, "jobs", "--json", "--credentials", named_nowhere, TFDIST_COORDINATOR=cluster.address)
    assert by_env.returncode == 0, by_env.stderr
    by_credential = cli(cluster, "jobs", "--json", "--credentials", named_nowhere)
    assert by_credential.returncode != 0 and nowhere in by_credential.stderr, by_credential.stderr


def test_without_flag_environment_or_credential_a_local_coordinator_answers(cluster):
    """The last in the order: the user's own coordinator daemon, found in the runtime directory it publishes in."""
    done = cli(cluster, "agents", "--json", TFDIST_RUNTIME_DIR=str(cluster.tmp / "runtime"))
    assert done.returncode == 0 and [a["name"] for a in json.loads(done.stdout)["agents"]] == ["n1"], done.stderr


def test_detach_with_nothing_naming_a_coordinator_says_what_would(cluster):
    done = cli(cluster, "launch", "--slots", "1", "--detach", "--", "true")
    assert done.returncode == 125 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("tfdist launch: --detach needs a coordinator that outlives the launch: "
                                  "--coordinator HOST:PORT, $TFDIST_COORDINATOR, or a --credentials file"), done.stderr


def test_a_credential_naming_no_coordinator_says_so(cluster):
    anonymous = user_credential(cluster, "carol", "")
    done = cli(cluster, "launch", "--credentials", anonymous, "--detach", "--", "true")
    assert done.returncode == 125 and done.stderr == (
        f"tfdist: error: {anonymous} names no coordinator; pass --coordinator HOST:PORT\n"), done.stderr
