"""`tfdist diagnose`'s executor: runs the variants of a job one after another, each a real job on the same
cluster (a coordinator's, or this machine through an embedded one), reads back every rank's timing from the
job's metrics (tfdist/diagnose.py sends them), and cancels the variant once every training rank has sent
its own. The verdict is cluster/shared/diagnosis.py's; this file only runs things and waits, each wait bounded
and naming what did not come."""

from __future__ import annotations

import dataclasses
import secrets
import sys
import time
from typing import Callable, Mapping, Sequence

from cluster.shared import diagnosis, jobspec, modes
from cluster.shared.config import ExperimentConfig
from cluster.shared.diagnosis import RankTiming, VariantRun
from cluster.shared.modes import SuccessRule, auto
from tfdist import diagnose as worker_side
from tfdist.modes import worker_mode

POLL = 0.5  # seconds between looks at a variant's job
END_WAIT = 60.0  # seconds a canceled variant may take to end before the next one starts anyway
ACTIVE = ("QUEUED", "STARTING", "RUNNING")


@dataclasses.dataclass(frozen=True)
class Settings:
    steps: int = 20  # timed steps per rank
    warmup: int = 5  # steps before them, not timed
    timeout: float = 240.0  # seconds one variant may take from submit to every rank's timing
    variants: tuple[str, ...] = diagnosis.VARIANTS
    run: str = ""  # names this diagnose in each variant's job (the dashboard groups them by it)
    of: str = ""  # the existing job the variants re-run (its coordinator fills in its hidden environment values)


