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
import signal
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
    """One rank's measurement: how long each timed step took, and what the variant changed."""
    plan: Plan
    step_seconds: list[float] = dataclasses.field(default_factory=list)  # each timed report's interval
    counted: int = 0  # new steps reported
    last_step: int = -1
    last_end: float | None = None  # perf_counter at the last new step's end
    gap: bool = True  # something else ran since that end (the start, a validation, another fit): not a step
    per_report: int = 1  # training steps per report (Keras's steps_per_execution)
    applied: bool = True  # the variant's change took effect (False: `why`); see `__post_init__`
    why: str = ""
    batch: int | None = None  # the global batch, where the input shows it
    params: int | None = None  # trainable parameters (Keras models)
    sent: bool = False
    keras_fit: bool = False  # Keras fit ran (compat/keras_diagnose.py): the variants that change fit can

    def __post_init__(self):
        if self.plan.variant in CHANGES_FIT:  # until `fit` starts and the change is made
            self.applied, self.why = False, "the script does not train with Keras fit, which this variant changes"

    def interrupted(self) -> None:
        """Something other than a training step runs now (fit starting, a validation): the next step's
        interval would include it, so that step is not timed."""
        self.gap = True

    def step_done(self, step: int, now: float) -> bool:
        """Takes in a reported step (a repeated one, e.g. from validation, is not a step); True once `steps`
        are timed. The first `warmup` steps are not (tracing, the first all-reduce, filling the input
        pipeline), nor a step after a gap: its start is not known."""
        if step <= self.last_step or self.done:
            return self.done
        self.last_step, self.counted = step, self.counted + 1
        if not self.gap and self.last_end is not None and self.counted > self.plan.warmup:
            self.step_seconds.append(now - self.last_end)
        self.gap, self.last_end = False, now
        return self.done

    @property
    def done(self) -> bool:
        return len(self.step_seconds) >= self.plan.steps

    def times(self) -> list[float]:
        """Seconds per training step (a report of several steps, e.g. Keras's steps_per_execution, split)."""
        return [t / self.per_report for t in self.step_seconds]

    def facts(self) -> dict[str, float]:
        """What the record says besides the step times, as numbers (the coordinator keeps metrics as numbers)."""
        facts = {"node_rank": float(os.environ.get(envvars.NODE_RANK, "0")), "applied": float(self.applied),
                 "size": float(os.environ.get(envvars.SIZE, "1")), "keras_fit": float(self.keras_fit)}
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
    """Called with each new step (tfdist.progress); True once this rank's measurement is complete (sent now or
    before). The caller then holds the rank (`hold_until_stopped`) where that is the training thread: a custom
    loop's own report; Keras `fit` in its hooks (compat/keras_diagnose.py: its reports may come from a
    callback thread)."""
    measured = timing()
    if measured is None:
        return False
    with _lock:
        done = measured.step_done(step, time.perf_counter())
        if done and not measured.sent:
            measured.sent = True
            send(measured)
    return done


def interrupted() -> None:
    """Something other than training runs now (see Timing.interrupted)."""
    measured = timing()
    if measured is not None:
        with _lock:
            measured.interrupted()


def hold_until_stopped() -> None:
    """This rank has sent its timing: it waits for the variant's cancel (its workers are stopped), doing
    nothing the script would do after training."""
    sys.stderr.write(f"{WHY_PREFIX}rank {os.environ.get(envvars.RANK, '0')} timed its steps and waits to be "
                     "stopped\n")
    sys.stderr.flush()
    sys.stdout.flush()
    if threading.current_thread() is threading.main_thread():  # the cancel's SIGTERM ends it at once (TensorFlow's
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # MWMS takes SIGTERM as a preemption notice and lives on)
    while True:
        time.sleep(3600)


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
