"""Another user on the coordinator's own machine (setpriv to nobody) reaches its /metrics over loopback and
gets nothing without a token (401), nothing with a node's (403), and finds no token to use: the
credentials the coordinator made and published are not theirs to read."""

import os
import subprocess

import pytest

from tests.other_user import NOBODY, runnable_python

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
# A Python nobody can run (tests/other_user.py): the clone's venv need not be readable by nobody. Prints the HTTP status, or why none.
GET = """
import ssl, sys, urllib.error, urllib.request
context = ssl.create_default_context(); context.check_hostname = False; context.verify_mode = ssl.CERT_NONE
headers = {"Authorization": "Bearer " + sys.argv[2]} if len(sys.argv) > 2 else {}
try:
    print(urllib.request.urlopen(urllib.request.Request(sys.argv[1], headers=headers), timeout=10, context=context).status)
except urllib.error.HTTPError as e:
    print(e.code)
"""


def as_nobody(*command):
    return subprocess.run([*NOBODY, *command], capture_output=True, text=True, timeout=60, cwd="/")


def test_another_local_user_cannot_scrape_the_coordinator(local_cluster):
    from cluster.shared.credentials import Authority

    assert os.geteuid() == 0, "acting as another user (setpriv) needs root, as make test runs"
    cluster = local_cluster()
    banner = cluster.coordinator.stdout.readline()  # "tfdist: Prometheus metrics on https://127.0.0.1:P/metrics ..."
    assert "Prometheus metrics on https://127.0.0.1:" in banner, banner
    url = banner.split(" on ")[1].split()[0]
    credentials = os.path.join(cluster.state_dir, "credentials")
    node = Authority.load(credentials).issue("node", "n1")

    assert as_nobody(runnable_python(), "-c", GET, url).stdout.strip() == "401"
    assert as_nobody(runnable_python(), "-c", GET, url, node.token).stdout.strip() == "403"
    assert as_nobody(runnable_python(), "-c", GET, url, "tfd1:monitor:nobody:forged").stdout.strip() == "401"
    for secret in (os.path.join(credentials, "secret"), os.environ["TFDIST_RUNTIME_DIR"]):
        assert os.path.exists(secret), secret
        read = as_nobody("/bin/ls", secret) if os.path.isdir(secret) else as_nobody("/bin/cat", secret)
        assert read.returncode != 0, f"nobody read {secret}: {read.stdout[:200]}"
