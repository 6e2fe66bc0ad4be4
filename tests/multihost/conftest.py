"""Hosts in network namespaces (198.18.0.0/24, joined by a bridge in a hub namespace), and a
tfdist cluster on them: coordinator on one host, agents on the others, real gRPC between them."""

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, cli_env, stop_processes

SUBNET = "198.18.0"
_counter = itertools.count()


def _ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Host:
    def __init__(self, ns: str, ip: str):
        self.ns, self.ip = ns, ip

    def command(self, args):
        return ["ip", "netns", "exec", self.ns, sys.executable, "-m", "cluster.client.cli", *args]

    def popen(self, args, marker, log_path):
        log = open(log_path, "ab")
        return subprocess.Popen(self.command(args), env=cli_env(marker), cwd=REPO, stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL)

    def run(self, args, marker, timeout=120, **env):
        return subprocess.run(self.command(args), env=cli_env(marker, **env), cwd=REPO, capture_output=True,
                              text=True, timeout=timeout)


@contextlib.contextmanager
def make_hosts(names=("c", "a1", "a2")):
    """Hosts c (.1), a1 (.2), a2 (.3) on one bridge; removed afterwards, whatever happened."""
    tag = f"tfd{os.getpid() % 10000}x{next(_counter)}"
    hub = f"{tag}h"
    made = []
    try:
        _ip("netns", "add", hub)
        made.append(hub)
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "link", "set", "br0", "up")
        result = {}
        for i, name in enumerate(names):
            ns = f"{tag}{name}"
            _ip("netns", "add", ns)
            made.append(ns)
            outer = f"{tag}{name}v"
            _ip("link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", outer, "netns", hub)
            _ip("-n", hub, "link", "set", outer, "master", "br0", "up")
            ip = f"{SUBNET}.{i + 1}"
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            result[name] = Host(ns, ip)
        yield result
    finally:
        for ns in reversed(made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


@pytest.fixture
def hosts():
    """Three hosts: c (coordinator, .1), a1 (.2), a2 (.3)."""
    with make_hosts() as made:
        yield made


class Cluster:
    def __init__(self, hosts, tmp_path, marker, slots_per_agent):
        self.hosts, self.tmp, self.marker = hosts, tmp_path, marker
        self.address = f"{hosts['c'].ip}:7470"
        # What an admin does once: the cluster's CA and certificate, one credential per node and user.
        self.credentials_dir = str(tmp_path / "credentials")
        made = hosts["c"].run(["credentials", self.credentials_dir, "--node", "a1", "--node", "a2", "--user", "tester",
                               "--coordinator", self.address], marker)
        assert made.returncode == 0, made.stderr
        self.user_credential = self.credential("user", "tester")
        self.state_dir = str(tmp_path / "state")
        self.procs: dict[str, subprocess.Popen] = {}
        self.start_coordinator()
        for name in ("a1", "a2"):
            self.procs[name] = hosts[name].popen(
                ["agent", "--credentials", self.credential("node", name), "--slots", str(slots_per_agent)], marker,
                tmp_path / f"{name}.log")
        self.wait_for(lambda: [a["state"] for a in self.json("agents")["agents"]] == ["ALIVE", "ALIVE"], "agents to register")

    def start_coordinator(self):
        self.procs["c"] = self.hosts["c"].popen(
            ["coordinator", "--listen", self.address, "--state-dir", self.state_dir, "--credentials-dir",
             self.credentials_dir, "--lost-after", "4", "--heartbeat-interval", "0.5"], self.marker,
            self.tmp / "coordinator.log")

    def credential(self, kind, name) -> str:
        return os.path.join(self.credentials_dir, "issued", f"{kind}-{name}.json")

    def cli(self, *args, timeout=180):
        """Runs a client command on the coordinator's host."""
        command, *rest = args  # flags go before any `--`
        return self.hosts["c"].run([command, "--coordinator", self.address, "--credentials", self.user_credential,
                                    *rest], self.marker, timeout)

    def json(self, *args):
        result = self.cli(args[0], "--json", *args[1:])
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def wait_for(self, predicate, what, timeout=60):
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except AssertionError as e:
                last_error = e
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what} ({last_error}); logs: {self.logs()}")

    def logs(self):
        return {p.name: p.read_text()[-2000:] for p in self.tmp.glob("*.log")}

    def kill(self, name, sig=signal.SIGKILL):
        self.procs[name].send_signal(sig)
        self.procs[name].wait(timeout=30)

    def close(self):
        stop_processes(self.procs.values())


@pytest.fixture
def make_cluster(hosts, tmp_path, marker):
    made = []

    def make(slots_per_agent=2):
        cluster = Cluster(hosts, tmp_path, marker, slots_per_agent)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()
