"""Requests gRPC cannot decode, answered as a client's mistake before any servicer runs (issue 30).

gRPC decodes a request before the servicer (and Gate) sees it; a body that is not the method's message
made it answer INTERNAL and log a traceback per call, so anyone who reached the port, token or not, could
fill the coordinator's log (about 460 KB/s from one client thread). WireGuard, a server interceptor, gives
each method a deserializer that never raises: a bad body becomes an `Undecodable` value, which the method
refuses before its servicer runs: UNAUTHENTICATED without a valid token (as Gate answers), else
INVALID_ARGUMENT naming the method and its message type. The log gets at most one line per LOG_EVERY
seconds, counting the refusals and naming their peers.

A message over the size cap (MAX_MESSAGE_BYTES) never gets here: gRPC's core refuses it with
RESOURCE_EXHAUSTED before Python reads it, and logs nothing (tests/integration/test_garbage_requests.py).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Callable

import grpc
from google.protobuf import descriptor_pool

from cluster.coordinator.rpc_edge import NO_CREDENTIAL, Verifier, authenticate

log = logging.getLogger("tfdist.coordinator")
LOG_EVERY = 10.0  # seconds between two log lines about undecodable requests, at most
PEERS_NAMED = 4  # distinct peers a line names; more read "and others"
DETAIL_CHARS = 300


@dataclasses.dataclass(frozen=True)
class Undecodable:
    """What a method's deserializer returns for bytes that are not its message (never None: gRPC takes
    None for a failed decode and answers INTERNAL)."""

    method: str  # /tfdist.v1.Coordinator/ListJobs
    expected: str  # tfdist.v1.ListJobsRequest
    reason: str

    def describe(self) -> str:
        return f"the request to {self.method} is not a valid {self.expected}: {self.reason}"[:DETAIL_CHARS]


class Tally:
    """At most one log line per `every` seconds for one kind of event; the events between are counted
    and the next line says how many, from which peers. Pure: time is passed in."""

    def __init__(self, what: str, every: float = LOG_EVERY):
        self.what, self.every = what, every
        self.last: float | None = None  # when the last line was made
        self.count, self.peers, self.more_peers = 0, [], False

    def note(self, peer: str, detail: str, now: float) -> str | None:
        """Counts one event; returns the line to log now, or None (counted for the next line)."""
        self.count += 1
        if peer in self.peers:
            pass
        elif len(self.peers) < PEERS_NAMED:
            self.peers.append(peer)
        else:
            self.more_peers = True
        if self.last is not None and now - self.last < self.every:
            return None
        first = self.last is None
        peers = ", ".join(self.peers) + (" and others" if self.more_peers else "")
        line = (f"refused {self.count:,} {self.what}{'' if self.count == 1 else 's'}"
                f"{'' if first else f' in the last {now - self.last:,.0f} s'} from {peers} (latest: {detail}); "
                f"more are counted, one line per {self.every:g} s at most")
        self.last, self.count, self.peers, self.more_peers = now, 0, [], False
        return line


def peer_host(peer: str) -> str:
    """"ipv4:127.0.0.1:43210" -> "ipv4:127.0.0.1": a client's connections share its host, not its port."""
    host, _, port = peer.rpartition(":")
    return (host if host and port.isdigit() else peer)[:80]


def expected_message(method: str) -> str:
    """The full name of `method`'s request message ("/pkg.Service/Method"), from the protos loaded."""
    try:
        return descriptor_pool.Default().FindMethodByName(method.strip("/").replace("/", ".")).input_type.full_name
    except KeyError:
        return "request message"


class WireGuard(grpc.ServerInterceptor):
    """Wraps every method's handler so that an undecodable request is refused in one status line, and
    logged at most once per LOG_EVERY seconds. `refused(method, code)` counts each refusal (telemetry)."""

    def __init__(self, verifier: Verifier, refused: Callable[[str, str], None] = lambda method, code: None,
                 clock: Callable[[], float] = time.monotonic):
        self.verifier, self.refused, self.clock = verifier, refused, clock
        self.tally = Tally("undecodable request")
        self.lock = threading.Lock()
        self.wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}  # per method served

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler  # no such method (UNIMPLEMENTED), or raw bytes: nothing to decode
        method = handler_call_details.method
        done = self.wrapped.get(method)
        if done is None or done[0] is not handler:
            done = self.wrapped[method] = (handler, self._wrap(method, handler))
        return done[1]

    def _wrap(self, method: str, handler):
        expected, decode = expected_message(method), handler.request_deserializer

        def lenient(data: bytes):
            try:
                return decode(data)
            except Exception as e:  # any decoder's error: the bytes are the client's
                # upb's "Error parsing message with type 'X': Wire format was corrupt": the part after X
                return Undecodable(method, expected, str(e).rsplit(": ", 1)[-1] or type(e).__name__)

        changes = {"request_deserializer": lenient}
        for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
            behaviour = getattr(handler, kind)
            if behaviour is not None:
                changes[kind] = (self._stream(behaviour) if handler.request_streaming else self._unary(behaviour))
        return handler._replace(**changes)

    def _unary(self, behaviour):
        def checked(request, context):
            if isinstance(request, Undecodable):
                self._refuse(request, context)
            return behaviour(request, context)
        return checked

    def _stream(self, behaviour):
        def checked(requests, context):
            return behaviour(self._checked(requests, context), context)
        return checked

    def _checked(self, requests, context):
        for request in requests:
            if isinstance(request, Undecodable):
                self._refuse(request, context)
            yield request

    def _refuse(self, bad: Undecodable, context) -> None:
        """Aborts the call (raises): UNAUTHENTICATED first, as Gate would, else INVALID_ARGUMENT."""
        known = authenticate(self.verifier, context.invocation_metadata()) is not None
        code = grpc.StatusCode.INVALID_ARGUMENT if known else grpc.StatusCode.UNAUTHENTICATED
        with self.lock:
            line = self.tally.note(peer_host(context.peer() or "unknown peer"),
                                   bad.describe() + ("" if known else " (no valid credential)"), self.clock())
        if line:
            log.warning(line)
        self.refused(bad.method.rsplit("/", 1)[-1], code.name)
        if not known:
            context.abort(code, NO_CREDENTIAL)
        context.abort(code, f"{bad.describe()} (a client of another version? tfdist clients and coordinators "
                            "of one release speak the same protocol)")
