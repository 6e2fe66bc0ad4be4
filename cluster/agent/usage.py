"""What an agent measures on its node for its heartbeats and its /metrics: each GPU it hands out
(utilisation, memory) and each job's workers (CPU time, resident memory).

GPUs: NVML through `pynvml` (the `tfdist[gpu]` extra, nvidia-ml-py) when it loads, else one `nvidia-smi
--query-gpu` call per sample (tens of milliseconds; tests use the stand-in in tests/fakes). A CPU node
has neither and gets no GPU figures at all, without an error. Workers: /proc of each worker process and
its descendants (a worker's own children, e.g. a data loader, count toward its job).

A sample is taken at most every SAMPLE_INTERVAL seconds, by a background thread, so a slow nvidia-smi
never holds up a heartbeat: heartbeats carry the latest sample.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
import time
from typing import Callable

from cluster.shared.work import GpuUsage, JobUsage, NodeUsage

log = logging.getLogger("tfdist.agent")

SAMPLE_INTERVAL = 5.0  # seconds between samples
SMI_TIMEOUT = 10.0
SMI_QUERY = "index,utilization.gpu,memory.used,memory.total"
MIB = 1 << 20
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def parse_smi(text: str, wanted: set[int]) -> tuple[GpuUsage, ...]:
    """`nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits`
    lines (utilisation in %, memory in MiB); "[N/A]" reads as 0; lines of other GPUs or malformed are skipped."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4 or not parts[0].isdigit() or int(parts[0]) not in wanted:
            continue
        try:
            util, used, total = (float(p) if p.replace(".", "", 1).isdigit() else 0.0 for p in parts[1:])
        except ValueError:
            continue
        gpus.append(GpuUsage(int(parts[0]), min(1.0, util / 100.0), int(used * MIB), int(total * MIB)))
    return tuple(gpus)


class GpuSampler:
    """The GPUs `indices` (nvidia-smi's numbering) of this node, sampled through NVML or nvidia-smi."""

    def __init__(self, indices: list[int]):
        self.indices = set(indices)
        self.tool = "none"
        self._nvml = None
        self._smi = None
        if not self.indices:
            return
        try:
            import pynvml  # the tfdist[gpu] extra

            pynvml.nvmlInit()
            self._nvml = pynvml
            self.tool = "nvml"
        except Exception:  # not installed, or no driver behind it: nvidia-smi instead
            self._smi = shutil.which("nvidia-smi")
            self.tool = "nvidia-smi" if self._smi else "none"

    def sample(self) -> tuple[GpuUsage, ...]:
        if self._nvml is not None:
            return self._sample_nvml()
        if self._smi is None:
            return ()
        try:
            out = subprocess.run([self._smi, f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=SMI_TIMEOUT)
        except (OSError, subprocess.SubprocessError) as e:
            log.debug("nvidia-smi failed: %s", e)
            return ()
        return parse_smi(out.stdout, self.indices) if out.returncode == 0 else ()

    def _sample_nvml(self) -> tuple[GpuUsage, ...]:
        nvml, gpus = self._nvml, []
        for index in sorted(self.indices):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                util = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception as e:  # NVMLError: a GPU fell off the bus, a driver reload
                log.debug("NVML on GPU %d: %s", index, e)
                continue
            gpus.append(GpuUsage(index, min(1.0, util / 100.0), int(memory.used), int(memory.total)))
        return tuple(gpus)


def _children() -> dict[int, list[int]]:
    """Parent pid -> its children's pids, for every process this user can see."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def _cpu_and_rss(pid: int) -> tuple[float, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open(f"/proc/{pid}/statm", "rb") as f:
            resident = int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None  # it exited between the listing and the read
    return (int(fields[11]) + int(fields[12])) / _TICKS, resident * _PAGE


def job_usage(workers: dict[str, list[int]]) -> tuple[JobUsage, ...]:
    """Job -> its worker pids on this node, summed with their descendants: CPU seconds, resident bytes."""
    if not workers:
        return ()
    tree = _children()
    usage = []
    for job_id, pids in sorted(workers.items()):
        seen, stack, cpu, rss = set(), list(pids), 0.0, 0
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            figures = _cpu_and_rss(pid)
            if figures is None:
                continue
            cpu, rss = cpu + figures[0], rss + figures[1]
            stack.extend(tree.get(pid, ()))
        usage.append(JobUsage(job_id, cpu, rss, len(seen)))
    return tuple(usage)


class UsageSampler:
    """Samples the node every `interval` seconds on its own thread; `latest` is the newest sample."""

    def __init__(self, gpu_indices: list[int], workers: Callable[[], dict[str, list[int]]],
                 interval: float = SAMPLE_INTERVAL):
        self.gpus = GpuSampler(gpu_indices)
        self.workers, self.interval = workers, interval
        self.latest: NodeUsage | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="usage sampler", daemon=True)

    def sample(self) -> NodeUsage:
        self.latest = NodeUsage(time.time(), self.gpus.sample(), job_usage(self.workers()))
        return self.latest

    def start(self) -> "UsageSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:  # a sample is never worth the agent: say it, try again next time
                log.exception("sampling this node's usage failed")
            if self._stop.wait(self.interval):
                return
