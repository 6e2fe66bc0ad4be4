"""The job's store seen from the job's other host by another user (nobody, through setpriv): it listens
on the job's address only, refuses every request without the run's secret, and a rank's next key
poisoned from there does not change what the job reads."""

import json
import os
import re
import subprocess
import time

import pytest

from tests.conftest import cli_env
from tests.other_user import NOBODY, runnable_python

pytestmark = [pytest.mark.multihost, pytest.mark.timeout(300)]
VICTIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "store_victim.py")
ATTACK = """
import http.client, sys
host, port = sys.argv[1].rsplit(":", 1)
for method, path in [("GET", "/tfdist/1-0"), ("PUT", "/tfdist/2-3"), ("PUT", "/x/tfdist/2-3"),
                     ("PUT", "/" + "0" * 64 + "/tfdist/2-3"), ("DELETE", "/tfdist/1-0")]:
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    c.request(method, path, body=b'"poisoned"' if method == "PUT" else None)
    r = c.getresponse()
    print(method, path, r.status, r.read()[:60])
"""


def test_another_user_on_the_other_host_cannot_read_or_poison_the_store(make_cluster, hosts, tmp_path):
    cluster = make_cluster(slots_per_agent=2)
    out = tmp_path / "out"
    out.mkdir()
    launch = subprocess.Popen(
        hosts["c"].command(["launch", "--coordinator", cluster.address, "--credentials", cluster.user_credential,
                            "--slots", "4", "--", VICTIM, str(out)]),
        env=cli_env(cluster.marker), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not (out / "store").exists() and launch.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (out / "store").exists(), f"the job never reached its pause: {cluster.logs()}"
        store = (out / "store").read_text()
        host, port = store.rsplit(":", 1)
        assert host == hosts["a1"].ip  # node 0's address for the job
        listening = subprocess.run(["ip", "netns", "exec", hosts["a1"].ns, "ss", "-ltnH", f"sport = :{port}"],
                                   capture_output=True, text=True, timeout=30).stdout.split()
        assert f"{hosts['a1'].ip}:{port}" in listening and f"0.0.0.0:{port}" not in listening, listening
        attack = subprocess.run(["ip", "netns", "exec", hosts["a2"].ns, *NOBODY, runnable_python(), "-c", ATTACK,
                                 store], capture_output=True, text=True, timeout=60, env=cli_env(cluster.marker))
        statuses = [line.split()[2] for line in attack.stdout.splitlines()]
        assert statuses == ["403"] * 5, attack.stdout + attack.stderr
        (out / "go").touch()
        stdout, stderr = launch.communicate(timeout=180)
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.communicate(timeout=30)
    assert launch.returncode == 0, stderr[-3000:] + str(cluster.logs())
    got = {r["rank"]: r for r in (json.loads(m) for m in re.findall(r"RESULT (\{.*\})", stdout))}
    assert sorted(got) == [0, 1, 2, 3]
    for r in got.values():
        assert r["first"] == [0, 1, 2, 3] and r["second"] == [f"rank {i}" for i in range(4)]
