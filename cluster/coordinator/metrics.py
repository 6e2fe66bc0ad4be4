"""The coordinator's Prometheus metrics (docs/observability.md lists each): counters and histograms the
core and the servicers bump as events happen (`Telemetry`), and gauges read from the core's state when
Prometheus scrapes (`StateCollector`). Its own registry: nothing of the process-global default one.

Cost: events cost a counter increment under prometheus_client's lock; a scrape reads the agents and the
active jobs once (O(agents + active jobs)), under the core's lock only for the in-memory part.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Iterable, Mapping

from cluster.shared.model import JobState
from cluster.shared.modes import PLANNERS

# Submit to placed: milliseconds on an idle cluster (docs/benchmarks.md: p50 8 ms, p99 26 ms at 1,000
# agents), minutes to hours for a job queued behind others.
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)
# Submit to running: at least the workers' start (a second or two), TensorFlow's import on a busy node
# (tens of seconds), or a queue wait.
START_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 900, 3600, 4 * 3600, 24 * 3600)
# RPCs: heartbeats ~1 ms of server time, a durable submit ~10 ms, a held WaitForWork or log follow 30 s.
RPC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# A scheduling round: tens of microseconds (the pure scheduler places 12,800 jobs/s at 1,000 nodes).
ROUND_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)

ACTIVE_STATES = (JobState.QUEUED, JobState.STARTING, JobState.RUNNING, JobState.PAUSED)
THROUGHPUT_WINDOW = 30.0  # seconds of step progress a job's steps/s is measured over
MAX_TRACKED = 2048  # jobs whose progress Throughput keeps before it drops those that stopped stepping


INSTRUMENTS = ("submit_to_placed", "submit_to_running", "ended", "submitted", "restarts", "preemptions", "stalls",
               "startup_timeouts", "node_losses", "heartbeats", "rounds", "rpc_seconds", "rpc_errors")


class _Uncounted:
    """An instrument that counts nothing (Telemetry(counting=False))."""

    def labels(self, *values: str) -> "_Uncounted":
        return self

    def inc(self, amount: float = 1.0) -> None:
        pass

    def observe(self, value: float) -> None:
        pass


class Telemetry:
    """The counters and histograms events feed. One per coordinator; thread-safe (prometheus_client).
    `counting=False`: a coordinator nobody scrapes (a local launch's) counts nothing and never imports
    prometheus_client (0.03-0.04 s of a launch's start)."""

    def __init__(self, counting: bool = True):
        self.registry = None
        if not counting:
            uncounted = _Uncounted()
            for name in INSTRUMENTS:
                setattr(self, name, uncounted)
            return
        from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

        disable_created_metrics()  # no `_created` series beside each counter: Prometheus does not need them
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.submit_to_placed = Histogram(
            "tfdist_job_submit_to_placed_seconds", "From a job's submission to its first placement on nodes.",
            ["mode"], buckets=WAIT_BUCKETS, registry=r)
        self.submit_to_running = Histogram(
            "tfdist_job_submit_to_running_seconds", "From a job's submission until every node started its workers "
            "(first attempt).", ["mode"], buckets=START_BUCKETS, registry=r)
        self.ended = Counter("tfdist_jobs_ended_total", "Jobs that ended, by final state and mode.",
                             ["state", "mode"], registry=r)
        self.submitted = Counter("tfdist_jobs_submitted_total", "Jobs accepted by SubmitJob.", ["mode"], registry=r)
        self.restarts = Counter("tfdist_job_restarts_total", "Whole-gang restarts after a failure (max_restarts).",
                                registry=r)
        self.preemptions = Counter("tfdist_job_preemptions_total", "Jobs paused by preemption (every worker saved "
                                   "at one step).", registry=r)
        self.stalls = Counter("tfdist_watchdog_stalls_total", "Jobs the step watchdog found stalled.", registry=r)
        self.startup_timeouts = Counter("tfdist_startup_timeouts_total", "Jobs whose ranks did not all join in "
                                        "time.", registry=r)
        self.node_losses = Counter("tfdist_node_losses_total", "Agents declared lost (no heartbeat for "
                                   "--lost-after).", registry=r)
        self.heartbeats = Counter("tfdist_heartbeats_total", "Agent heartbeats received.", registry=r)
        self.rounds = Histogram("tfdist_scheduling_round_seconds", "Scheduling rounds and how long each took.",
                                buckets=ROUND_BUCKETS, registry=r)
        self.rpc_seconds = Histogram("tfdist_rpc_duration_seconds", "gRPC calls served, by method (server time).",
                                     ["method"], buckets=RPC_BUCKETS, registry=r)
        self.rpc_errors = Counter("tfdist_rpc_errors_total", "gRPC calls answered with an error, by method and "
                                  "status code.", ["method", "code"], registry=r)
        for mode in PLANNERS:  # every mode's series from the start: rate() and histogram_quantile() see 0, not nothing
            self.submit_to_placed.labels(mode)
            self.submit_to_running.labels(mode)
            self.submitted.labels(mode)

    def transition(self, job, new: JobState, now: float, fields: dict) -> None:
        """A job changed state (JobLifecycle.transition): the latency histograms and the event counters."""
        mode = job.spec.distribution_mode
        if new == JobState.STARTING and job.attempt == 0 and job.state == JobState.QUEUED:
            self.submit_to_placed.labels(mode).observe(max(0.0, now - job.submitted_at))
        elif new == JobState.RUNNING and job.attempt == 0:
            self.submit_to_running.labels(mode).observe(max(0.0, now - job.submitted_at))
        elif new == JobState.QUEUED and fields.get("restarts", job.restarts) > job.restarts:
            self.restarts.inc()
        elif new == JobState.PAUSED:
            self.preemptions.inc()
        if new.terminal:
            self.ended.labels(new.value, mode).inc()


class Throughput:
    """Each running job's steps/s from the step progress its ranks report (the lowest-numbered rank
    reporting, which every mode has: MWMS and Horovod ranks step together, ps mode's chief counts the
    global step). Updated on heartbeats; read on scrapes and GetJob."""

    def __init__(self, window: float = THROUGHPUT_WINDOW):
        self.window = window
        self._lock = threading.Lock()
        self._samples: dict[str, collections.deque] = {}

    def note(self, job_id: str, progress: Mapping[int, tuple[int, float]]) -> None:
        """`progress`: rank -> (step, when it moved, coordinator clock)."""
        if not progress:
            return
        step, when = progress[min(progress)]
        with self._lock:
            samples = self._samples.setdefault(job_id, collections.deque(maxlen=256))
            if samples and (when <= samples[-1][0] or step == samples[-1][1]):
                return
            if samples and step < samples[-1][1]:  # a restart from a checkpoint: start counting again
                samples.clear()
            samples.append((when, step))
            if len(self._samples) > MAX_TRACKED:  # nobody scrapes (forget_except): ended jobs go here
                for old in [j for j, s in self._samples.items() if s[-1][0] < when - self.window]:
                    del self._samples[old]

    def steps_per_second(self, job_id: str, now: float) -> float:
        with self._lock:
            samples = self._samples.get(job_id)
            if not samples:
                return 0.0
            recent = [s for s in samples if s[0] >= now - self.window]
        if len(recent) < 2 or now - recent[-1][0] > self.window:
            return 0.0
        (t0, s0), (t1, s1) = recent[0], recent[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0

    def forget_except(self, job_ids: Iterable[str]) -> None:
        keep = set(job_ids)
        with self._lock:
            for job_id in [j for j in self._samples if j not in keep]:
                del self._samples[job_id]


def global_batch_size(job) -> int:
    """The job's global batch size from its hyperparameters (0: it names none)."""
    value = (job.spec.config.hyperparameters or {}).get("global_batch_size") if job.spec.config else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def experiment_gauges(store):  # the store's reader: never the coordinator's lock
    """Experiments by state, and the trials of those not ended by their jobs' state (WAITING: paused by the
    searcher after losing a rung)."""
    from prometheus_client.core import GaugeMetricFamily

    experiments = store.experiments()
    by_state = GaugeMetricFamily("tfdist_experiments", "Experiments by state.", labels=["state"])
    for state, count in sorted(collections.Counter(e.state.value for e in experiments).items()):
        by_state.add_metric([state], count)
    yield by_state
    trials = GaugeMetricFamily("tfdist_experiment_trials", "The trials of each experiment not ended, by state.",
                               labels=["experiment", "state"])
    for experiment in experiments:
        if experiment.terminal:
            continue
        counts: collections.Counter = collections.Counter()
        for trial in experiment.search.get("trials", ()):
            job = store.job(trial["job"]) if trial.get("job") else None
            state = "GONE" if job is None else "WAITING" if trial.get("waiting") and not job.terminal \
                else job.state.value
            counts[state] += 1
        for state, count in sorted(counts.items()):
            trials.add_metric([experiment.id, state], count)
    yield trials


class StateCollector:
    """Gauges read from the coordinator's state at scrape time."""

    def __init__(self, core, clock=time.time):
        self.core, self.clock = core, clock

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        core, now = self.core, self.clock()
        with core.lock:  # the in-memory part: agents, their holdings and usage
            agents = [(a.name, a.lost, a.last_heartbeat, a.record.slots, tuple(g.index for g in a.record.gpus))
                      for a in core.agents.values()]
            held = {}
            for alloc in core.allocs.all():
                slots, gpus = held.get(alloc.agent, (0, 0))
                held[alloc.agent] = (slots + alloc.slots, gpus + len(alloc.gpus))
            usage = dict(core.usage)
            on_beacons = sum(1 for a in core.agents.values() if a.beaconing and not a.lost)
        jobs = core.store.jobs(ACTIVE_STATES)  # under the store's own lock, not the core's

        by_state = GaugeMetricFamily("tfdist_jobs", "Jobs not ended, by state and mode.", labels=["state", "mode"])
        counts = collections.Counter((j.state.value, j.spec.distribution_mode) for j in jobs)
        for (state, mode), count in sorted(counts.items()):
            by_state.add_metric([state, mode], count)
        yield by_state
        queued = [j for j in jobs if j.state == JobState.QUEUED]
        yield GaugeMetricFamily("tfdist_queue_length", "Jobs waiting to be placed.", value=len(queued))
        yield GaugeMetricFamily("tfdist_queue_oldest_wait_seconds", "How long the oldest queued job has waited "
                                "since its submission (0: none queued).",
                                value=max((now - j.submitted_at for j in queued), default=0.0))
        yield from experiment_gauges(core.store.reader())

        states = GaugeMetricFamily("tfdist_agents", "Agents by state.", labels=["state"])
        states.add_metric(["alive"], sum(1 for a in agents if not a[1]))
        states.add_metric(["lost"], sum(1 for a in agents if a[1]))
        yield states
        yield GaugeMetricFamily("tfdist_agents_on_beacons", "Live agents whose UDP beacons prove them alive (the "
                                "others heartbeat at least three times per --lost-after).", value=on_beacons)
        age = GaugeMetricFamily("tfdist_agent_heartbeat_age_seconds", "Seconds since each agent's last heartbeat or beacon.",
                                labels=["node"])
        slots = GaugeMetricFamily("tfdist_node_slots", "Each node's slots, held by jobs or free.",
                                  labels=["node", "state"])
        gpus = GaugeMetricFamily("tfdist_node_gpus", "Each GPU node's GPUs, held by jobs or free.",
                                 labels=["node", "state"])
        for name, lost, last, total, indices in sorted(agents):
            age.add_metric([name], max(0.0, now - last))
            used_slots, used_gpus = held.get(name, (0, 0))
            slots.add_metric([name, "held"], used_slots)
            slots.add_metric([name, "free"], max(0, total - used_slots))
            if indices:
                gpus.add_metric([name, "held"], used_gpus)
                gpus.add_metric([name, "free"], max(0, len(indices) - used_gpus))
        yield age
        yield slots
        yield gpus

        util = GaugeMetricFamily("tfdist_gpu_utilization_ratio", "Each GPU's utilisation (0-1) as its agent last "
                                 "sampled it.", labels=["node", "gpu"])
        used = GaugeMetricFamily("tfdist_gpu_memory_used_bytes", "Each GPU's memory in use.", labels=["node", "gpu"])
        total = GaugeMetricFamily("tfdist_gpu_memory_total_bytes", "Each GPU's memory.", labels=["node", "gpu"])
        cpu = CounterMetricFamily("tfdist_job_worker_cpu_seconds", "CPU time of a job's workers on a node "
                                  "(user + system), as its agent last sampled it.", labels=["job_id", "node"])
        rss = GaugeMetricFamily("tfdist_job_worker_resident_bytes", "Resident memory of a job's workers on a "
                                "node.", labels=["job_id", "node"])
        for name, sample in sorted(usage.items()):
            for g in sample.gpus:
                util.add_metric([name, str(g.index)], g.utilization)
                used.add_metric([name, str(g.index)], g.memory_used_bytes)
                total.add_metric([name, str(g.index)], g.memory_total_bytes)
            for j in sample.jobs:
                cpu.add_metric([j.job_id, name], j.cpu_seconds)
                rss.add_metric([j.job_id, name], j.rss_bytes)
        yield from (util, used, total, cpu, rss)

        running = [j for j in jobs if j.state == JobState.RUNNING]
        steps = GaugeMetricFamily("tfdist_job_steps_per_second", "A running job's training steps per second "
                                  "(over the last 30 s of its ranks' progress).", labels=["job_id"])
        examples = GaugeMetricFamily("tfdist_job_examples_per_second", "Steps per second times the job's "
                                     "global batch size (jobs whose config names one).", labels=["job_id"])
        latest = GaugeMetricFamily("tfdist_job_metric", "The latest value of each training metric a running job "
                                   "reported (MetricsReporter, tfdist.report_metrics).", labels=["job_id", "name"])
        for job in running:
            rate = core.throughput.steps_per_second(job.id, now)
            steps.add_metric([job.id], rate)
            batch = global_batch_size(job)
            if batch:
                examples.add_metric([job.id], rate * batch)
            for row in core.store.latest_metrics(job.id):
                latest.add_metric([job.id, row.name], row.value)
        yield from (steps, examples, latest)
        core.throughput.forget_except(j.id for j in jobs)


def exposition(telemetry: Telemetry, core) -> bytes:
    """The text a scrape gets: the event metrics and the state gauges."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Both(telemetry, StateCollector(core)))
    return generate_latest(registry)


class _Both:
    def __init__(self, telemetry: Telemetry, state: StateCollector):
        self.telemetry, self.state = telemetry, state

    def collect(self):
        if self.telemetry.registry is not None:
            yield from self.telemetry.registry.collect()
        yield from self.state.collect()
