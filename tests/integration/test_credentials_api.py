"""Issue 49, Must 3: credentials without a shell on the coordinator's host. An admin credential issues, lists
and revokes users' credentials over a running coordinator's API with `tfdist credentials` (real gRPC, a real
agent running a job); revoking one user refuses exactly that user's earlier credentials, at once and after the
coordinator restarts, while other users, the node and its running job go on; a user cannot issue."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from cluster.agent.ports import lease_range
from cluster.coordinator.values import Settings
from cluster.shared.credentials import DAY, Authority, Credential
from cluster.shared.model import JobState
from tests.agent_core import AgentsServer
from tests.conftest import cli_env, run_cli, stop_processes, wait_for
from tests.engines.scenarios import SLEEPS
from tests.specs import flat_spec
from tests.unit.test_json_output import valid

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def start(state: str, authority: Authority):
    return AgentsServer(state, "127.0.0.1:0", authority=authority,
                        settings=Settings(port_range=lease_range(), lost_after=30.0)).start()


def start_agent(server, tmp_path, marker) -> subprocess.Popen:
    """`tfdist agent` a1 (2 slots) with a node credential of the server's, its log in tmp_path/agent.log."""
    node = server.issue("node", "a1").save(str(tmp_path / "node.json"))
    return subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "agent", "--coordinator", server.address,
                             "--name", "a1", "--credentials", node, "--slots", "2"], env=cli_env(marker),
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "agent.log", "a"))


def test_an_admin_issues_lists_and_revokes_over_the_api_and_only_the_revoked_user_is_refused(tmp_path, marker):
    authority, state = Authority.load_or_create(str(tmp_path / "credentials"))[0], str(tmp_path / "state")
    server = start(state, authority)
    agent = None
    try:
        admin = server.issue("admin", "root").save(str(tmp_path / "admin.json"))
        agent = start_agent(server, tmp_path, marker)

        def tfdist(*args, credential=admin):
            return run_cli([*args, "--coordinator", server.address, "--credentials", credential], marker,
                           cwd=str(tmp_path), timeout=120)

        issued = tfdist("credentials", "--user", "alice", "--user", "bob", "--days", "30")
        assert issued.returncode == 0, issued.stderr
        alice, bob = str(tmp_path / "user-alice.json"), str(tmp_path / "user-bob.json")
        for path in (alice, bob):
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        expires = int(Credential.load(alice).token.split(":")[4])
        assert abs(expires - (time.time() + 30 * DAY)) < 120
        again = tfdist("credentials", "--user", "alice")  # its file is there: nothing issued, nothing overwritten
        assert again.returncode != 0 and "user-alice.json exists" in again.stderr and "Traceback" not in again.stderr

        job_id, _ = server.core.submit(flat_spec((sys.executable, "-c", SLEEPS), slots=2, working_dir=str(tmp_path)),
                                       now=time.time())
        wait_for(lambda: server.core.store.job(job_id).state == JobState.RUNNING, "the node's job running", timeout=120,
                 logs=lambda: str(server.core.store.job(job_id)))
        assert tfdist("jobs", credential=alice).returncode == 0

        revoked_at = time.time()
        revoked = tfdist("credentials", "--revoke", "user:alice")
        assert revoked.returncode == 0 and "revoked user alice" in revoked.stdout, revoked.stderr
        refused = tfdist("jobs", credential=alice)
        assert refused.returncode != 0 and "user credential alice was revoked" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
        assert tfdist("jobs", credential=bob).returncode == 0  # another user: untouched
        wait_for(lambda: server.core.agents["a1"].last_heartbeat > revoked_at, "the node's next report after it",
                 timeout=60)  # the node's credential: untouched
        assert server.core.store.job(job_id).state == JobState.RUNNING and not server.core.agents["a1"].lost

        forbidden = tfdist("credentials", "--user", "mallory", credential=bob)  # a user issues nothing
        assert forbidden.returncode != 0 and "needs an admin credential" in forbidden.stderr
        assert not os.path.exists(tmp_path / "user-mallory.json")

        listed = tfdist("credentials", "--list", "--json")
        assert listed.returncode == 0, listed.stderr
        shown = valid(json.loads(listed.stdout), "tfdist credentials --list --json")  # docs/json.md's schema
        assert {(i["name"], i["revoked"]) for i in shown["issued"] if i["kind"] == "user"} == {("alice", True),
                                                                                               ("bob", False)}
        assert [(r["kind"], r["name"]) for r in shown["revoked"]] == [("user", "alice")]
        anew = tfdist("credentials", "--user", "alice", "-o", "alice-again.json")
        assert anew.returncode == 0, anew.stderr
        assert tfdist("jobs", credential=str(tmp_path / "alice-again.json")).returncode == 0

        server.core.cancel(job_id, time.time())
        wait_for(lambda: not server.core.allocs.all(), "the node let go of the canceled job", timeout=60)
        server.stop(grace=0, engine_timeout=20)  # the coordinator restarts on its state: the book holds
        server = start(state, authority)
        assert stat.S_IMODE(os.stat(tmp_path / "credentials" / "book.json").st_mode) == 0o600  # beside the secret
        assert tfdist("jobs", credential=alice).returncode != 0
        assert tfdist("jobs", credential=str(tmp_path / "alice-again.json")).returncode == 0
        assert tfdist("jobs", credential=bob).returncode == 0
    finally:
        server.stop(grace=0, engine_timeout=20)
        stop_processes([agent])


def test_a_revoked_node_is_lost_though_its_beacons_go_on_and_its_agent_stops(tmp_path, marker):
    """A node's beacons carry no token: they keep it alive only while the credential it last called with holds
    (review of issue 49's change: a revoked node's beacons kept it alive, its jobs never failed)."""
    authority = Authority.load_or_create(str(tmp_path / "credentials"))[0]
    server = AgentsServer(str(tmp_path / "state"), "127.0.0.1:0", authority=authority,
                          settings=Settings(port_range=lease_range(), lost_after=4.0)).start()
    agent = None
    try:
        admin = server.issue("admin", "root").save(str(tmp_path / "admin.json"))
        agent = start_agent(server, tmp_path, marker)
        wait_for(lambda: "a1" in server.core.agents and server.core.agents["a1"].beaconing, "a1 on beacons",
                 timeout=60, logs=lambda: (tmp_path / "agent.log").read_text())
        revoked = run_cli(["credentials", "--revoke", "node:a1", "--coordinator", server.address, "--credentials",
                           admin], marker, cwd=str(tmp_path), timeout=120)
        assert revoked.returncode == 0, revoked.stderr
        wait_for(lambda: server.core.agents["a1"].lost, "the revoked node declared lost", timeout=60)
        assert agent.wait(timeout=60) != 0  # it stops: its credential will not be accepted again
        assert "refused this node's credential" in (tmp_path / "agent.log").read_text()
    finally:
        server.stop(grace=0, engine_timeout=20)
        stop_processes([agent])
