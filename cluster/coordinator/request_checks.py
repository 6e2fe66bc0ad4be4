"""The coordinator's edge for every request field that is not a job's config (a spec has its own rules,
the config's `check_config`, through jobspec.from_pb): ids, sequence numbers, ranks, names, list lengths,
string sizes and NUL bytes, against the limits of cluster/shared/limits.py.

Pure functions, one per RPC, keyed by the method's name. server._guard calls `check(method, request)` after
the caller is authenticated and before the handler: a decodable message with a bad value is answered
INVALID_ARGUMENT naming the field, the value and the limit (BadRequest), never an exception deeper down
(a 20-digit job number reaching SQLite was `OverflowError` answered INTERNAL). Each check is O(the message),
outside the coordinator's lock, and bounds what the handler will then do under it.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Any, Callable, Sequence

from cluster.coordinator.values import BadRequest
from cluster.shared import limits
from cluster.shared.model import JobState
from tfdist.metrics import MAX_NAME as METRIC_NAME_CHARS

JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*", re.ASCII)  # "<seq>-<hex>", or the number alone
AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]*", re.ASCII)  # a node credential's name
MAX_PORT = 65_535
MAX_PREFIX_LEN = 128
MAX_LAST_LINES = 1_000  # a failed worker's last lines in one exit report


def check(method: str, request: Any) -> None:
    """Raises BadRequest if a field of `request` (the RPC `method`'s message) is out of bounds."""
    rule = RULES.get(method)
    if rule is not None:
        rule(request)


# ---------------------------------------------------------------- fields

def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def job_id(value: str, where: str = "job_id") -> None:
    if len(value) > limits.MAX_ID_CHARS or not JOB_ID.fullmatch(value):
        raise BadRequest(f"{where}: {_shown(value)} is not a job id (a job's number, or its full id such as "
                         f"12-a3f0; at most {limits.MAX_ID_CHARS} characters); `tfdist jobs` lists them")
    if value.isdigit() and len(value) > limits.MAX_SEQ_DIGITS:
        raise BadRequest(f"{where}: job number {_shown(value)} has more than {limits.MAX_SEQ_DIGITS} digits; no "
                         "job has it")


def agent_name(value: str, where: str = "agent") -> None:
    if len(value) > limits.MAX_AGENT_NAME_CHARS or not AGENT_NAME.fullmatch(value):
        raise BadRequest(f"{where}: {_shown(value)} is not a node name (1-{limits.MAX_AGENT_NAME_CHARS} letters, "
                         "digits and . _ @ + -, starting with a letter or digit)")


def text(value: str, where: str, max_chars: int = limits.MAX_LABEL_CHARS) -> None:
    problem = limits.text_problem(value, max_chars)
    if problem:
        raise BadRequest(f"{where}: {problem}, got {_shown(value)}")


def number(value: int, where: str, low: int, high: int) -> None:
    problem = limits.int_problem(value, low, high)
    if problem:
        raise BadRequest(f"{where}: {problem}")


def finite(value: float, where: str) -> None:
    if not math.isfinite(value):
        raise BadRequest(f"{where}: expected a finite number, got {value}")


def items(values: Sequence, where: str, max_items: int = limits.MAX_ITEMS) -> Sequence:
    if len(values) > max_items:
        raise BadRequest(f"{where}: {len(values):,} items; the limit is {max_items:,} per message")
    return values


def seq(value: int, where: str) -> None:
    number(value, where, 0, limits.MAX_SEQ)


def rank(value: int, where: str, low: int = 0) -> None:
    number(value, where, low, limits.MAX_RANK)


def wait_ms(value: int, where: str = "wait_ms") -> None:
    number(value, where, 0, limits.MAX_WAIT_MS)


# ---------------------------------------------------------------- messages within messages

def _running(task, where: str) -> None:
    job_id(task.job_id, f"{where}.job_id")
    for field in ("ranks", "joined_ranks"):
        for i, r in enumerate(items(getattr(task, field), f"{where}.{field}")):
            rank(r, f"{where}.{field}[{i}]")
    for i, p in enumerate(items(task.progress, f"{where}.progress")):
        rank(p.rank, f"{where}.progress[{i}].rank")
        finite(p.age, f"{where}.progress[{i}].age")
    number(task.attempt, f"{where}.attempt", 0, 2 ** 31 - 1)


def _job_ids(values: Sequence[str], where: str) -> None:
    for i, value in enumerate(items(values, where)):
        job_id(value, f"{where}[{i}]")


def _agent_info(info, where: str = "agent") -> None:
    agent_name(info.name, f"{where}.name")
    number(info.slots, f"{where}.slots", 1, limits.MAX_SLOTS)
    for i, gpu in enumerate(items(info.gpus, f"{where}.gpus", limits.MAX_GPUS)):
        number(gpu.index, f"{where}.gpus[{i}].index", 0, limits.MAX_GPUS - 1)
        text(gpu.uuid, f"{where}.gpus[{i}].uuid")
        text(gpu.name, f"{where}.gpus[{i}].name")
    for i, address in enumerate(items(info.addresses, f"{where}.addresses", 1_024)):
        at = f"{where}.addresses[{i}]"
        try:
            ip = ipaddress.ip_address(address.ip)
        except ValueError:
            raise BadRequest(f"{at}.ip: {_shown(address.ip)} is not an IP address") from None
        number(address.prefix_len, f"{at}.prefix_len", 0, 32 if ip.version == 4 else MAX_PREFIX_LEN)
        text(address.interface, f"{at}.interface")


def _lines(lines, where: str) -> None:
    for i, line in enumerate(items(lines, where)):
        rank(line.rank, f"{where}[{i}].rank", low=-1)
        text(line.stream, f"{where}[{i}].stream")
        finite(line.time, f"{where}[{i}].time")


def _metrics(metrics, where: str) -> None:
    for i, metric in enumerate(items(metrics, where)):
        rank(metric.rank, f"{where}[{i}].rank", low=-1)
        text(metric.name, f"{where}[{i}].name", METRIC_NAME_CHARS)  # the writer's own limit (tfdist.metrics)
        text(metric.note, f"{where}[{i}].note", 4_096)
        finite(metric.time, f"{where}[{i}].time")


# ---------------------------------------------------------------- one rule per RPC

def _by_job(request) -> None:
    job_id(request.job_id)


def _list_jobs(request) -> None:
    number(request.page_size, "page_size", 0, 2 ** 31 - 1)  # the server caps it
    text(request.page_token, "page_token", limits.MAX_PAGE_TOKEN_CHARS)
    known = {s.value for s in JobState}
    for i, state in enumerate(items(request.states, "states", len(known))):
        if state not in known:
            raise BadRequest(f"states[{i}]: unknown job state {_shown(state)}; one of {', '.join(sorted(known))}")


def _get_logs(request) -> None:
    job_id(request.job_id)
    seq(request.after_seq, "after_seq")
    rank(request.rank, "rank", low=-1)
    number(request.limit, "limit", 0, 2 ** 31 - 1)  # the server caps it
    wait_ms(request.wait_ms)


def _experiment_id(value: str) -> None:
    if len(value) > limits.MAX_ID_CHARS or not JOB_ID.fullmatch(value):
        raise BadRequest(f"experiment_id: {_shown(value)} is not an experiment id (eN, or its full id such as "
                         f"e3-a3f0; at most {limits.MAX_ID_CHARS} characters); `tfdist experiments` lists them")


def _get_metrics(request) -> None:
    job_id(request.job_id)
    text(request.name, "name")


MAX_CSR_BYTES = 8192  # a certificate request for one EC key and a few names is under 1 KiB
MAX_USAGE_BYTES = 1 << 30 << 20  # a petabyte: more than any node's memory
MAX_GPUS = 64


def _register(request) -> None:
    _agent_info(request.agent)
    for i, task in enumerate(items(request.running, "running")):
        _running(task, f"running[{i}]")
    _job_ids(request.leased_jobs, "leased_jobs")
    if len(request.metrics_csr) > MAX_CSR_BYTES:
        raise BadRequest(f"metrics_csr: {len(request.metrics_csr):,} bytes; a certificate request has at most "
                         f"{MAX_CSR_BYTES:,}")
    if request.agent.metrics_address:
        text(request.agent.metrics_address, "agent.metrics_address")


def _usage(usage, where: str) -> None:
    finite(usage.time, f"{where}.time")
    for i, gpu in enumerate(items(usage.gpus, f"{where}.gpus", MAX_GPUS)):
        at = f"{where}.gpus[{i}]"
        number(gpu.index, f"{at}.index", 0, MAX_GPUS * 16)
        finite(gpu.utilization, f"{at}.utilization")
        if not 0.0 <= gpu.utilization <= 1.0:
            raise BadRequest(f"{at}.utilization: {gpu.utilization} is not a share between 0 and 1")
        number(gpu.memory_used_bytes, f"{at}.memory_used_bytes", 0, MAX_USAGE_BYTES)
        number(gpu.memory_total_bytes, f"{at}.memory_total_bytes", 0, MAX_USAGE_BYTES)
    for i, job in enumerate(items(usage.jobs, f"{where}.jobs")):
        at = f"{where}.jobs[{i}]"
        job_id(job.job_id, f"{at}.job_id")
        finite(job.cpu_seconds, f"{at}.cpu_seconds")
        if job.cpu_seconds < 0:
            raise BadRequest(f"{at}.cpu_seconds: {job.cpu_seconds} is negative")
        number(job.rss_bytes, f"{at}.rss_bytes", 0, MAX_USAGE_BYTES)
        number(job.processes, f"{at}.processes", 0, 1 << 20)


def _check_scrape_token(request) -> None:
    agent_name(request.agent)
    if len(request.token) > 1024:
        raise BadRequest(f"token: {len(request.token):,} characters; a tfdist token has at most 1,024")


def _heartbeat(request) -> None:
    agent_name(request.agent)
    if request.HasField("usage"):
        _usage(request.usage, "usage")
    for i, task in enumerate(items(request.running, "running")):
        _running(task, f"running[{i}]")
    _job_ids(request.leased_jobs, "leased_jobs")
    for i, result in enumerate(items(request.port_results, "port_results")):
        job_id(result.job_id, f"port_results[{i}].job_id")
        for k, port in enumerate(items(result.busy_ports, f"port_results[{i}].busy_ports")):
            number(port, f"port_results[{i}].busy_ports[{k}]", 0, MAX_PORT)
    for i, result in enumerate(items(request.probe_results, "probe_results")):
        job_id(result.job_id, f"probe_results[{i}].job_id")
        for k, failure in enumerate(items(result.failures, f"probe_results[{i}].failures")):
            at = f"probe_results[{i}].failures[{k}]"
            agent_name(failure.target.peer, f"{at}.target.peer")
            text(failure.target.address, f"{at}.target.address")
            number(failure.target.port, f"{at}.target.port", 0, MAX_PORT)
            text(failure.error, f"{at}.error", limits.MAX_MESSAGE_CHARS)


def _wait_for_work(request) -> None:
    agent_name(request.agent)
    seq(request.seen, "seen")
    wait_ms(request.wait_ms)


def _report_exit(request) -> None:
    agent_name(request.agent)
    job_id(request.job_id)
    exit_ = request.exit
    rank(exit_.rank, "exit.rank", low=-1)
    for i, line in enumerate(items(exit_.last_lines, "exit.last_lines", MAX_LAST_LINES)):
        text(line, f"exit.last_lines[{i}]", limits.MAX_MESSAGE_CHARS)
    text(exit_.reason, "exit.reason", limits.MAX_MESSAGE_CHARS)
    number(exit_.attempt, "exit.attempt", 0, 2 ** 31 - 1)


def _shipped(request) -> None:
    """What PushLogs and ReportMetrics share: who sends, for which job, from which source and sequence."""
    agent_name(request.agent)
    job_id(request.job_id)
    text(request.source, "source")
    seq(request.first_seq, "first_seq")


def _push_logs(request) -> None:
    _shipped(request)
    _lines(request.lines, "lines")


def _report_metrics(request) -> None:
    _shipped(request)
    _metrics(request.metrics, "metrics")


def _credential_name(request) -> None:
    text(request.kind, "kind", 16)
    text(request.name, "name", 128)


def _issue_credential(request) -> None:
    _credential_name(request)
    finite(request.days, "days")


RULES: dict[str, Callable[[Any], None]] = {
    "SubmitJob": lambda request: None,  # the spec: jobspec.from_pb(validate=True) runs check_config
    "GetJob": _by_job, "CancelJob": _by_job, "PreemptJob": _by_job, "ResumeJob": _by_job,
    "ListJobs": _list_jobs, "GetLogs": _get_logs, "GetMetrics": _get_metrics, "ListAgents": lambda request: None,
    "GetExperiment": lambda request: _experiment_id(request.experiment_id), "ListExperiments": lambda request: None,
    "IssueCredential": _issue_credential, "ListCredentials": lambda request: None,
    "RevokeCredential": lambda request: _credential_name(request),
    "Register": _register, "Heartbeat": _heartbeat, "WaitForWork": _wait_for_work, "ReportExit": _report_exit,
    "PushLogs": _push_logs, "ReportMetrics": _report_metrics, "CheckScrapeToken": _check_scrape_token,
}
