"""The unit tier (Bazel: one target per tests/unit file) run beside the pytest tier, not before it: `make test`
sets TFDIST_UNIT_TIER_BESIDE=1 and this plugin (loaded by tests/conftest.py, in pytest's controller process
only) starts `tools/bazel_test.sh` as the session starts, waits for it as the session ends (bounded), puts its
result in pytest's summary, above pytest's own last line, and fails the session if it failed. The pytest tier
mostly waits (on processes, Slurm, the API server); the unit tier is CPU: side by side they took less than one
after the other (docs/development.md)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

ENV = "TFDIST_UNIT_TIER_BESIDE"
WAIT = 1800.0  # seconds the session's end waits for the unit tier (the CI's cap is longer)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class UnitTier:
    def __init__(self) -> None:
        self.log_path = os.path.join(REPO, ".unit-tier.log")
        self.proc: subprocess.Popen | None = None
        self.code: int | None = None

    def start(self) -> None:
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen(["bash", os.path.join(REPO, "tools", "bazel_test.sh")], cwd=REPO, stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

    def finish(self) -> int:
        if self.proc is None:
            return 0
        try:
            self.code = self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(timeout=30)
            self.code = -1
        return self.code

    def report(self) -> list[str]:
        with open(self.log_path, errors="replace") as f:
            lines = f.read().splitlines()
        if self.code == 0:
            return [line for line in lines if line.startswith(("Executed ", "INFO: Elapsed"))]
        if self.code == -1:
            return [f"the unit tier (Bazel) did not end within {WAIT:g}s; its log: {self.log_path}", *lines[-40:]]
        return [f"the unit tier (Bazel) failed (exit {self.code}); its log: {self.log_path}", *lines[-60:]]


def pytest_sessionstart(session) -> None:
    if os.environ.get(ENV) == "1" and not hasattr(session.config, "workerinput"):
        tier = UnitTier()
        session.config._unit_tier = tier
        tier.start()
        session.config._unit_tier_started = time.monotonic()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    tier = getattr(session.config, "_unit_tier", None)
    if tier is not None and tier.finish() != 0 and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    tier = getattr(config, "_unit_tier", None)
    if tier is not None:
        terminalreporter.section("unit tier (Bazel, beside the pytest tier)")
        for line in tier.report():
            terminalreporter.write_line(line)
