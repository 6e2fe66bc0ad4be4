"""Collectives of small values between a job's ranks: allgather, gather, broadcast, barrier.

They go through the job's key-value store (served by the agent of the job's first node,
cluster/agent/job_store.py), so they work in every mode where every rank runs the script (MWMS,
Horovod, single-node) without TensorFlow or Horovod, and before either is set up. Values are JSON
(or bytes); nothing is unpickled. Every rank must call the same collectives in the same order, as
with MPI: the n-th call of each rank meets the n-th call of the others. Each call waits at most
`timeout` seconds and then names the ranks that did not arrive. At size 1 they return at once.

Every request carries the job run's store secret (TFDIST_STORE_SECRET, put in the worker's environment by
the agent that started it) as the first segment of its path. A store that refuses it, or refuses a value
at one of its limits, is one error naming why (`StoreSecretError`, `StoreLimitError`); a store that does
not answer, or has no room for another connection, is retried for a bounded time (`STORE_PATIENCE`).

A mode whose ranks do not all run the script (ps: only the chief runs it past `tfdist.init()`) builds its
collectives with a `refusal` (tfdist/modes/): every call then says why it cannot work.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import time
from typing import Any

from tfdist import envvars, store_scopes
from tfdist.errors import (InternalError, ResourceExhaustedError, TfdistError, UnauthenticatedError,
                           UnavailableError)

DEFAULT_TIMEOUT = 300.0
MAX_BYTES = 1 << 20  # the store's limit per value
SCOPE = store_scopes.COLLECTIVES
STORE_PATIENCE = 20.0  # seconds a request is retried while the store does not answer or has no room
_RETRIED = (408, 503)  # the store cut a slow request, or closed the connection to make room for others
_LIMITS = (411, 413, 431, 507)  # the store's limits: the reason phrase names which
_SECRET_CHARS = re.compile(r"[A-Za-z0-9_-]*")


class CollectiveError(TfdistError):
    """A collective was misused (a value too big, not JSON-serialisable, or called where it cannot work)."""


class StoreSecretError(UnauthenticatedError):
    """The job's store refused this worker's secret (TFDIST_STORE_SECRET missing, or not this run's)."""


class StoreLimitError(ResourceExhaustedError):
    """The job's store refused a request at one of its limits (value size, total size, keys...)."""


def encode(value: Any) -> bytes:
    """JSON, with bytes as {"__bytes__": base64}."""
    try:
        data = json.dumps(_wrap(value), separators=(",", ":")).encode()
    except (TypeError, ValueError) as e:
        raise CollectiveError(f"collectives carry JSON-serialisable values or bytes: {e}") from None
    if len(data) > MAX_BYTES:
        raise CollectiveError(f"a collective's value is {len(data)} bytes encoded; the limit is {MAX_BYTES}. "
                              "Send small values (paths, metrics, ids), not tensors")
    return data


def decode(data: bytes) -> Any:
    return _unwrap(json.loads(data))


def _wrap(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return {"__bytes__": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, dict):
        return {k: _wrap(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_wrap(v) for v in value]
    return value


def _unwrap(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__bytes__"}:
            return base64.b64decode(value["__bytes__"])
        return {k: _unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap(v) for v in value]
    return value


class Collectives:
    def __init__(self, store: str | None, rank: int, size: int, mode: str = "", timeout: float = DEFAULT_TIMEOUT,
                 secret: str | None = None, refusal: str | None = None, group: str = "", caller: str = "ctx"):
        """`mode`: the name of the job's mode; `secret`: the store's (None: TFDIST_STORE_SECRET of this
        process's environment); `refusal`: why the mode's ranks cannot all take part, in its words (None: they
        can); `group`: a name for a set of processes other than the job's ranks (the `determined` API's own
        groups: the workers a script starts itself), so that its calls never meet the ranks'; `caller`: what the
        script called them as, for the messages."""
        self.rank, self.size, self.mode, self.timeout = rank, size, mode, timeout
        self._group = f"{group}." if group else ""
        self._caller = caller
        self.refusal = refusal
        self._store = store
        self._secret = secret
        self._calls = 0
        self._posted: list[int] = []  # calls whose key of this rank is still in the store

    # ---------------------------------------------------------------- the collectives
    def allgather(self, value: Any) -> list:
        """Every rank's value, in rank order, on every rank."""
        if self.size == 1:
            return [decode(encode(value))]
        return self._exchange("allgather", value)

    def gather(self, value: Any) -> list | None:
        """Every rank's value, in rank order, on the chief (rank 0); None elsewhere."""
        if self.size == 1:
            return [decode(encode(value))]
        values = self._exchange("gather", value)
        return values if self.rank == 0 else None

    def broadcast(self, value: Any = None) -> Any:
        """The chief's value, on every rank (the others' `value` is ignored), as JSON carries it on every rank."""
        if self.size == 1:
            return decode(encode(value))
        return self._exchange("broadcast", value if self.rank == 0 else None)[0]

    def barrier(self) -> None:
        """Returns once every rank has called it."""
        if self.size > 1:
            self._exchange("barrier", None)

    # ---------------------------------------------------------------- internals
    def _next(self, what: str) -> int:
        if self.refusal:
            raise CollectiveError(f"{self._caller}.{what}() needs every rank to call it, but {self.refusal}")
        if not self._store:
            raise CollectiveError(f"{self._caller}.{what}(): this job has no store (TFDIST_STORE is not set); start it with "
                                  "`tfdist launch`")
        self._calls += 1
        return self._calls

    def _exchange(self, what: str, value: Any) -> list:
        """Every rank posts and reads every rank's key of this call: a rank that has posted it has read the calls
        before it, so each rank's keys of those can go, and the store holds at most two calls of keys however
        many calls a loop makes (a broadcast per step, gathers on a chief)."""
        seq = self._next(what)
        self._put(seq, encode(value))
        result = [decode(d) for d in self._wait_for(seq, what, list(range(self.size)))]
        self._forget_before(seq)
        return result

    def _forget_before(self, seq: int) -> None:
        """Every rank has posted call `seq`, so every rank is done reading the calls before it: this rank's
        keys of those can go (the store lives as long as the job; this keeps it small)."""
        for old in [s for s in self._posted if s < seq]:
            self._request("DELETE", f"{self._group}{old}-{self.rank}")
            self._posted.remove(old)

    def _put(self, seq: int, data: bytes) -> None:
        key = f"{self._group}{seq}-{self.rank}"
        self._posted.append(seq)
        status, _ = self._request("PUT", key, data)
        if status != 200:
            raise UnavailableError(f"the job's store at {self._store} refused a value ({status})")

    def _wait_for(self, seq: int, what: str, ranks: list[int]) -> list[bytes]:
        deadline = time.monotonic() + self.timeout
        found: dict[int, bytes] = {}
        pause = 0.005
        while True:
            for r in ranks:
                if r not in found:
                    status, data = self._request("GET", f"{self._group}{seq}-{r}")
                    if status == 200:
                        found[r] = data
            if len(found) == len(ranks):
                return [found[r] for r in ranks]
            if time.monotonic() > deadline:
                missing = [r for r in ranks if r not in found]
                raise UnavailableError(f"{self._caller}.{what}() (collective #{seq}) on rank {self.rank}: rank(s) "
                                       f"{', '.join(map(str, missing))} did not arrive within {self.timeout:g}s")
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def _request(self, method: str, key: str, body: bytes | None = None) -> tuple[int, bytes]:
        return store_request(self._store, method, f"/{SCOPE}/{key}", body, secret=self._secret,
                             patience=min(STORE_PATIENCE, self.timeout))


def store_request(store: str, method: str, path: str, body: bytes | None = None, secret: str | None = None,
                  patience: float = STORE_PATIENCE) -> tuple[int, bytes]:
    """One request to the job's store at host:port (`path`: /scope/key), with the job's secret (None: this
    process's TFDIST_STORE_SECRET). Answers (200 or 404, the value); retried with backoff for at most
    `patience` seconds while the store does not answer; a refusal raises one error naming why."""
    secret = os.environ.get(envvars.STORE_SECRET, "") if secret is None else secret
    if not _SECRET_CHARS.fullmatch(secret):  # never echoed: http.client would quote it in its error
        raise StoreSecretError(f"TFDIST_STORE_SECRET is not a store secret ({len(secret)} characters, not all "
                               "letters, digits, '-' or '_'); it is set by the agent that starts each worker")
    host, _, port = store.rpartition(":")
    deadline = time.monotonic() + patience
    pause = 0.05
    while True:
        conn = http.client.HTTPConnection(host, int(port), timeout=min(10.0, max(0.5, deadline - time.monotonic())))
        try:
            conn.request(method, f"/{secret}{path}", body=body)
            response = conn.getresponse()
            status, reason, data = response.status, response.reason, response.read()
        except (OSError, http.client.HTTPException) as e:
            failure = str(e) or type(e).__name__
        else:
            if status in (200, 404):
                return status, data
            if status not in _RETRIED:
                raise _refusal(store, method, path, status, reason, data, secret)
            failure = data.decode(errors="replace")
        finally:
            conn.close()
        if time.monotonic() + pause > deadline:
            raise UnavailableError(f"the job's store at {store} (served by the agent of node 0) did not answer "
                                   f"{method} {path} within {patience:g}s: {failure}")
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def _refusal(store: str, method: str, path: str, status: int, reason: str, body: bytes,
             secret: str) -> TfdistError:
    said = body.decode(errors="replace")
    if status == 403:
        why = "this worker has no store secret (TFDIST_STORE_SECRET is not set)" if not secret else \
            "this worker's store secret (TFDIST_STORE_SECRET) is not this run's"
        return StoreSecretError(f"the job's store at {store} refused {method} {path}: {why}; only the workers the "
                                "agent started for this run of the job can reach it")
    if status in _LIMITS:
        return StoreLimitError(f"the job's store at {store} refused {method} {path} at its {reason} limit: "
                               f"{said.removeprefix('tfdist job store: ')}")
    return InternalError(f"the job's store at {store} answered {method} {path} with {status} {reason}: {said}")
