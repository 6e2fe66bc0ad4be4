"""`tfdist diagnose`'s worker side: each variant of the job times its training steps, with no change to the
script. The runner (cluster/client/diagnose_run.py) sets TFDIST_DIAGNOSE_* in each variant's environment;
here every rank times the steps it reports (Keras `fit` reports by itself, a custom loop through
`tfdist.report_progress`), and once it has timed `steps` of them after `warmup` it sends one record,
"tfdist.diagnose", with the times, then `fit` stops. The variants that change the job are applied to
`fit` when it starts (tfdist/compat/keras_diagnose.py):
- no_communication: the Keras optimizer all-reduces every CUT_AGGREGATION steps (never, in the measured
  ones), so each rank runs at its own pace: what communication costs, and which rank is slow by itself;
- synthetic_input: fit's tf.data input is its own first batch, held in memory and repeated: what the
  input pipeline costs.
Without TFDIST_DIAGNOSE_VARIANT nothing here runs.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from typing import Any

from tfdist import envvars, metrics

BASELINE = "baseline"
ONE_NODE = "one_node"
NO_COMMUNICATION = "no_communication"
SYNTHETIC_INPUT = "synthetic_input"
VARIANTS = (BASELINE, ONE_NODE, NO_COMMUNICATION, SYNTHETIC_INPUT)
CHANGES_FIT = (NO_COMMUNICATION, SYNTHETIC_INPUT)  # the variants that change the job (compat/keras_diagnose.py)
RECORD = metrics.DIAGNOSE_PREFIX  # "tfdist.diagnose.": kept with the job's metrics (`send`)
STEP_RECORD = RECORD + "step_s"
WHY_PREFIX, NOT_APPLIED = "tfdist: diagnose: ", " was not applied: "  # a rank's line: VARIANT was not applied: WHY
CUT_AGGREGATION = 1000  # no_communication's aggregation_frequency: no all-reduce within the measured steps
MAX_STEPS = CUT_AGGREGATION - 1  # warmup + steps stay below it


@dataclasses.dataclass(frozen=True)
class Plan:
    variant: str
    warmup: int  # steps not timed (tracing, the first all-reduce, filling the input pipeline)
    steps: int  # steps timed after them


def plan_from_env(env=os.environ) -> Plan | None:
    variant = env.get(envvars.DIAGNOSE_VARIANT, "")
    if variant not in VARIANTS:
        return None
    try:
        warmup, steps = int(env.get(envvars.DIAGNOSE_WARMUP, "5")), int(env.get(envvars.DIAGNOSE_STEPS, "20"))
    except ValueError:
        return None
    if warmup < 0 or steps < 1 or warmup + steps > MAX_STEPS:
        return None
    return Plan(variant, warmup, steps)


@dataclasses.dataclass
class Timing:
    """One rank's measurement: the end time of each step it reported, and what the variant changed."""
    plan: Plan
    ends: list[float] = dataclasses.field(default_factory=list)  # perf_counter at each new step's end
    last_step: int = -1
    applied: bool = True  # the variant's change took effect (False: `why`); see `__post_init__`
    why: str = ""
    batch: int | None = None  # the global batch, where the input shows it
    params: int | None = None  # trainable parameters (Keras models)
    sent: bool = False

    def __post_init__(self):
        if self.plan.variant in CHANGES_FIT:  # until `fit` starts and the change is made
            self.applied, self.why = False, "the script does not train with Keras fit, which this variant changes"

    def step_done(self, step: int, now: float) -> bool:
        """Takes in a reported step (a repeated one, e.g. from validation, is not a step); True once
        warmup + steps have ended (the first step's end starts the clock: its own time is tracing)."""
        if step <= self.last_step or self.done:
            return self.done
        self.last_step = step
        self.ends.append(now)
        return self.done

    @property
    def done(self) -> bool:
        return len(self.ends) > self.plan.warmup + self.plan.steps

    def times(self) -> list[float]:
        timed = self.ends[self.plan.warmup:]
        return [b - a for a, b in zip(timed, timed[1:])]

    def facts(self) -> dict[str, float]:
        """What the record says besides the step times, as numbers (the coordinator keeps metrics as numbers)."""
        facts = {"node_rank": float(os.environ.get(envvars.NODE_RANK, "0")), "applied": float(self.applied),
                 "size": float(os.environ.get(envvars.SIZE, "1"))}
        nominal = (link() or {}).get("nominal_bits_per_s")
        for name, value in (("batch", self.batch), ("params", self.params), ("link_bits_per_s", nominal)):
            if value:
                facts[name] = float(value)
        return facts


_lock = threading.Lock()
_timing: Timing | None = None
_checked = False


def timing() -> Timing | None:
    """This process's measurement, when a diagnose variant runs it."""
    global _timing, _checked
    if not _checked:
        plan = plan_from_env()
        _timing, _checked = (Timing(plan) if plan else None), True
    return _timing


def step_reported(step: int) -> bool:
    """Called with each reported step (tfdist.progress); True once this rank's measurement is complete
    (sent now or before): a Keras `fit` then stops."""
    measured = timing()
    if measured is None:
        return False
    with _lock:
        done = measured.step_done(step, time.perf_counter())
        if done and not measured.sent:
            measured.sent = True
            send(measured)
    return done


def send(measured: Timing) -> None:
    """The record: one row per timed step (RECORD + "step_s", step = its index), then the facts; a variant
    that could not be applied says why on the rank's stderr (the runner quotes that line)."""
    if not measured.applied:
        sys.stderr.write(f"{WHY_PREFIX}{measured.plan.variant}{NOT_APPLIED}{measured.why}\n")
        sys.stderr.flush()
    for i, seconds in enumerate(measured.times()):
        metrics.report_record(STEP_RECORD, i, seconds)
    metrics.report_records(measured.last_step, {RECORD + name: value for name, value in measured.facts().items()})


def link() -> dict[str, Any] | None:
    """The interface carrying this node's job address and its nominal rate (Linux's
    /sys/class/net/IF/speed, Mb/s; virtual links report none or their own figure), where known."""
    interface = os.environ.get(envvars.DIAGNOSE_INTERFACE, "")
    if not interface or interface == envvars.NODE_INTERFACE_PLACEHOLDER or "/" in interface:
        return None
    try:
        with open(f"/sys/class/net/{interface}/speed") as f:
            mbits = int(f.read().strip())
    except (OSError, ValueError):
        mbits = -1
    return {"interface": interface, "nominal_bits_per_s": mbits * 1_000_000 if mbits > 0 else None}
