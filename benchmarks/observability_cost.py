"""What watching the cluster costs the coordinator: the same real coordinator process with 1,000 simulated
GPU agents (8 GPUs each, every heartbeat carrying their usage), measured bare and observed, side by side in
one run, alternating which goes first:

- bare: nobody scrapes /metrics and no dashboard is open;
- observed: /metrics scraped every 15 s (Prometheus's default interval) over HTTPS with a monitor
  credential, and a real `tfdist dashboard` process with one tab open on its jobs page (the page's polls:
  /api/jobs every 2 s, /api/cluster every 2 s).

Each window (--window seconds) measures the coordinator's CPU (cores) while jobs are submitted at --rate per
second, each canceled once placed, and the submissions' latency (submit-to-placed, p50/p99). Ratios observed/bare of
the medians over --runs. Also the agent side: the CPU an agent's GPU sampling costs (the sampler of
cluster/agent/usage.py against the stand-in nvidia-smi of tests/fakes, 8 GPUs).

    .venv/bin/python benchmarks/observability_cost.py [--agents 1000] [--runs 3] [--window 46] [--rate 5]

Writes benchmarks/results/observability_cost.json and prints a table.
"""

import argparse
import http.cookiejar
import os
import re
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from compare import save_json  # noqa: E402
from coordinator_scale import SimulatedCluster, cpu_seconds, p99, submit_latencies  # noqa: E402

SCRAPE_INTERVAL = 15.0  # Prometheus's default
PAGE_POLL = 2.0  # the dashboard page's poll of its jobs and agents
GPUS_PER_AGENT = 8
URL = re.compile(r"(https?://[^\s]+)")


class Scraper(threading.Thread):
    """GET /metrics every `interval` s as Prometheus does: HTTPS verified against the cluster CA, a bearer
    token. Keeps each scrape's duration and size."""

    def __init__(self, url, token, ca_pem, server_name, interval):
        super().__init__(daemon=True)
        self.url, self.token, self.interval = url, token, interval
        self.context = ssl.create_default_context(cadata=ca_pem)
        self.context.check_hostname = False  # the certificate names tfdist-coordinator; the CA is checked
        self.server_name = server_name
        self.stop = threading.Event()
        self.durations, self.sizes, self.errors = [], [], []

    def run(self):
        while True:
            t = time.perf_counter()
            try:
                request = urllib.request.Request(self.url, headers={"Authorization": f"Bearer {self.token}"})
                with urllib.request.urlopen(request, timeout=10, context=self.context) as response:
                    self.sizes.append(len(response.read()))
                self.durations.append(time.perf_counter() - t)
            except OSError as e:
                self.errors.append(str(e))
            if self.stop.wait(self.interval):
                return


