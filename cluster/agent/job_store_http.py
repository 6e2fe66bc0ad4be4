"""The job store's HTTP side (cluster/agent/job_store.py serves it): one request per connection, the
run's secret checked first, each limit a refusal whose reason phrase names it (the keys and values with
their caps: job_store_values.py). Runs on the store's event loop, in the store's thread, which imports
this module (and asyncio) while the job's workers start."""

from __future__ import annotations

import asyncio
import hmac
import logging
import socket

from cluster.agent.job_store_values import COLLECTIVES_SCOPE, MAX_VALUE, Refusal, StoreValues

log = logging.getLogger("tfdist.agent")

MAX_HEAD = 16 << 10  # bytes of a request's line and headers
MAX_BODIES = 32  # PUT bodies being read at once (their bytes are held until stored)
LINGER = 1.0  # seconds an error answer waits for the unread rest of a request before closing


class StoreProtocol:
    """Serves connections on the loop's thread: one request each, then the connection closes."""

    def __init__(self, secret: str, port: int, values: StoreValues, max_connections: int, timeout: float):
        self._credentials = (secret.encode(), f"{secret}:{port}".encode())
        self.port, self.values, self.max_connections, self.timeout = port, values, max_connections, timeout
        self.open: dict[asyncio.StreamWriter, bool] = {}  # oldest first -> answered yet
        self.refused = 0  # requests without the secret
        self.timed_out = 0  # connections cut at the time limit
        self.evicted = 0  # connections closed to make room for newer ones
        self.peak = 0
        self.closing = False
        self._bodies: asyncio.Semaphore | None = None

    async def accepted(self, conn: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=conn, limit=MAX_HEAD)
        except OSError:
            conn.close()
            return
        await self.connection(reader, writer)

    def out_of_files(self, error: OSError) -> None:
        """The agent may open no more files: the oldest connection goes (said once per store)."""
        if not self.evicted:
            log.warning("job store on port %d: %s; closing its oldest connections", self.port, error.strerror)
        if self.open:
            self._close_oldest()

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._bodies is None:
            self._bodies = asyncio.Semaphore(MAX_BODIES)
        if self.closing:
            writer.transport.abort()
            return
        self.open[writer] = False
        self.peak = max(self.peak, len(self.open))
        while len(self.open) > self.max_connections:
            self._close_oldest()
        try:
            async with asyncio.timeout(self.timeout):
                await self._one_request(reader, writer)
        except TimeoutError:
            self.timed_out += 1
            self._answer(writer, Refusal(408, "request-time", f"the request and its answer took over "
                                                               f"{self.timeout:g}s"))
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the peer went, or the connection was closed to make room
        finally:
            self.open.pop(writer, None)
            writer.close()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        headers: dict[str, str] = {}
        try:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.LimitOverrunError:
                raise Refusal(431, "header-size", f"a request's line and headers are limited to {MAX_HEAD} "
                                                   "bytes") from None
            method, target, headers = _parse_head(head)
            key = self._key(target, writer)
            if method is None:
                raise Refusal(400, "malformed", "not an HTTP/1.x request")
            await self._serve(method, key, headers, reader, writer)
        except Refusal as e:
            self._answer(writer, e)
            if _announced_body(headers):
                await _linger(writer, reader)
            return
        await writer.drain()

    def _key(self, target: str, writer: asyncio.StreamWriter) -> tuple[str, str]:
        parts = target.split("/")
        credential = parts[1].encode("latin-1") if len(parts) > 1 else b""
        if not any(hmac.compare_digest(credential, c) for c in self._credentials):
            self.refused += 1
            if self.refused == 1:
                log.warning("job store on port %d refused a request without the job's secret from %s (further "
                            "refusals are counted, not logged)", self.port, writer.get_extra_info("peername"))
            raise Refusal(403, "secret", "the request does not carry the job's store secret (TFDIST_STORE_SECRET, "
                                          "which the agent gives each worker it starts)")
        if len(parts) != 4 or not parts[2] or not parts[3]:
            raise Refusal(400, "malformed", "the path is /<secret>/<scope>/<key>")
        return parts[2], parts[3]

    async def _serve(self, method: str, key: tuple[str, str], headers: dict[str, str],
                     reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if method == "GET":
            value = self.values.get(key)
            self._answer(writer, 200, value) if value is not None else self._answer(writer, 404)
        elif method == "PUT":
            length = _length(headers)
            self.values.check_room(key, length)
            if headers.get("expect", "").lower() == "100-continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            assert self._bodies is not None
            async with self._bodies:
                body = await reader.readexactly(length)
            self.values.put(key, body)
            self._answer(writer, 200)
        elif method == "DELETE":
            # tfdist's collectives delete what every rank has read; Gloo's DELETE only says "done with
            # this scope", and a late reader of the same scope must still find the key.
            if key[0] == COLLECTIVES_SCOPE:
                self.values.delete(key)
            self._answer(writer, 200)
        else:
            raise Refusal(405, "method", f"{method} is not GET, PUT or DELETE")

    def _answer(self, writer: asyncio.StreamWriter, answer: int | Refusal, value: bytes = b"") -> None:
        """One answer per connection. A refusal's reason phrase is the limit it hit, its body says more
        (Gloo's client reads only the code; tfdist's reads both)."""
        if writer.is_closing() or self.open.get(writer, True):
            return
        self.open[writer] = True
        if isinstance(answer, Refusal):
            code, reason, value = answer.code, answer.limit, f"tfdist job store: {answer.detail}".encode()
        else:
            code, reason = answer, {200: "OK", 404: "Not Found"}[answer]
        writer.write(f"HTTP/1.1 {code} {reason}\r\nContent-Length: {len(value)}\r\nConnection: close\r\n\r\n"
                     .encode() + value)

    def _close_oldest(self) -> None:
        oldest = next(iter(self.open))
        self._answer(oldest, Refusal(503, "connections", f"the store closed this connection to make room: it "
                                                          f"keeps at most {self.max_connections} open"))
        del self.open[oldest]
        oldest.close()
        self.evicted += 1


def _parse_head(head: bytes) -> tuple[str | None, str, dict[str, str]]:
    lines = head[:-4].decode("latin-1").split("\r\n")
    words = lines[0].split(" ")
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
        if not colon:
            return None, words[1] if len(words) > 1 else "", headers
    if len(words) != 3 or not words[1].startswith("/") or not words[2].startswith("HTTP/1."):
        return None, words[1] if len(words) > 1 else "", headers
    return words[0], words[1], headers


def _announced_body(headers: dict[str, str]) -> bool:
    return "transfer-encoding" in headers or headers.get("content-length", "0") not in ("", "0")


def _length(headers: dict[str, str]) -> int:
    if "transfer-encoding" in headers or "content-length" not in headers:
        raise Refusal(411, "length-required", "a PUT must carry Content-Length (chunked bodies are not stored)")
    text = headers["content-length"]
    if not text.isdigit() or len(text) > 12:
        raise Refusal(400, "malformed", f"Content-Length {text[:20]!r} is not a byte count")
    if int(text) > MAX_VALUE:
        raise Refusal(413, "value-size", f"a value of {int(text)} bytes is over the limit of {MAX_VALUE} bytes "
                                          "per value")
    return int(text)


async def _linger(writer: asyncio.StreamWriter, reader: asyncio.StreamReader) -> None:
    """After an error answer to a request whose body was not read: take (and drop) what the client still
    sends, briefly, so that closing does not reset the connection before the client reads the answer."""
    try:
        await writer.drain()
        writer.write_eof()
        async with asyncio.timeout(LINGER):
            for _ in range(MAX_VALUE // 65536 + 2):
                if not await reader.read(65536):
                    break
    except (OSError, TimeoutError):
        pass
