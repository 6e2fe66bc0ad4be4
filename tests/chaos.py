"""The coordinator killed with `kill -9` at random moments while jobs of 1, 2 and 4 slots are
submitted, placed, run and end on two agents. Used by tests/integration/test_chaos.py (short) and
benchmarks/chaos.py (long, `make chaos`).

Every acknowledged job must end in the state it would have reached without the kills (exit code
0 -> SUCCEEDED, 3 -> FAILED with code 3), with its whole placement recorded, every rank's exit and
last line stored once, no duplicate job, and no slot left taken.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

from tests.conftest import REPO, cli_env, stop_processes

JOB = os.path.join(REPO, "tests", "integration", "workers", "chaos_job.py")


@dataclasses.dataclass
class Submitted:
    job_id: str
    slots: int
    code: int
    ticks: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ChaosRun:
    def __init__(self, tmp, marker, *, kills: int, jobs: int, seed: int = 0, log=print):
        self.tmp, self.marker, self.kills, self.jobs = tmp, marker, kills, jobs
        self.random = random.Random(seed)
        self.log = log
        self.address = f"127.0.0.1:{_free_port()}"
        self.state_dir = os.path.join(tmp, "state")
        self.procs: dict[str, subprocess.Popen] = {}
        self.submitted: list[Submitted] = []
        self.kill_times: list[float] = []
        self.restart_seconds: list[float] = []
        # The cluster's credentials, made before the first start (the coordinator loads them at each restart).
        from cluster.shared.credentials import Authority
        from tfdist.private_files import private_dir

        private_dir(self.state_dir)
        authority, _ = Authority.load_or_create(os.path.join(self.state_dir, "credentials"))
        self.credentials = {name: authority.issue(kind, name, self.address).save(os.path.join(tmp, f"{name}.json"))
                            for kind, name in (("node", "n1"), ("node", "n2"), ("admin", "chaos"))}

    # ---------------------------------------------------------------- processes
    def _popen(self, name, args):
        log = open(os.path.join(self.tmp, f"{name}.log"), "ab")
        return subprocess.Popen([sys.executable, "-m", "cluster.client.cli", *args], env=cli_env(self.marker), cwd=REPO,
                                stdout=log, stderr=log, stdin=subprocess.DEVNULL)

    def start_coordinator(self):
        self.procs["c"] = self._popen("coordinator", [
            "coordinator", "--listen", self.address, "--state-dir", self.state_dir, "--subnet", "127.0.0.0/8",
            "--lost-after", "30", "--heartbeat-interval", "0.2"])

    def client(self):
        from cluster.shared.rpc import Client
        from cluster.shared.credentials import Credential
        return Client(self.address, Credential.load(self.credentials["chaos"]), timeout=5)

    def call(self, fn, *args, patience=120.0, **kwargs):
        """Retries while the coordinator is down (it is being killed on purpose)."""
        from cluster.shared.rpc import ClientError
        import grpc
        deadline = time.monotonic() + patience
        while True:
            try:
                return fn(*args, **kwargs)
            except ClientError as e:
                if e.code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) or \
                        time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def close(self):
        stop_processes(self.procs.values())

    # ---------------------------------------------------------------- the run
    def run(self) -> dict:
        from cluster.shared import jobspec
        from cluster.shared.config import ExperimentConfig
        import uuid

        started = time.monotonic()
        self.start_coordinator()
        for name in ("n1", "n2"):
            self.procs[name] = self._popen(f"agent-{name}", ["agent", "--coordinator", self.address, "--credentials",
                                                             self.credentials[name], "--slots", "2"])
        client = self.client()
        self.call(lambda: self._wait(lambda: len(client.list_agents()) == 2, "agents"))
        done = threading.Event()
        killer = threading.Thread(target=self._kill_loop, args=(done,), daemon=True)
        killer.start()
        for i in range(self.jobs):
            slots, code, ticks = (1, 2, 4)[i % 3], 3 if i % 4 == 3 else 0, self.random.randint(2, 8)
            config = ExperimentConfig(name=f"chaos-{i}", entrypoint=(sys.executable, JOB, str(ticks), str(code)),
                                      slots_per_trial=slots)
            spec = jobspec.to_pb(jobspec.job_spec(config, working_dir=REPO, startup_timeout=120,
                                                  submission_id=uuid.uuid4().hex))
            job_id = client.submit(spec, retry_for=120)  # retried with the same submission id across kills
            self.submitted.append(Submitted(job_id, slots, code, ticks))
            time.sleep(self.random.uniform(0.0, 0.6))
        killer.join()
        done.set()
        self._wait(lambda: self._all_ended(client), "every job to end and every slot to be free", timeout=240)
        result = self._check(client)
        result.update(kills=len(self.kill_times), jobs=len(self.submitted), seconds=round(time.monotonic() - started, 1),
                      restart_seconds_median=sorted(self.restart_seconds)[len(self.restart_seconds) // 2]
                      if self.restart_seconds else 0.0)
        client.close()
        return result

    def _kill_loop(self, done):
        while len(self.kill_times) < self.kills:
            time.sleep(self.random.uniform(0.2, 1.5))
            self.procs["c"].send_signal(signal.SIGKILL)
            self.procs["c"].wait(timeout=30)
            self.kill_times.append(time.monotonic())
            time.sleep(self.random.uniform(0.0, 0.5))
            t0 = time.monotonic()
            self.start_coordinator()
            client = self.client()
            self._wait(lambda: self._answers(client), "the coordinator to come back", timeout=60)
            client.close()
            self.restart_seconds.append(time.monotonic() - t0)

    @staticmethod
    def _answers(client) -> bool:
        from cluster.shared.rpc import ClientError
        try:
            client.jobs()
            return True
        except ClientError:
            return False

    def _wait(self, predicate, what, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}")

    def _all_ended(self, client) -> bool:
        jobs = self.call(client.jobs)
        agents = self.call(client.list_agents)
        return all(j.state in ("SUCCEEDED", "FAILED", "CANCELED") for j in jobs) and \
            all(a.free_slots == a.slots for a in agents)

    def _check(self, client) -> dict:
        jobs = {j.id: j for j in self.call(client.jobs)}
        problems = []
        if len(jobs) != len(self.submitted):
            problems.append(f"{len(jobs)} jobs stored for {len(self.submitted)} acknowledged submissions")
        for s in self.submitted:
            job = self.call(client.job, s.job_id)
            expected = ("SUCCEEDED", 0) if s.code == 0 else ("FAILED", s.code)
            if (job.state, job.exit_code) != expected:
                problems.append(f"job {s.job_id} ({s.slots} slots, exit {s.code}): {job.state} exit {job.exit_code}, "
                                f"expected {expected}: {job.message}")
            nodes = 2 if s.slots == 4 else 1
            if len(job.placement) != nodes or sum(p.slots for p in job.placement) != s.slots:
                problems.append(f"job {s.job_id}: placement {[(p.agent, p.slots) for p in job.placement]}, "
                                f"expected {s.slots} slots on {nodes} node(s)")
            if s.code == 0:
                if sorted(e.rank for e in job.exits) != list(range(s.slots)):
                    problems.append(f"job {s.job_id}: exits of ranks {sorted(e.rank for e in job.exits)}")
                logs = self.call(client.logs, s.job_id, limit=5000)
                texts = [l.text for l in logs.lines]
                for rank in range(s.slots):
                    last = f"rank {rank} tick {s.ticks - 1}"
                    if texts.count(last) != 1:
                        problems.append(f"job {s.job_id}: {last!r} stored {texts.count(last)} times")
        return {"problems": problems}
