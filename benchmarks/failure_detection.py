"""Failure detection: from a node's death to every other rank stopped and the job failed with a
message, tfdist against TensorFlow with a hand-written launcher, on network-namespace hosts (root).

Scenarios, on a 2-node MultiWorkerMirroredStrategy job (one worker per node, real TensorFlow):
  worker kill -9   the worker process on node a2 is killed
  node killed      every tfdist/launcher process on a2 is killed with -9 (agent or launcher, and so
                   its worker: tfdist's workers die with their agent; the launcher's worker is killed too)
  host cut off     a2's network goes down (the host vanishes for everyone else; its processes live on)
Variants: tfdist with its defaults (--lost-after 6, --failure-grace 1), tfdist with a short setting
(--lost-after 2, heartbeats every 0.5 s, --failure-grace 0.2), and TensorFlow alone (TF_CONFIG by hand, as the HPC guides write it), whose
docs say it waits for its coordination-service heartbeat timeout, or forever.

    sudo .venv/bin/python benchmarks/failure_detection.py [--runs 5] [--cap 40]

Prints a table (medians) and writes benchmarks/results/failure_detection.json.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from tests.conftest import cli_env, processes_with_marker, stop_processes  # noqa: E402
from tests.multihost.conftest import make_hosts  # noqa: E402

WORKER = os.path.join(HERE, "failure_worker.py")
SCENARIOS = ("worker kill -9", "node killed", "host cut off")


def pids_with(env_pairs: dict) -> list[int]:
    needles = [f"{k}={v}".encode() for k, v in env_pairs.items()]
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if all(n in env for n in needles) and b"failure_worker.py" in cmd:
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(predicate, timeout, step=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def cut(host, down: bool):
    subprocess.run(["ip", "-n", host.ns, "link", "set", "eth0", "down" if down else "up"], check=True, timeout=30)


class TfdistVariant:
    def __init__(self, hosts, marker, tmp, coordinator_args):
        self.hosts, self.marker, self.tmp = hosts, marker, tmp
        self.address = f"{hosts['c'].ip}:7470"
        # What an admin does once: the cluster's CA and certificate, one credential per node and one user's.
        self.credentials = os.path.join(tmp, "credentials")
        made = hosts["c"].run(["credentials", self.credentials, "--node", "a1", "--node", "a2", "--user", "bench",
                               "--coordinator", self.address], marker)
        if made.returncode != 0:
            raise RuntimeError(f"tfdist credentials failed: {made.stderr.strip()}")
        self.procs = {"c": hosts["c"].popen(["coordinator", "--listen", self.address, "--state-dir",
                                             os.path.join(tmp, "state"), "--credentials-dir", self.credentials,
                                             *coordinator_args], marker, os.path.join(tmp, "c.log"))}
        for name in ("a1", "a2"):
            self.start_agent(name)

    def credential(self, kind, name):
        return os.path.join(self.credentials, "issued", f"{kind}-{name}.json")

    def start_agent(self, name):
        self.procs[name] = self.hosts[name].popen(["agent", "--credentials", self.credential("node", name),
                                                   "--slots", "1"], self.marker,
                                                  os.path.join(self.tmp, f"{name}.log"))

    def cli(self, *args, timeout=60):
        command, *rest = args
        return self.hosts["c"].run([command, "--coordinator", self.address, "--credentials",
                                    self.credential("user", "bench"), *rest], self.marker, timeout)

    def agents_alive(self):
        r = self.cli("agents", "--json")
        return r.returncode == 0 and [a["state"] for a in json.loads(r.stdout)["agents"]] == ["ALIVE", "ALIVE"] and \
            all(a.get("free_slots", 0) == 1 for a in json.loads(r.stdout)["agents"])

    def run(self, scenario, cap):
        assert wait_until(self.agents_alive, 90, 0.5), "agents did not come back"
        job_id = self.cli("launch", "--detach", "--slots", "2", "--", sys.executable, WORKER).stdout.strip()
        assert wait_until(lambda: len(pids_with({"TFDIST_JOB_ID": job_id})) == 2, 60)
        rank0 = pids_with({"TFDIST_JOB_ID": job_id, "TFDIST_RANK": "0"})[0]
        rank1 = pids_with({"TFDIST_JOB_ID": job_id, "TFDIST_RANK": "1"})[0]
        assert wait_until(lambda: "task 0 step 5 " in self.cli("logs", job_id).stdout, 120, 0.5), "no training"
        t0 = time.time()
        if scenario == "worker kill -9":
            os.kill(rank1, signal.SIGKILL)
        elif scenario == "node killed":
            self.procs["a2"].send_signal(signal.SIGKILL)
        else:
            cut(self.hosts["a2"], down=True)
        stopped = wait_until(lambda: not alive(rank0), cap)
        t_stopped = time.time() - t0 if stopped else None
        job = json.loads(self.cli("job", job_id, "--json").stdout) if wait_until(
            lambda: json.loads(self.cli("job", job_id, "--json").stdout)["state"] == "FAILED", 60, 0.5) else {}
        t_failed = job["ended_at"] - t0 if job else None
        # Back to a whole cluster for the next run.
        if scenario == "node killed":
            self.procs["a2"].wait(timeout=30)
            self.start_agent("a2")
        if scenario == "host cut off":
            cut(self.hosts["a2"], down=False)
        for pid in (rank0, rank1):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        return {"stopped_s": t_stopped, "failed_s": t_failed, "message": job.get("outcome") or ""}

    def close(self):
        stop_processes(self.procs.values())


class HandWrittenVariant:
    """TF_CONFIG written by hand; each node runs `python failure_worker.py` under a small launcher."""

    def __init__(self, hosts, marker, tmp):
        self.hosts, self.marker, self.tmp = hosts, marker, tmp
        self.port = 23456

    def run(self, scenario, cap):
        self.port += 1
        workers = [f"{self.hosts['a1'].ip}:{self.port}", f"{self.hosts['a2'].ip}:{self.port}"]
        run_id = uuid.uuid4().hex
        launchers = []
        for index, name in enumerate(("a1", "a2")):
            env = cli_env(self.marker, TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                                             "task": {"type": "worker", "index": index}}),
                          BENCH_RUN=run_id, BENCH_RANK=str(index))
            log = open(os.path.join(self.tmp, f"hw-{name}.log"), "ab")
            launcher = [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))",
                        sys.executable, WORKER]
            launchers.append(subprocess.Popen(["ip", "netns", "exec", self.hosts[name].ns, *launcher], env=env,
                                              stdout=log, stderr=log))
        assert wait_until(lambda: len(pids_with({"BENCH_RUN": run_id})) == 2, 60)
        rank0 = pids_with({"BENCH_RUN": run_id, "BENCH_RANK": "0"})[0]
        rank1 = pids_with({"BENCH_RUN": run_id, "BENCH_RANK": "1"})[0]
        logfile = os.path.join(self.tmp, "hw-a1.log")
        assert wait_until(lambda: "task 0 step 5 " in open(logfile, errors="replace").read(), 120, 0.2), "no training"
        t0 = time.time()
        if scenario == "worker kill -9":
            os.kill(rank1, signal.SIGKILL)
        elif scenario == "node killed":
            launchers[1].send_signal(signal.SIGKILL)
            os.kill(rank1, signal.SIGKILL)
        else:
            cut(self.hosts["a2"], down=True)
        stopped = wait_until(lambda: not alive(rank0), cap)
        t_stopped = time.time() - t0 if stopped else None
        if scenario == "host cut off":
            cut(self.hosts["a2"], down=False)
        for pid in (rank0, rank1):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        for p in launchers:
            p.wait(timeout=30)
        # TensorFlow alone has no job record: a rank that stopped is the only signal there is.
        return {"stopped_s": t_stopped, "failed_s": t_stopped, "message": ""}

    def close(self):
        pass


def median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 2) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cap", type=float, default=40.0, help="seconds after which a rank counts as never stopping")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "failure_detection.json"))
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so the namespaces are removed on the way out
    variants = {
        "tfdist (default: --lost-after 6)": lambda h, m, t: TfdistVariant(h, m, t, []),
        "tfdist (--lost-after 2, heartbeat 0.5 s, failure grace 0.2 s)": lambda h, m, t: TfdistVariant(
            h, m, t, ["--lost-after", "2", "--heartbeat-interval", "0.5", "--failure-grace", "0.2"]),
        "TensorFlow alone (hand-written TF_CONFIG)": lambda h, m, t: HandWrittenVariant(h, m, t),
    }
    results = {}
    import tempfile
    for label, make in variants.items():
        marker = uuid.uuid4().hex
        tmp = tempfile.mkdtemp(prefix="tfdist-fd-")
        with make_hosts() as hosts:
            variant = make(hosts, marker, tmp)
            try:
                for scenario in SCENARIOS:
                    runs = [variant.run(scenario, args.cap) for _ in range(args.runs)]
                    results.setdefault(label, {})[scenario] = {
                        "stopped_median_s": median(r["stopped_s"] for r in runs),
                        "failed_median_s": median(r["failed_s"] for r in runs),
                        "never_stopped": sum(r["stopped_s"] is None for r in runs),
                        "runs": runs}
                    print(label, scenario, results[label][scenario]["stopped_median_s"],
                          results[label][scenario]["never_stopped"], flush=True)
            finally:
                variant.close()
                wait_until(lambda: not processes_with_marker(marker), 20, 0.2)
                for pid in processes_with_marker(marker):
                    os.kill(pid, signal.SIGKILL)
    print()
    print(f"| {'scenario':16} | " + " | ".join(f"{v:>42}" for v in variants) + " |")
    print(f"|{'-' * 18}|" + "|".join("-" * 44 for _ in variants) + "|")
    for scenario in SCENARIOS:
        cells = []
        for label in variants:
            r = results[label][scenario]
            text = "never (capped)" if r["stopped_median_s"] is None else f"{r['stopped_median_s']:.2f} s"
            if r["never_stopped"]:
                text += f", {r['never_stopped']}/{args.runs} never"
            cells.append(f"{text:>42}")
        print(f"| {scenario:16} | " + " | ".join(cells) + " |")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"benchmark": "failure_detection", "date": time.strftime("%Y-%m-%d"), "runs": args.runs,
                   "cap_s": args.cap, "results": results}, f, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
