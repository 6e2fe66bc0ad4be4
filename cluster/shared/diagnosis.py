"""`tfdist diagnose`'s verdict, as a pure function of what the variants measured (docs/diagnose.md).

The recipe: the baseline's step time is split by taking one thing away at a time.
- no_communication runs with no all-reduce, each rank at its own pace: the gang's pace there is its slowest
  rank, and what the baseline takes beyond it is communication. The ranks' own paces also show a straggler:
  one rank slower than the others by itself holds back every step of a synchronous gang.
- synthetic_input feeds the job its own first batch from memory: what the baseline takes beyond it is input.
- one_node runs one node's share of the job alone: how close n nodes come to n times one node.
What is left is compute. The verdict is the largest share that is big enough to be worth acting on
(BOUND_SHARE), or compute.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Mapping, Sequence

from tfdist.errors import UserError
from tfdist.diagnose import BASELINE, NO_COMMUNICATION, ONE_NODE, SYNTHETIC_INPUT, VARIANTS  # noqa: F401

COMMUNICATION, INPUT, STRAGGLER, COMPUTE = "communication", "input", "straggler", "compute"
UNDETERMINED = "undetermined"  # nothing beside the baseline was measured: no share to weigh

BOUND_SHARE = 0.3  # a share of the step at least this big is the bottleneck to act on
STRAGGLER_SKEW = 0.2  # a rank this much slower by itself than the median of the others is named...
MIN_STRAGGLER_SHARE = 0.1  # ...where the others' wait for it is at least this share of the baseline's step
SHORT_STEP = 0.01  # seconds: below this a step is mostly per-step overhead, and its parts are noise
MIN_COMM_SECONDS = 0.002  # communication shorter than this per step is too short to turn into a bandwidth
GRADIENT_BYTES = 4  # per parameter: float32 gradients (the all-reduce's payload in the common case)


@dataclasses.dataclass(frozen=True)
class RankTiming:
    rank: int
    node: str
    times: tuple[float, ...]  # seconds of each timed step
    applied: bool = True  # the variant's change took effect on this rank
    why: str = ""  # when it did not
    batch: int | None = None  # the global batch, where the input showed it
    params: int | None = None  # trainable parameters
    link: Mapping[str, Any] | None = None  # {"interface", "nominal_bits_per_s"} of the rank's node
    keras_fit: bool = True  # the rank trained with Keras fit (the variants that change the job change fit)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


@dataclasses.dataclass(frozen=True)
class VariantRun:
    """One variant as it ran: its job, placement and each rank's timing ("skipped": why it measured nothing)."""
    name: str
    job: str = ""
    nodes: tuple[str, ...] = ()
    ranks: int = 0
    timings: tuple[RankTiming, ...] = ()
    skipped: str = ""

    @property
    def measured(self) -> bool:
        return not self.skipped and bool(self.timings) and all(t.times for t in self.timings)

    @property
    def step_time(self) -> float:
        """The gang's pace: its slowest rank's median step (all equal in a synchronous gang)."""
        return max(t.median for t in self.timings)

    @property
    def batch(self) -> int | None:
        return next((t.batch for t in self.timings if t.batch), None)

    def not_applied(self) -> str:
        """Why the variant's change did not take effect ("" when it did everywhere)."""
        return next((f"rank {t.rank}: {t.why}" for t in self.timings if not t.applied), "")


@dataclasses.dataclass(frozen=True)
class Straggler:
    rank: int
    node: str
    slower_by: float  # its own median step / the others' median - 1


@dataclasses.dataclass(frozen=True)
class Bandwidth:
    allreduce_bytes_per_step: int  # what a ring all-reduce sends from each rank per step
    measured_bytes_per_s: float | None  # that over the communication time (None: too short to tell)
    nominal_bits_per_s: int | None  # the slowest link's nominal rate, where the node knows it
    link: str  # "eth0 on a1"


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    mode: str
    variants: tuple[VariantRun, ...]
    verdict: str
    shares: Mapping[str, float | None]
    scaling_efficiency: float | None
    straggler: Straggler | None
    bandwidth: Bandwidth | None
    batch: int | None
    fixes: tuple[str, ...]
    summary: str


def straggler_of(run: VariantRun) -> Straggler | None:
    """The rank slowest by itself, if it is STRAGGLER_SKEW slower than the median of the others."""
    if not run.measured or len(run.timings) < 2:
        return None
    slowest = max(run.timings, key=lambda t: t.median)
    others = statistics.median(t.median for t in run.timings if t is not slowest)
    slower_by = slowest.median / others - 1 if others > 0 else 0.0
    return Straggler(slowest.rank, slowest.node, slower_by) if slower_by >= STRAGGLER_SKEW else None


def in_step(run: VariantRun) -> float:
    """The pace the ranks would keep if they waited for each other every step: the median over steps of the
    slowest rank's time at that step (its i-th step beside the others' i-th)."""
    steps = min(len(t.times) for t in run.timings)
    return statistics.median(max(t.times[i] for t in run.timings) for i in range(steps))


