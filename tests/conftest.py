"""Shared test helpers: run the real `tfdist` CLI and prove no process is left behind."""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER_VAR = "TFDIST_TEST_MARKER"


def processes_with_marker(marker: str) -> list[int]:
    """PIDs whose environment carries `marker`: everything a test started, however deep."""
    needle = f"{MARKER_VAR}={marker}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


@pytest.fixture
def marker():
    """A unique marker for the processes a test starts; fails the test if any outlive it."""
    value = uuid.uuid4().hex
    yield value
    deadline = time.monotonic() + 15
    while (left := processes_with_marker(value)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes left behind: {left}"


def cli_env(marker: str, **extra) -> dict:
    env = dict(os.environ)
    env[MARKER_VAR] = marker
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(extra)
    return env


def run_cli(args, marker, timeout=240, cwd=REPO, **extra_env) -> subprocess.CompletedProcess:
    """Runs `tfdist ARGS` as a real process, with a hard timeout."""
    return subprocess.run([sys.executable, "-m", "cluster.cli", *args], cwd=cwd, env=cli_env(marker, **extra_env),
                          capture_output=True, text=True, timeout=timeout)
