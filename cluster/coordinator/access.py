"""Who may call which RPC, on what: the coordinator's access rules as data and one pure decision.

Every RPC of the service descriptors must have a rule here (an RPC without one is refused, and
tests/unit/test_access_matrix.py fails on it), so a new RPC cannot slip past authentication.

- Agent RPCs accept only a node credential, and only for the node its token names: the request's
  agent name must be the credential's. (That the job of a report runs on that node is the core's
  check: it needs the job's placement.) A run credential (a Kubernetes pod's agent) speaks for the node in
  its name too, and reports only about its own job; that its run still holds the node is the gate's check
  (rpc_edge.Gate), and the work it is answered is its run's alone (the AgentService's).
- User RPCs accept user and admin credentials; a user acts on (cancels, preempts, resumes, reads the
  logs and metrics of) only their own jobs, an admin on every job. Job lists and job details are open to
  every user, with environment values never shown back (answers.redact).
- A monitor credential reads: job lists and details, agents, metrics. It changes nothing and reads no logs
  (logs may hold anything a script prints).
- Credentials are an admin's alone to issue, list and revoke (credential_book.py).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from cluster.shared.credentials import RUN_KIND, Principal, parse_run_name
from tfdist.errors import PermissionDeniedError

NODE, USER, ADMIN, MONITOR, RUN = "node", "user", "admin", "monitor", RUN_KIND
JOB_REPORTS = ("ReportExit", "PushLogs", "ReportMetrics")  # node RPCs about one job (request.job_id)


@dataclasses.dataclass(frozen=True)
class Rule:
    kinds: frozenset[str]  # credential kinds that may call it
    owned: bool = False  # a user credential only on the user's own jobs (request.job_id)
    agent_field: Callable[[object], str] | None = None  # node RPCs: the agent name the request claims


def _rule(*kinds: str, owned: bool = False, agent_field=None) -> Rule:
    return Rule(frozenset(kinds), owned, agent_field)


READ = (USER, ADMIN, MONITOR)
ACT = (USER, ADMIN)

RULES: dict[str, Rule] = {
    # service Coordinator: users
    "SubmitJob": _rule(*ACT),
    "GetJob": _rule(*READ),
    "ListJobs": _rule(*READ),
    "ListAgents": _rule(*READ),
    "CancelJob": _rule(*ACT, owned=True),
    "PreemptJob": _rule(*ACT, owned=True),
    "ResumeJob": _rule(*ACT, owned=True),
    "GetLogs": _rule(*ACT, owned=True),
    "GetMetrics": _rule(*READ, owned=True),
    "GetExperiment": _rule(*READ),
    "ListExperiments": _rule(*READ),
    "IssueCredential": _rule(ADMIN),
    "ListCredentials": _rule(ADMIN),
    "RevokeCredential": _rule(ADMIN),
    # service AgentService: nodes, each only as itself
    "Register": _rule(NODE, RUN, agent_field=lambda r: r.agent.name),
    "Heartbeat": _rule(NODE, RUN, agent_field=lambda r: r.agent),
    "WaitForWork": _rule(NODE, RUN, agent_field=lambda r: r.agent),
    "ReportExit": _rule(NODE, RUN, agent_field=lambda r: r.agent),
    "PushLogs": _rule(NODE, RUN, agent_field=lambda r: r.agent),
    "ReportMetrics": _rule(NODE, RUN, agent_field=lambda r: r.agent),
    # an agent's /metrics asks who a scraper's token names (the agent holds no secret to check it with)
    "CheckScrapeToken": _rule(NODE, RUN, agent_field=lambda r: r.agent),
}


def decide(method: str, principal: Principal, request, owner_of: Callable[[str], str | None]) -> None:
    """Raises PermissionDeniedError unless `principal` may make this call. `owner_of(job_ref)` is the
    owner of the job a request names (None: no such job, left to the handler's NOT_FOUND)."""
    rule = RULES.get(method)
    if rule is None:
        raise PermissionDeniedError(f"{method} has no access rule; refused")
    if principal.kind not in rule.kinds:
        allowed = [k for k in (USER, ADMIN, MONITOR, NODE, RUN) if k in rule.kinds]
        kinds = allowed[0] if len(allowed) == 1 else f"{', '.join(allowed[:-1])} or {allowed[-1]}"
        raise PermissionDeniedError(f"{method} needs {'an' if kinds.startswith('admin') else 'a'} {kinds} credential; "
                                    f"yours is a {principal.kind} credential ({principal.name})")
    if rule.agent_field is not None:
        claimed = rule.agent_field(request)
        run = parse_run_name(principal.name) if principal.kind == RUN else None
        if principal.kind == RUN and run is None:
            raise PermissionDeniedError(f"run credential {principal.name!r} names no run (NODE@JOB+ATTEMPT)")
        node = run[0] if run is not None else principal.name
        if claimed != node:
            raise PermissionDeniedError(f"{principal.kind} credential {principal.name!r} cannot speak for node {claimed!r}")
        if run is not None and method in JOB_REPORTS and request.job_id != run[1]:
            raise PermissionDeniedError(f"run credential {principal.name!r} cannot report for job {request.job_id!r}")
    if rule.owned and principal.kind == USER:
        owner = owner_of(request.job_id)
        if owner is not None and owner != principal.name:
            whose = f"user {owner}" if owner else "no recorded owner (submitted before owners were kept)"
            what = "experiment" if request.job_id[:1] == "e" else "job"
            raise PermissionDeniedError(f"{what} {request.job_id} belongs to {whose}: only its owner or an admin "
                                        f"may {_verb(method)} it")


def _verb(method: str) -> str:
    return {"CancelJob": "cancel", "PreemptJob": "preempt", "ResumeJob": "resume", "GetLogs": "read the logs of",
            "GetMetrics": "read the metrics of"}.get(method, method)