class DashboardTab(threading.Thread):
    """A real `tfdist dashboard` process and one browser tab's polls of its jobs page."""

    def __init__(self, address, credential_path, env):
        super().__init__(daemon=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cluster.client.cli", "dashboard", "--coordinator", address, "--credentials",
             credential_path, "--port", "0"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        self.login = None
        deadline = time.monotonic() + 60
        lines = []
        while self.login is None and time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "login" in line and "token=" in line:
                self.login = URL.search(line).group(1)
        if self.login is None:
            self.close()
            raise RuntimeError(f"tfdist dashboard printed no login link within 60 s: {lines!r}")
        self.base = self.login.split("/login")[0]
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        self.opener.open(self.login, timeout=10).read()
        self.stop = threading.Event()
        self.polls, self.errors = 0, []

    def run(self):
        while True:
            for path in ("/api/jobs", "/api/cluster"):
                try:
                    self.opener.open(self.base + path, timeout=10).read()
                    self.polls += 1
                except OSError as e:
                    self.errors.append(f"{path}: {e}")
            if self.stop.wait(PAGE_POLL):
                return

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def metrics_url(start_lines):
    """The coordinator's /metrics address from its start-up lines."""
    for line in start_lines:
        if "/metrics" in line:
            found = URL.search(line)
            if found:
                return found.group(1)
    raise RuntimeError(f"the coordinator named no /metrics address: {start_lines!r}")


def paced_submissions(client, seconds, rate, seed):
    """Submissions at `rate` per second for `seconds`, each canceled once placed: sorted latencies (s)."""
    latencies = []
    start = time.monotonic()
    run = 0
    while time.monotonic() - start < seconds:
        found, _, _ = submit_latencies(client, 1, seed * 100_000 + run)
        latencies += found
        run += 1
        delay = start + run / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    return sorted(latencies)


def window(cluster, seconds, rate, seed, observe, tmp):
    """One measurement: coordinator CPU and submit latencies over `seconds`, bare or observed."""
    scraper = tab = None
    if observe:
        monitor = cluster.authority.issue("monitor", "prometheus", cluster.address)
        user_path = cluster.user.save(os.path.join(tmp, "user.json"))
        scraper = Scraper(metrics_url(cluster.start_lines), monitor.token, monitor.ca_pem, monitor.server_name,
                          SCRAPE_INTERVAL)
        env = dict(os.environ, PYTHONPATH=REPO, TFDIST_RUNTIME_DIR=os.path.join(tmp, "runtime"))
        tab = DashboardTab(cluster.address, user_path, env)
        scraper.start()
        tab.start()
    try:
        c0, t0 = cpu_seconds(cluster.coord.pid), time.monotonic()
        latencies = paced_submissions(cluster.client, seconds, rate, seed)
        cpu = (cpu_seconds(cluster.coord.pid) - c0) / (time.monotonic() - t0)
        result = {"coordinator_cpu_cores": cpu, "submit_p50_ms": 1000 * statistics.median(latencies),
                  "submit_p99_ms": 1000 * p99(latencies), "seconds": time.monotonic() - t0,
                  "submissions": len(latencies)}
        if observe:
            result.update(scrapes=len(scraper.durations), scrape_ms=1000 * statistics.median(scraper.durations or [0]),
                          scrape_bytes=max(scraper.sizes or [0]), scrape_errors=scraper.errors[:3],
                          dashboard_polls=tab.polls, dashboard_errors=tab.errors[:3])
        return result
    finally:
        if scraper is not None:
            scraper.stop.set()
            scraper.join(timeout=15)
        if tab is not None:
            tab.stop.set()
            tab.join(timeout=15)
            tab.close()


def agent_sampling_cost(samples=20):
    """CPU seconds per GPU sample of an agent's sampler (8 stand-in GPUs), and the cores at its interval."""
    from cluster.agent import usage

    env_path = os.environ.get("PATH", "")
    os.environ["PATH"] = os.path.join(REPO, "tests", "fakes") + os.pathsep + env_path
    os.environ["TFDIST_FAKE_GPUS"] = str(GPUS_PER_AGENT)
    try:
        sampler = usage.GpuSampler(list(range(GPUS_PER_AGENT)))
        sampler.sample()  # the first finds the tool
        self0, children0 = os.times()[0] + os.times()[1], os.times()[2] + os.times()[3]
        t = time.perf_counter()
        for _ in range(samples):
            sampler.sample()
        elapsed = time.perf_counter() - t
        own = os.times()[0] + os.times()[1] - self0
        children = os.times()[2] + os.times()[3] - children0
    finally:
        os.environ["PATH"] = env_path
    per_sample = (own + children) / samples
    return {"cpu_s_per_sample": per_sample, "wall_s_per_sample": elapsed / samples,
            "interval_s": usage.SAMPLE_INTERVAL, "cores_at_interval": per_sample / usage.SAMPLE_INTERVAL,
            "tool": sampler.tool}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--window", type=float, default=46.0, help="seconds per measurement (3 scrapes at 15 s)")
    parser.add_argument("--rate", type=float, default=5.0, help="submissions per second during a window")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "observability_cost.json"))
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="tfdist-obs-")
    cluster = SimulatedCluster(args.agents, gpus=GPUS_PER_AGENT, coordinator_args=["--http", "127.0.0.1:0"])
    runs = {"bare": [], "observed": []}
    try:
        time.sleep(5)  # every agent is heartbeating at its interval
        for run in range(args.runs):
            for observe in ((False, True) if run % 2 == 0 else (True, False)):
                runs["observed" if observe else "bare"].append(window(cluster, args.window, args.rate, run, observe, tmp))
    finally:
        cluster.close()
        subprocess.run(["rm", "-rf", tmp])

    def median(kind, key):
        return statistics.median(r[key] for r in runs[kind])

    summary = {key: {"bare": median("bare", key), "observed": median("observed", key),
                     "ratio": median("observed", key) / median("bare", key)}
               for key in ("coordinator_cpu_cores", "submit_p50_ms", "submit_p99_ms")}
    agent = agent_sampling_cost()
    result = {"benchmark": "observability_cost", "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
              "agents": args.agents, "gpus_per_agent": GPUS_PER_AGENT, "window_s": args.window,
              "submissions_per_s": args.rate,
              "scrape_interval_s": SCRAPE_INTERVAL, "dashboard_poll_s": PAGE_POLL, "summary": summary,
              "runs": runs, "agent_gpu_sampling": agent}
    print(f"| {'measure (median of ' + str(args.runs) + ' runs)':52} | {'bare':>9} | {'observed':>9} | {'ratio':>6} |")
    print(f"|{'-' * 54}|{'-' * 11}|{'-' * 11}|{'-' * 8}|")
    for key, label, fmt in (("coordinator_cpu_cores", f"coordinator CPU, {args.agents} agents (cores)", "{:.3f}"),
                            ("submit_p50_ms", "submit-to-placed p50 (ms)", "{:.2f}"),
                            ("submit_p99_ms", "submit-to-placed p99 (ms)", "{:.2f}")):
        s = summary[key]
        print(f"| {label:52} | {fmt.format(s['bare']):>9} | {fmt.format(s['observed']):>9} | {s['ratio']:>6.3f} |")
    observed = runs["observed"]
    print(f"scrapes: {sum(r['scrapes'] for r in observed)}, median {statistics.median(r['scrape_ms'] for r in observed):.0f} ms, "
          f"{max(r['scrape_bytes'] for r in observed):,} bytes; dashboard polls: "
          f"{sum(r['dashboard_polls'] for r in observed)}; errors: "
          f"{[e for r in observed for e in r['scrape_errors'] + r['dashboard_errors']][:3]}")
    print(f"agent GPU sampling ({GPUS_PER_AGENT} GPUs, {agent['tool']}): {1000 * agent['cpu_s_per_sample']:.1f} ms CPU "
          f"per sample, every {agent['interval_s']:g} s: {agent['cores_at_interval']:.4f} cores")
    save_json(args.out, result)


if __name__ == "__main__":
    main()