def variant_config(config: ExperimentConfig, variant: str, settings: Settings,
                   slots: int | None = None, nodes: Sequence[str] = ()) -> ExperimentConfig:
    """The job of one variant: the same config, the variant named in it (its workers are told) and in its name, no
    restarts; `slots` (one_node): fewer slots, and a configured global batch cut with them so each replica
    keeps its batch (weak scaling); `nodes`: the only nodes it may run on (the baseline's)."""
    suffix = f" (diagnose: {variant})"
    changes: dict = {"diagnose": {"variant": variant, "steps": settings.steps, "warmup": settings.warmup,
                                  "run": settings.run, **({"nodes": list(nodes)} if nodes else {}),
                                  **({"of": settings.of} if settings.of else {})},
                     "max_restarts": 0, "name_given": True,
                     "name": (config.name or "job")[:256 - len(suffix)] + suffix}
    if slots is not None and slots != config.slots_per_trial:
        changes["slots_per_trial"] = slots
        batch = config.global_batch_size
        if isinstance(batch, int) and not isinstance(batch, bool):
            changes["hyperparameters"] = {**config.hyperparameters,
                                          "global_batch_size": max(1, batch * slots // config.slots_per_trial)}
    return dataclasses.replace(config, **changes)


def expected_ranks(mode: str, size: int) -> int:
    """How many ranks train, and so send a timing: the chief alone in parameter-server mode."""
    return 1 if modes.planner(mode).success is SuccessRule.CHIEF else size


def timings_from_rows(rows: Sequence, node_of: Mapping[int, str], why: Mapping[int, str]) -> list[RankTiming]:
    """Each rank's timing from its rows (those whose facts arrived: they are sent last)."""
    times: dict[int, dict[int, float]] = {}
    facts: dict[int, dict[str, float]] = {}
    for row in rows:
        if row.name == worker_side.STEP_RECORD:
            times.setdefault(row.rank, {})[row.step] = row.value
        elif row.name.startswith(worker_side.RECORD):
            facts.setdefault(row.rank, {})[row.name[len(worker_side.RECORD):]] = row.value
    made = []
    for rank in sorted(facts):
        said = facts[rank]
        number = (lambda k: int(said[k]) if said.get(k) else None)
        bits = number("link_bits_per_s")
        made.append(RankTiming(rank, node_of.get(int(said.get("node_rank", 0)), ""),
                               tuple(v for _, v in sorted(times.get(rank, {}).items())),
                               applied=bool(said.get("applied", 1)), why=why.get(rank, ""),
                               batch=number("batch"), params=number("params"),
                               keras_fit=bool(said.get("keras_fit", 1)),
                               link={"interface": "", "nominal_bits_per_s": bits} if bits else None))
    return made


def why_from_lines(lines) -> dict[int, str]:
    """Each rank's own line on why its variant was not applied (tfdist/diagnose.py writes it to stderr)."""
    found: dict[int, str] = {}
    for line in lines:
        at = line.text.find(worker_side.WHY_PREFIX)
        if at >= 0:
            said = line.text[at + len(worker_side.WHY_PREFIX):].strip()
            found.setdefault(line.rank, said.split(worker_side.NOT_APPLIED, 1)[-1])
    return found


class VariantRunner:
    """Runs variants through `client` (a gRPC Client or a local launch's in-process one); `say` prints progress."""

    def __init__(self, client, settings: Settings, say: Callable[[str], None], working_dir: str = "",
                 clock: Callable[[], float] = time.monotonic, pause: Callable[[float], None] = time.sleep):
        self.client, self.settings, self.say, self.working_dir = client, settings, say, working_dir
        self.clock, self.pause = clock, pause

    def run(self, config: ExperimentConfig, variant: str, slots: int | None = None,
            nodes: Sequence[str] = ()) -> VariantRun:
        spec = jobspec.job_spec(variant_config(config, variant, self.settings, slots, nodes),
                                working_dir=self.working_dir, submission_id=secrets.token_hex(16))
        job_id = self.client.submit(jobspec.to_pb(spec))
        self.say(f"{variant}: job {job_id} submitted ({spec.slots} slot{'s' if spec.slots != 1 else ''}); timing "
                 f"{self.settings.steps} steps after {self.settings.warmup}")
        try:
            return self._wait(job_id, variant, spec.distribution_mode)
        finally:
            self._end(job_id)

    def _wait(self, job_id: str, variant: str, mode: str) -> VariantRun:
        deadline = self.clock() + self.settings.timeout
        said_state = ""
        while True:
            job = self.client.job(job_id)
            node_of = {p.node_rank: p.agent for p in job.placement}
            nodes = tuple(p.agent for p in sorted(job.placement, key=lambda p: p.node_rank))
            rows = [m for m in self.client.metrics(job_id).metrics if m.name.startswith(worker_side.RECORD)]
            sizes = [m.value for m in rows if m.name == worker_side.RECORD + "size"]
            timings = timings_from_rows(rows, node_of, {})
            if sizes and len(timings) >= expected_ranks(mode, int(sizes[0])):
                why = self._why(job_id) if not all(t.applied for t in timings) else {}
                return VariantRun(variant, job_id, nodes, int(sizes[0]), tuple(timings_from_rows(rows, node_of, why)))
            if job.state != said_state:
                said_state = job.state
                where = f" on {', '.join(nodes)}" if nodes else ""
                self.say(f"{variant}: job {job_id} {job.state.lower()}{where}"
                         + (f" ({job.waiting_reason})" if job.waiting_reason else ""))
            if job.state not in ACTIVE:
                timed = f" (only rank(s) {', '.join(str(t.rank) for t in timings)} did)" if timings else ""
                why = f": {job.message}" if job.message else ""
                return VariantRun(variant, job_id, nodes, skipped=f"job {job_id} ended {job.state} before every rank "
                                  f"timed {self.settings.steps} steps{timed}{why}")
            if self.clock() >= deadline:
                waited = [str(t.rank) for t in timings]
                return VariantRun(variant, job_id, nodes, skipped=(
                    f"job {job_id} ({job.state}) sent no timing within {self.settings.timeout:g}s"
                    + (f" beyond rank(s) {', '.join(waited)}" if waited else "")
                    + " (raise --variant-timeout, or lower --steps/--warmup)"))
            self.pause(POLL)

    def _why(self, job_id: str) -> dict[int, str]:
        try:
            return why_from_lines(self.client.logs(job_id, 0, -1, 10000).lines)
        except Exception:  # noqa: BLE001 - the reason is a courtesy; the verdict stands without it
            return {}

    def _end(self, job_id: str) -> None:
        """Cancels the variant if it still runs, and waits (bounded) for its nodes to be free for the next."""
        try:
            if self.client.job(job_id).state in ACTIVE:
                self.client.cancel(job_id)
            deadline = self.clock() + END_WAIT
            while self.client.job(job_id).state in ACTIVE:
                if self.clock() >= deadline:
                    self.say(f"job {job_id} did not end within {END_WAIT:g}s of its cancel; going on")
                    return
                self.pause(POLL)
        except Exception as e:  # noqa: BLE001 - the next variant says whether the nodes are free
            self.say(f"could not cancel job {job_id}: {e}")


def run_all(runner: VariantRunner, config: ExperimentConfig) -> list[VariantRun]:
    """baseline first (nothing else is worth running if it cannot be measured), then the others asked for, each
    on the baseline's nodes (one_node: its node_rank 0 node)."""
    runs = [runner.run(config, diagnosis.BASELINE)]
    base = runs[0]
    if not base.measured:
        return runs
    for variant in runner.settings.variants:
        if variant == diagnosis.BASELINE:
            continue
        if variant == diagnosis.ONE_NODE:
            placement = sorted(runner.client.job(base.job).placement, key=lambda p: p.node_rank)
            if len(placement) < 2:
                runs.append(VariantRun(variant, skipped="the job runs on one node"))
                continue
            runs.append(runner.run(config, variant, placement[0].slots, (placement[0].agent,)))
        elif variant in worker_side.CHANGES_FIT and not all(t.keras_fit for t in base.timings):
            runs.append(VariantRun(variant, skipped="the script does not train with Keras fit, which this variant "
                                                    "changes (its baseline showed no fit)"))
        elif variant == diagnosis.NO_COMMUNICATION and (why := cannot_cut(base.ranks, auto.decide(config).mode)):
            runs.append(VariantRun(variant, skipped=why))
        else:
            runs.append(runner.run(config, variant, nodes=base.nodes))
    return runs


def cannot_cut(ranks: int, mode: str) -> str:
    """Why the no_communication variant would measure nothing new, known before it runs ("": it may)."""
    if ranks < 2:
        return "one rank: nothing to all-reduce"
    why = worker_mode(mode).no_communication_cut
    return f"mode {mode}: {why}" if why else ""


def stderr_say(line: str) -> None:
    sys.stderr.write(f"tfdist: diagnose: {line}\n")
    sys.stderr.flush()