def typical_pace(run: VariantRun) -> float:
    """The ranks' own pace without the slowest of them (the median of the others' medians)."""
    medians = sorted(t.median for t in run.timings)
    return statistics.median(medians[:-1]) if len(medians) > 1 else medians[0]


def _usable(run: VariantRun | None) -> bool:
    return run is not None and run.measured and not run.not_applied()


def _share(part: float, whole: float) -> float:
    return min(1.0, max(0.0, part / whole)) if whole > 0 else 0.0


def diagnose(mode: str, runs: Sequence[VariantRun]) -> Diagnosis:
    """The verdict over the variants that ran (baseline must have been measured)."""
    by_name = {r.name: r for r in runs}
    base = by_name[BASELINE]
    if not base.measured:
        raise UserError(f"the baseline was not measured: {base.skipped or 'no timing arrived'}")
    step = base.step_time
    shares: dict[str, float | None] = {COMMUNICATION: None, INPUT: None, STRAGGLER: None}
    straggler = bandwidth = None
    apart = by_name.get(NO_COMMUNICATION)
    if _usable(apart):
        # A synchronous gang waits each step for that step's slowest rank: its pace without the all-reduce is
        # the median over steps of the slowest rank's time (`in_step`), which is longer than any one rank's own
        # median where ranks take turns being slow (shared CPUs): that waiting is not communication.
        synchronised = in_step(apart)
        shares[COMMUNICATION] = _share(step - synchronised, step)
        straggler = straggler_of(apart)
        waited = straggler.slower_by / (1 + straggler.slower_by) * apart.step_time if straggler else 0.0
        if waited < MIN_STRAGGLER_SHARE * step:
            straggler = None  # slower by itself, but by too little of a step to matter (or to tell from noise)
        shares[STRAGGLER] = _share(synchronised - typical_pace(apart), step)  # waiting for slower ranks
        bandwidth = _bandwidth(base, step - synchronised)
    fed = by_name.get(SYNTHETIC_INPUT)
    batch = base.batch or next((r.batch for r in runs if r.batch), None)
    if _usable(fed):
        shares[INPUT] = _share(step - fed.step_time, step)
    efficiency = _efficiency(base, by_name.get(ONE_NODE), batch)
    # Waiting for slower ranks is a verdict where one rank is slow by itself (named); ranks that take turns
    # being slow are said in the shares, and are no one node's fault.
    found = {k: v for k, v in shares.items() if v is not None and (k != STRAGGLER or straggler)}
    worst = max(found, key=lambda k: found[k], default=None)
    measured_any = any(v is not None for v in shares.values()) or efficiency is not None
    verdict = worst if worst is not None and found[worst] >= BOUND_SHARE else COMPUTE if measured_any else UNDETERMINED
    advice = fixes(verdict, mode, batch, base.ranks, straggler)
    if step < SHORT_STEP:
        advice = (f"a step takes {step * 1000:.1f} ms: at that size per-step overhead dominates and the shares are "
                  "mostly noise; raise the per-replica batch (or steps_per_execution) first, then diagnose again",
                  *advice)
    return Diagnosis(mode, tuple(runs), verdict, shares, efficiency, straggler, bandwidth, batch, advice,
                     summary(verdict, step, shares, straggler, bandwidth))


def _bandwidth(base: VariantRun, comm_seconds: float) -> Bandwidth | None:
    params = next((t.params for t in base.timings if t.params), None)
    if not params or base.ranks < 2:
        return None
    n = base.ranks
    sent = int(2 * (n - 1) / n * params * GRADIENT_BYTES)
    rates = [(t.link["nominal_bits_per_s"], f"{t.link.get('interface') or 'the link'} on {t.node}")
             for t in base.timings if t.link and t.link.get("nominal_bits_per_s")]
    nominal, link = min(rates) if rates else (None, "")
    measured = sent / comm_seconds if comm_seconds >= MIN_COMM_SECONDS else None
    return Bandwidth(sent, measured, nominal, link)


def _efficiency(base: VariantRun, alone: VariantRun | None, batch: int | None) -> float | None:
    """Throughput on every node over n times one node's (per sample where both batches are known)."""
    nodes = len(base.nodes)
    if not _usable(alone) or nodes < 2:
        return None
    one_batch, all_batch = alone.batch or batch, base.batch or batch
    if one_batch and all_batch:
        return (all_batch / base.step_time) / (nodes * one_batch / alone.step_time)
    return alone.step_time / base.step_time / nodes * (base.ranks / max(alone.ranks, 1))


def samples_per_s(run: VariantRun, batch: int | None) -> float | None:
    if not run.measured:
        return None
    b = run.batch or batch
    return b / run.step_time if b else None


