"""What the dashboard's page polls and does, as JSON documents built from the coordinator's answers.

Every read and action is one gRPC call with the user's credential, so the coordinator's own access rules
decide (cluster/coordinator/access.py): a user acts on and reads the logs of only their own jobs, an admin
on every job, a monitor reads and changes nothing. `can(...)` mirrors those rules only to decide which
buttons to show; a refusal the coordinator makes anyway comes back as the answer's `error`.

Jobs and agents are json_output's dicts (what `tfdist jobs --json` and `tfdist agents --json` print,
docs/json.md), with a few keys for the page beside them (`nodes`, `can`, `actions`, `tensorboard`).
Reads are shared for READ_TTL seconds: any number of open tabs costs the coordinator at most one ListJobs,
ListAgents and GetJob per job per READ_TTL. Each call is bounded by the client's timeout; a coordinator that
does not answer is an `error` naming it (502), never a hung page.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import threading
import time
from typing import Any, Callable

from cluster.client import experiment_view, json_output, tensorboard_app
from cluster.client.job_selection import ACTIVE, FINISHED, SHOWN_FINISHED, number
from cluster.shared import output_lines
from cluster.shared.credentials import Principal
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist.errors import TfdistError, UserError
from tfdist.event_files import job_event_dir
from tfdist.metrics import CHECKPOINT_RECORD, PREEMPTED_RECORD, RECORD_PREFIX

READ_TTL = 1.0  # seconds a coordinator's answer is reused for every tab that asks
LOG_PAGE = 1000  # log lines per answer (the page asks again at once while there are more)
MAX_POINTS = 1000  # points per metric curve sent to the page (evenly thinned, the last one kept)
ACTIONS = {"cancel": "cancel", "preempt": "preempt", "resume": "resume"}
CAN_CANCEL = ACTIVE  # QUEUED, STARTING, RUNNING, PAUSED
CAN_PREEMPT = ("QUEUED", "STARTING", "RUNNING")
CAN_RESUME = ("PAUSED",)

# An error's gRPC code (tfdist.errors: each error knows its own) -> the HTTP status the page gets
HTTP_STATUS = {"UNAVAILABLE": 502, "DEADLINE_EXCEEDED": 504, "PERMISSION_DENIED": 403, "NOT_FOUND": 404,
               "INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 409, "UNAUTHENTICATED": 502,
               "RESOURCE_EXHAUSTED": 503}


@dataclasses.dataclass(frozen=True)
class Answer:
    """An HTTP status and the JSON document to send."""

    status: int
    document: dict[str, Any]


def failed(error: TfdistError) -> Answer:
    """A refusal or failure as the page shows it: one line (the coordinator's words, naming it when it does
    not answer) under `error`."""
    return Answer(HTTP_STATUS.get(getattr(error, "grpc_code", ""), 500), {"error": str(error)})


@dataclasses.dataclass(frozen=True)
class Rights:
    """What the coordinator would let this principal do with one job (access.py's rules, for the buttons)."""

    act: bool  # cancel, preempt, resume
    logs: bool
    metrics: bool


def can(principal: Principal, owner: str) -> Rights:
    mine = principal.kind == "admin" or (principal.kind == "user" and owner == principal.name)
    return Rights(act=mine, logs=mine, metrics=mine or principal.kind == "monitor")


def actions(state: str, rights: Rights) -> list[str]:
    """The buttons a job's page shows: what its owner (or an admin) may ask in its state."""
    if not rights.act:
        return []
    return [name for name, states in (("preempt", CAN_PREEMPT), ("resume", CAN_RESUME), ("cancel", CAN_CANCEL))
            if state in states]


class _Shared:
    """Answers reused for `ttl` seconds, one call at a time per key (other askers wait for it)."""

    def __init__(self, ttl: float, clock: Callable[[], float]):
        self.ttl, self.clock = ttl, clock
        self._lock = threading.Lock()
        self._keys: dict[Any, threading.Lock] = {}
        self._answers: dict[Any, tuple[float, Any]] = {}

    def get(self, key, fetch: Callable[[], Any], since: float | None = None):
        return self.get_when(key, fetch, since)[0]

    def get_when(self, key, fetch: Callable[[], Any], since: float | None = None) -> tuple[Any, float]:
        """The answer and when its call began (this clock). `since`: an answer whose call began before that
        moment (or at it: a tie is no proof of order) is not reused (what is read must be newer than what another read said)."""
        with self._lock:
            key_lock = self._keys.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                held = self._answers.get(key)
            if held is not None and self.clock() - held[0] < self.ttl and (since is None or held[0] > since):
                return held[1], held[0]
            began = self.clock()
            answer = fetch()
            with self._lock:
                if len(self._answers) > 256:  # one per job page open; forget them all now and then
                    self._answers.clear()
                self._answers[key] = (began, answer)
            return answer, began

    def forget(self) -> None:
        with self._lock:
            self._answers.clear()

    def forget_key(self, key) -> None:
        with self._lock:
            self._answers.pop(key, None)


def agent_dicts(agents: list[pb.AgentInfo]) -> list[dict[str, Any]]:
    return json_output.agents(agents)["agents"]


def thinned(points: list, most: int = MAX_POINTS) -> list:
    """At most `most` of `points`, evenly spread, the first and the last kept."""
    if len(points) <= most:
        return points
    step = (len(points) - 1) / (most - 1)
    return [points[round(i * step)] for i in range(most)]


class Api:
    """The dashboard's reads and actions for one principal through one client (cluster.shared.rpc.Client)."""

    def __init__(self, client, principal: Principal, *, ttl: float = READ_TTL,
                 clock: Callable[[], float] = time.monotonic, boards: tensorboard_app.Boards | None = None):
        self.client, self.principal = client, principal
        self.shared = _Shared(ttl, clock)
        self.boards = boards or tensorboard_app.Boards()  # the TensorBoards this process serves, by job id

    # ---------------------------------------------------------------- reads
    def session(self, csrf: str) -> Answer:
        return Answer(200, {"principal": {"kind": self.principal.kind, "name": self.principal.name},
                            "coordinator": self.client.address, "csrf": csrf, "read_ttl": self.shared.ttl})

    def _agents(self) -> list[pb.AgentInfo]:
        return self.shared.get("agents", self.client.list_agents)

    def cluster(self) -> Answer:
        try:
            agents = agent_dicts(self._agents())
        except TfdistError as e:
            return failed(e)
        return Answer(200, {"agents": agents, "now": time.time()})

    def jobs(self) -> Answer:
        """As `tfdist jobs --json` without a selection: every active job and the newest SHOWN_FINISHED finished
        ones (oldest first), each with the nodes it holds (from ListAgents: a summary carries no placement)."""
        try:
            active, finished = self.shared.get("jobs", lambda: (
                self.client.jobs(ACTIVE, 0, True), self.client.jobs(FINISHED, SHOWN_FINISHED, True)))
            agents = self._agents()
        except TfdistError as e:
            return failed(e)
        held: dict[str, list[str]] = {}
        for agent in agents:
            for job_id in agent.jobs:
                held.setdefault(job_id, []).append(agent.name)
        listed = sorted([*active, *finished], key=number)
        document = json_output.jobs(listed, max(finished.total - len(finished), 0))
        for shown in document["jobs"]:
            rights = can(self.principal, shown["owner"])
            shown["nodes"] = [p["node"] for p in shown["placement"]] or held.get(shown["id"], [])
            shown["actions"] = actions(shown["state"], rights)
        document["now"] = time.time()
        return Answer(200, document)

    def job(self, job_id: str) -> Answer:
        try:
            message = self.shared.get(("job", job_id), lambda: self.client.job(job_id))
        except TfdistError as e:
            return failed(e)
        shown = json_output.job(message)
        rights = can(self.principal, message.owner)
        shown["can"] = dataclasses.asdict(rights)
        shown["actions"] = actions(message.state, rights)
        shown["tensorboard"] = self._tensorboard_info(message, rights)
        shown["now"] = time.time()
        return Answer(200, shown)

    def logs(self, job_id: str, after: int, rank: int) -> Answer:
        """The job's lines after seq `after` (every rank, or `rank`), a page at a time; the page polls with the
        last seq it got, as `tfdist logs -f` does. Each line's text as a terminal shows it (colour codes dropped),
        and `noise`: TensorFlow's start-up chatter and known harmless warnings, which the page hides as `tfdist
        launch` does until asked (cluster/shared/output_lines.py; judged within one answer)."""
        try:
            answer = self.client.logs(job_id, after_seq=after, rank=rank, limit=LOG_PAGE)
        except TfdistError as e:
            return failed(e)
        filters: dict[tuple[int, str], output_lines.NoiseFilter] = {}
        lines = []
        for line in answer.lines:
            judged = line.rank >= 0 and line.stream != output_lines.PROGRESS
            noise = judged and filters.setdefault((line.rank, line.stream), output_lines.NoiseFilter()).kind(
                line.text) is output_lines.Kind.NOISE
            lines.append({"seq": line.seq, "rank": line.rank if line.rank >= 0 else None, "stream": line.stream,
                          "time": json_output.when(line.time), "text": output_lines.clean(line.text), "noise": noise})
        return Answer(200, {"lines": lines, "more": len(answer.lines) >= LOG_PAGE, "job_ended": answer.job_ended})

    def metrics(self, job_id: str) -> Answer:
        """Each metric's curve per rank ([step, value] points in step order, thinned to MAX_POINTS), and
        tfdist's own records: the checkpoints the chief finished and the step a preempted run stopped at."""
        try:
            history = self.shared.get(("metrics", job_id), lambda: self.client.metrics(job_id))
        except TfdistError as e:
            return failed(e)
        curves: dict[str, dict[int, list]] = {}
        checkpoints, preempted = [], []
        for m in history.metrics:
            if m.name == CHECKPOINT_RECORD:
                checkpoints.append({"step": m.step, "path": m.note or None, "attempt": int(m.value),
                                    "time": json_output.when(m.time)})
            elif m.name == PREEMPTED_RECORD:
                preempted.append({"step": m.step, "attempt": int(m.value), "time": json_output.when(m.time)})
            elif not m.name.startswith(RECORD_PREFIX):
                curves.setdefault(m.name, {}).setdefault(m.rank, []).append([m.step, json_output.number(m.value)])
        return Answer(200, {
            "job_id": history.job_id,
            "curves": [{"name": name, "ranks": [{"rank": rank, "points": thinned(points)}
                                                for rank, points in sorted(ranks.items())]}
                       for name, ranks in curves.items()],
            "checkpoints": checkpoints, "preempted": preempted})

    def experiments(self) -> Answer:
        """As `tfdist experiments --json`."""
        try:
            listed = self.shared.get("experiments", self.client.experiments)
        except TfdistError as e:
            return failed(e)
        return Answer(200, {"experiments": [experiment_view.to_json(e) for e in listed], "now": time.time()})

    def experiment(self, ref: str) -> Answer:
        """As `tfdist experiment ID --json`, with each trial's searcher metric against step (one curve a trial,
        where the viewer may read its metrics) and the buttons its owner (or an admin) gets."""
        try:
            message = self.shared.get(("experiment", ref), lambda: self.client.experiment(ref))
            rights = can(self.principal, message.owner)
            curves = []
            for trial in message.trials if rights.metrics else ():
                history = self.shared.get(("metrics", trial.job_id, message.metric),
                                          lambda job_id=trial.job_id: self.client.metrics(job_id, message.metric))
                curves.append({"trial": trial.number, "job_id": trial.job_id, "points": thinned(
                    [[m.step, json_output.number(m.value)] for m in history.metrics if m.rank == 0])})
        except TfdistError as e:
            return failed(e)
        shown = experiment_view.to_json(message)
        shown["curves"] = curves
        shown["actions"] = [] if not rights.act else {"ACTIVE": ["preempt", "cancel"], "PAUSED": ["resume", "cancel"]
                                                       }.get(message.state, [])
        shown["now"] = time.time()
        return Answer(200, shown)

    # ---------------------------------------------------------------- actions
    def act(self, job_id: str, action: str) -> Answer:
        """cancel, preempt or resume, as `tfdist cancel ID` does: the coordinator decides."""
        if action not in ACTIONS:
            return Answer(404, {"error": f"no action {action!r}; one of {', '.join(ACTIONS)}"})
        try:
            state = getattr(self.client, ACTIONS[action])(job_id)
        except TfdistError as e:
            return failed(e)
        finally:
            self.shared.forget()  # the next poll shows what changed
        said = {"preempt": " (preemption requested: the workers stop at a common step, save and exit; the job then "
                           "pauses)" if state != "PAUSED" else ""}.get(action, "")
        what = "experiment" if job_id.startswith("e") else "job"
        return Answer(200, {"state": state, "message": f"{what} {job_id}: {state}{said}"})

    def tensorboard(self, job_id: str) -> tensorboard_app.WsgiApp | Answer:
        """The TensorBoard application on the job's event files, made on the first request for them (the
        server serves it under /tensorboard/ID/ behind the session); or why there is none."""
        app = self.boards.get(job_id)
        if app is not None:
            return app
        try:
            message = self.shared.get(("job", job_id), lambda: self.client.job(job_id))
            if not can(self.principal, message.owner).metrics:
                return Answer(403, {"error": f"job {message.id} belongs to user {message.owner}: only its owner or "
                                             "an admin may read its metrics"})
            if message.id != job_id:
                return Answer(404, {"error": f"job {job_id}'s TensorBoard is at {tensorboard_app.prefix(message.id)}/"})
            tensorboard_app.check_installed()
            return self.boards.open(message.id, tensorboard_app.event_dir(message))
        except TfdistError as e:
            return failed(e)

    def _tensorboard_info(self, job: pb.Job, rights: Rights) -> dict[str, Any]:
        directory = job_event_dir(job.id, job.spec.config.checkpoint_storage, job.spec.working_dir) or None
        installed = importlib.util.find_spec("tensorboard") is not None
        visible = bool(directory and os.path.isdir(directory))
        if not rights.metrics:
            problem = f"job {job.id} belongs to user {job.owner}: only its owner or an admin reads its metrics"
        elif not directory:
            problem = "the job records neither a checkpoint_storage nor a working directory for event files"
        elif not installed:
            problem = "TensorBoard is not installed here: pip install 'tfdist[tensorboard]'"
        elif not visible:
            problem = (f"no event files in {directory} on this machine (yet): the chief writes them with "
                       "MetricsReporter(tensorboard=True); run `tfdist tensorboard` where they are")
        else:
            problem = None
        return {"dir": directory, "command": f"tfdist tensorboard {job.id}", "installed": installed,
                "visible": visible, "url": None if problem else tensorboard_app.prefix(job.id) + "/",
                "problem": problem}


def check_job_id(text: str) -> str:
    """A job reference from a URL: a number or an id (NUMBER-SUFFIX); anything else is refused here."""
    if not text or len(text) > 64 or not all(c.isalnum() or c in "-_." for c in text):
        raise UserError(f"bad job id {text[:64]!r}")
    return text

