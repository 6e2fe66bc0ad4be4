"""The edge every RPC passes: who calls (Gate: the credential, then access.decide) and what an error
becomes on the wire (guard: each domain error its status code, anything else logged whole)."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Protocol

import grpc

from cluster.coordinator import access, request_checks
from cluster.coordinator.experiments import views as experiment_views
from cluster.coordinator.core import CoordinatorCore
from cluster.shared.auth import bearer_token
from cluster.shared.credentials import Principal, parse_run_name
from tfdist.errors import NotFoundError, PermissionDeniedError, TfdistError, UnauthenticatedError, UserError

log = logging.getLogger("tfdist.coordinator")
MAX_TOKEN_CHARS = 1024  # a longer token is not verified
NO_CREDENTIAL = ("missing or wrong credential: pass --credentials FILE (or set TFDIST_CREDENTIALS) with a "
                 "credential this coordinator issued")


class Verifier(Protocol):
    """What checks a token: the coordinator's CredentialBook (its authority, expiry and revocations)."""

    def verify(self, token: str) -> Principal | None: ...

    def problem(self, token: str) -> str: ...


def authenticate(verifier: Verifier, metadata) -> Principal | None:
    """Who a call's token names, or None (no token, too long, expired, revoked, or not one this cluster issued)."""
    token = bearer_token(metadata)
    return verifier.verify(token) if token and len(token) <= MAX_TOKEN_CHARS else None


def refusal(verifier: Verifier, metadata) -> str:
    """What a refused caller is told: why its token no longer holds where it is one this cluster signed."""
    token = bearer_token(metadata)
    return (verifier.problem(token) if token and len(token) <= MAX_TOKEN_CHARS else "") or NO_CREDENTIAL


def answer(gate: "Gate", method: str, request, context, handler: Callable[[Any, Principal], Any]):
    """Every RPC passes here: the caller's credential is verified and its role checked (access.RULES) before
    `handler(request, principal)` runs. Domain errors become their status code (each error carries its own);
    anything else is a bug: logged whole, answered with one line. An engine's services call it through
    Front.call."""
    telemetry = gate.core.telemetry
    started = time.perf_counter()
    try:
        principal = gate.check(method, request, context.invocation_metadata())
        request_checks.check(method, request)  # every field in bounds, or INVALID_ARGUMENT naming it
        return handler(request, principal)
    except TfdistError as e:
        if e.grpc_code == "INTERNAL":  # tfdist's own bug (PlanError, InternalError...): keep its stack
            log.exception("%s failed", method)
        telemetry.rpc_errors.labels(method, e.grpc_code).inc()
        context.abort(grpc.StatusCode[e.grpc_code], str(e))
    except Exception as e:
        log.exception("%s failed", method)
        telemetry.rpc_errors.labels(method, "INTERNAL").inc()
        context.abort(grpc.StatusCode.INTERNAL, f"coordinator error in {method}: {type(e).__name__}: {e}")
    finally:
        telemetry.rpc_seconds.labels(method).observe(time.perf_counter() - started)


def guard(fn):
    """A servicer's RPC method through `answer`, the principal handed to it."""
    method = fn.__name__

    def wrapper(self, request, context):
        return answer(self.gate, method, request, context, lambda r, principal: fn(self, r, context, principal))
    wrapper.__name__ = method
    return wrapper


class Gate:
    """Authenticates a call's token (the credential book), then applies access.decide."""

    def __init__(self, verifier: Verifier, core: CoordinatorCore):
        self.verifier, self.core = verifier, core
        self.reader = core.store.reader()  # owners are read without the coordinator's lock (log followers)

    def check(self, method: str, request, metadata) -> Principal:
        principal = authenticate(self.verifier, metadata)
        if principal is None:
            raise UnauthenticatedError(refusal(self.verifier, metadata))
        access.decide(method, principal, request, self._owner_of)
        if principal.kind == access.RUN:
            self._check_run(principal)
        return principal

    def _check_run(self, principal: Principal) -> None:
        """A run credential counts while its run holds its node: that job's current run, placed there."""
        node, job_id, attempt = parse_run_name(principal.name) or ("", "", -1)
        job = self.reader.job(job_id)
        if job is None or job.attempt != attempt or self.core.allocs.get(job_id, node) is None:
            raise PermissionDeniedError(f"run credential {principal.name!r}: that run no longer holds node {node}")

    def _owner_of(self, job_ref: str) -> str | None:
        if job_ref[:1] == "e":  # an experiment: its owner's, as its trials'
            try:
                return experiment_views.find(self.reader, job_ref).owner
            except NotFoundError:
                return None
        try:
            job = self.reader.job(self.core.resolve_job_id(job_ref, self.reader))
        except (NotFoundError, UserError, ValueError, OverflowError):
            return None
        return job.owner if job else None