def fixes(verdict: str, mode: str, batch: int | None, ranks: int, straggler: Straggler | None) -> tuple[str, ...]:
    """What to try, most effective first, for the bottleneck found."""
    bigger = (f"global batch {batch} -> {2 * batch}, {batch // max(ranks, 1)} -> {2 * batch // max(ranks, 1)} "
              "per replica" if batch else "twice the per-replica batch")
    large_batch = ("with a bigger batch, scale the learning rate with it, warm it up over the first epochs "
                   "(tfdist.callbacks.LearningRateWarmup), and past a few thousand examples per step try a "
                   "large-batch optimizer (keras.optimizers.Lamb)")
    if verdict == COMMUNICATION:
        lines = [f"raise the per-replica batch so each all-reduce carries more samples ({bigger})",
                 "optimizations.aggregation_frequency: 4 all-reduces every 4th step (4x fewer collectives, "
                 "an effective batch 4x the global one)"]
        lines.append("optimizations.gradient_compression: fp16 halves the bytes on the wire" if mode == "horovod"
                     else "distribution.mode: horovod with optimizations.gradient_compression: fp16 halves the "
                          "bytes on the wire")
        return (*lines, large_batch)
    if verdict == INPUT:
        return ("overlap input with training: dataset.prefetch(tf.data.AUTOTUNE) at the end of the pipeline",
                "decode in parallel: dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE)",
                "cache what does not change: dataset.cache() after decoding (memory, or a file on local disk)",
                "read from local disk, not a shared one: tfdist.data.download(..., scope='node') copies once per node")
    if verdict == UNDETERMINED:
        return ("no variant beside the baseline could be measured (each one's note says why): the input and "
                "all-reduce variants change Keras fit; a custom loop can time its own runs with and without its "
                "collective (e.g. DistributedDataParallel's no_sync()) and on a fixed batch",)
    if verdict == STRAGGLER and straggler is not None:
        return (f"rank {straggler.rank} on {straggler.node} is {slower(straggler)} on its own: look at "
                f"that node (other processes with top, a throttled GPU with nvidia-smi -q -d PERFORMANCE)",
                "keep that node out until it is fixed: stop its agent (`tfdist agent`), and the job's next run "
                "is placed on the others",
                "if its data shard is bigger or slower to read, even the shards out")
    return (f"compute-bound: scaling out to more nodes helps; raise the per-replica batch while it fits in memory "
            f"({bigger})", "on GPUs: mixed precision (keras.mixed_precision.set_global_policy('mixed_float16')) "
            "and XLA (model.compile(jit_compile=True))", large_batch)


def slower(straggler: Straggler) -> str:
    """How much slower, as people say it: "45% slower", or "25x as slow" past twice."""
    if straggler.slower_by >= 1:
        return f"{1 + straggler.slower_by:.1f}x as slow"
    return f"{straggler.slower_by:.0%} slower"


def summary(verdict: str, step: float, shares: Mapping[str, float | None], straggler: Straggler | None,
            bandwidth: Bandwidth | None) -> str:
    said = {COMMUNICATION: "all-reduce", INPUT: "waiting for input", STRAGGLER: "waiting for a slow rank"}
    parts = [f"{said[k]} {v:.0%}" for k, v in shares.items() if v is not None]
    if verdict == UNDETERMINED:
        return f"undetermined: a step takes {step * 1000:.0f} ms; nothing beside the baseline was measured"
    line = f"{verdict}-bound: a step takes {step * 1000:.0f} ms" + (f"; of it {', '.join(parts)}" if parts else "")
    if verdict == STRAGGLER and straggler:
        line += (f"; rank {straggler.rank} on {straggler.node}, on its own, is {slower(straggler)} compared with "
                 "the others")
    if verdict == COMMUNICATION and bandwidth and bandwidth.measured_bytes_per_s:
        line += f"; the all-reduce moved {bandwidth.measured_bytes_per_s / 1e6:.2f} MB/s"
        if bandwidth.nominal_bits_per_s:
            line += f" over a {bandwidth.nominal_bits_per_s / 1e9:g} Gb/s link ({bandwidth.link})"
    return line


def to_json(d: Diagnosis) -> dict[str, Any]:
    """The --json form (docs/json.md: schema tfdist.diagnose/1)."""
    base = next(r for r in d.variants if r.name == BASELINE)
    return {
        "schema": "tfdist.diagnose/1", "mode": d.mode, "nodes": list(base.nodes), "ranks": base.ranks,
        "variants": [{"name": r.name, "job": r.job, "nodes": list(r.nodes), "ranks": r.ranks,
                      "steps": min((len(t.times) for t in r.timings), default=0),
                      "step_time_s": r.step_time if r.measured else None,
                      "samples_per_s": samples_per_s(r, d.batch),
                      "rank_step_time_s": {str(t.rank): t.median for t in r.timings if t.times},
                      "skipped": r.skipped or r.not_applied()} for r in d.variants],
        "shares": dict(d.shares), "scaling_efficiency": d.scaling_efficiency,
        "straggler": dataclasses.asdict(d.straggler) if d.straggler else None,
        "bandwidth": dataclasses.asdict(d.bandwidth) if d.bandwidth else None,
        "verdict": d.verdict, "fixes": list(d.fixes), "summary": d.summary,
    }
