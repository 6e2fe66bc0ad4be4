"""The job store under abuse, as issue 16 measured it: the serving process's memory after 200 PUTs of
1 MiB, its threads and the job's GET latency under a flood of half-open connections, and a chunked PUT.
The store runs in its own process (as in the agent); the flood is tests/fakes/store_flood.py.

    python benchmarks/job_store_abuse.py [--hold 30] [--old path/to/job_store.py]

`--old` measures another version of job_store.py (one without a secret: requests carry none).
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOOD = os.path.join(REPO, "tests", "fakes", "store_flood.py")
SECRET = "b" * 64
SERVER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("job_store", sys.argv[1])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
store = module.JobStore("127.0.0.1", 0, sys.argv[2]) if sys.argv[2] else module.JobStore("127.0.0.1", 0)
store.start(); print(store.port, flush=True); sys.stdin.read(); store.stop()
"""


def status(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {"rss_mib": int(fields["VmRSS"].split()[0]) // 1024, "threads": int(fields["Threads"])}


def request(port: int, method: str, path: str, body=None, timeout=10.0) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body)
        response = conn.getresponse()
        response.read()
        return response.status
    except OSError:
        return -1
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hold", type=float, default=30.0, help="seconds the flood lasts")
    parser.add_argument("--old", default="", help="another job_store.py (without a secret) to measure")
    args = parser.parse_args()
    module = args.old or os.path.join(REPO, "cluster", "agent", "job_store.py")
    secret = "" if args.old else SECRET
    prefix = f"/{secret}" if secret else ""
    server = subprocess.Popen([sys.executable, "-c", SERVER, module, secret], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        port = int(server.stdout.readline())
        print(f"store: {'old ' + args.old if args.old else 'this tree'}, port {port}")
        idle = status(server.pid)
        megabyte = b"x" * (1 << 20)
        start = time.monotonic()
        codes = [request(port, "PUT", f"{prefix}/tfdist/v{i}", megabyte) for i in range(200)]
        took = time.monotonic() - start
        print(f"200 PUTs of 1 MiB{' with the secret' if secret else ''} in {took:.2f}s: {summary(codes)}; "
              f"memory {idle['rss_mib']} -> {status(server.pid)['rss_mib']} MiB")
        codes = [request(port, "PUT", f"/tfdist/w{i}", megabyte) for i in range(200)]
        print(f"200 PUTs of 1 MiB without the secret: {summary(codes)}; memory {status(server.pid)['rss_mib']} MiB")
        request(port, "PUT", f"{prefix}/tfdist/0-0", b"the job's")
        flood_report(port, prefix, args.hold, server.pid, idle["threads"])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("PUT", f"{prefix}/global/chunked", body=iter([b"hello"]))
        answer = conn.getresponse()
        answer.read()
        conn.close()
        print(f"chunked PUT: {answer.status} {answer.reason}; GET after it: "
              f"{request(port, 'GET', f'{prefix}/global/chunked')}")
    finally:
        server.stdin.close()
        server.wait(timeout=30)


def flood_report(port: int, prefix: str, hold: float, pid: int, idle_threads: int) -> None:
    flood = subprocess.Popen([sys.executable, FLOOD, str(port), "1500", "halfopen", str(hold)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    opened = flood.stdout.readline().strip()
    peak = [idle_threads, status(pid)["rss_mib"]]
    done = threading.Event()

    def sample():
        while not done.wait(0.2):
            now = status(pid)
            peak[0], peak[1] = max(peak[0], now["threads"]), max(peak[1], now["rss_mib"])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    latencies, failed = [], 0
    began = time.monotonic()
    for i in range(15):  # spread over the flood
        time.sleep(max(0.0, i * hold / 15 - (time.monotonic() - began)))
        start = time.monotonic()
        code = request(port, "GET", f"{prefix}/tfdist/0-0", timeout=10)
        latencies.append(time.monotonic() - start)
        failed += code != 200
    done.set()
    sampler.join()
    flood.stdin.close()
    stopped = flood.stdout.read().strip()
    flood.wait(timeout=hold + 30)
    print(f"flood of 1500 half-open connections ({opened}; at the end: {stopped}): threads {idle_threads} -> "
          f"peak {peak[0]}, memory peak {peak[1]} MiB; 15 fresh GETs: {15 - failed} answered 200, latency median "
          f"{statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms")


def summary(codes: list[int]) -> str:
    counts: dict[int, int] = {}
    for c in codes:
        counts[c] = counts.get(c, 0) + 1
    return ", ".join(f"{n} x {'no answer' if c < 0 else c}" for c, n in sorted(counts.items()))


if __name__ == "__main__":
    main()
