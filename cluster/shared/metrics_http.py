"""A Prometheus scrape endpoint with tfdist's credentials: `GET /metrics` over HTTPS, a bearer token on every
request (loopback included), and nothing else served.

The coordinator serves it with its own TLS certificate and checks tokens with its authority; an agent
serves it with a certificate the coordinator signed for it and asks the coordinator who a token names
(agents hold no secret to verify tokens with). Who may scrape is the same rule as who may read the
cluster over gRPC: user, admin and monitor credentials; a node credential may not (access.READ).

One thread per connection (a scrape every 15 s per Prometheus server is the load), each connection with
a timeout, request heads bounded: a slow or hostile client costs a thread for at most TIMEOUT seconds.
"""

from __future__ import annotations

import http.server
import logging
import socket
import socketserver
import ssl
import threading
from typing import Callable

from cluster.shared.credentials import Principal
from tfdist.errors import PermissionDeniedError, ResourceExhaustedError, TfdistError, UserError

log = logging.getLogger("tfdist.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # prometheus_client's CONTENT_TYPE_LATEST
READERS = ("user", "admin", "monitor")  # who may scrape: who may read the cluster (access.READ)
TIMEOUT = 10.0  # seconds a connection may take to send its request
MAX_HEAD = 16 << 10  # bytes of a request line and headers
MAX_TOKEN = 1024

Authorize = Callable[[str], "Principal | None"]  # a token -> who it names (None: nobody this cluster knows)


def reader_principal(principal: Principal | None) -> Principal | None:
    """`principal` if it may scrape; PermissionDeniedError for a kind that may not (a node)."""
    if principal is not None and principal.kind not in READERS:
        raise PermissionDeniedError(f"a {principal.kind} credential ({principal.name}) may not read metrics; "
                                    "use a monitor credential (`tfdist credentials DIR --monitor NAME`)")
    return principal


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "tfdist"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    endpoint: "MetricsEndpoint"  # set on the class made per endpoint

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(TIMEOUT)
        self.rfile = _BoundedHead(self.rfile)

    def log_message(self, format, *args) -> None:  # one debug line, not stderr per request
        log.debug("%s %s", self.address_string(), format % args)

    def handle_one_request(self) -> None:
        self.rfile.budget = MAX_HEAD  # each request's line and headers together
        try:
            super().handle_one_request()
        except _HeadTooLong:
            self.close_connection = True
            try:
                self.wfile.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
                                 b"Connection: close\r\n\r\n")
            except OSError:
                pass
        except (socket.timeout, ssl.SSLError, ConnectionError):
            self.close_connection = True

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path not in ("/metrics", "/metrics/"):
            return self._answer(404, b"not found: this endpoint serves /metrics only\n")
        header = self.headers.get("Authorization", "")
        token = header[len("Bearer "):].strip() if header.startswith("Bearer ") else ""
        if not token or len(token) > MAX_TOKEN:
            return self._answer(401, b"a bearer token is required: a monitor credential's token "
                                     b"(docs/observability.md)\n", {"WWW-Authenticate": 'Bearer realm="tfdist"'})
        try:
            principal = reader_principal(self.endpoint.authorize(token))
        except PermissionDeniedError as e:
            return self._answer(403, f"{e}\n".encode())
        except TfdistError as e:
            code = 503 if e.grpc_code in ("UNAVAILABLE", "DEADLINE_EXCEEDED") else 500
            return self._answer(code, f"{e}\n".encode())
        if principal is None:
            return self._answer(401, b"unknown or wrong token: use a credential this cluster issued\n",
                                {"WWW-Authenticate": 'Bearer realm="tfdist", error="invalid_token"'})
        try:
            body = self.endpoint.render()
        except Exception:
            log.exception("rendering %s failed", self.endpoint.what)
            return self._answer(500, b"rendering the metrics failed; the daemon's log says why\n")
        self._answer(200, body, content_type=CONTENT_TYPE)

    def do_HEAD(self) -> None:
        self._answer(405, b"")

    do_POST = do_PUT = do_DELETE = do_HEAD

    def _answer(self, code: int, body: bytes, headers: dict | None = None, content_type: str = "text/plain") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _HeadTooLong(ResourceExhaustedError):
    """A request head past its budget: answered 431 and the connection closed."""


class _BoundedHead:
    """The connection's reader, refusing a request head longer than its budget (http.server alone allows
    100 header lines of 64 KiB each)."""

    def __init__(self, raw):
        self.raw, self.budget = raw, MAX_HEAD

    def readline(self, limit: int = -1) -> bytes:
        allowed = self.budget + 1 if limit < 0 else min(limit, self.budget + 1)
        line = self.raw.readline(allowed)
        self.budget -= len(line)
        if self.budget < 0:
            raise _HeadTooLong()
        return line

    def read(self, size: int = -1) -> bytes:
        return self.raw.read(size)

    def close(self) -> None:
        self.raw.close()


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address, handler, family, tls: ssl.SSLContext | None):
        self.address_family = family
        self.tls = tls
        super().__init__(address, handler)

    def get_request(self):
        sock, address = super().get_request()
        if self.tls is not None:  # the handshake runs in the connection's thread (finish_request), bounded
            sock.settimeout(TIMEOUT)
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def finish_request(self, request, client_address):
        if self.tls is not None:
            try:
                request.do_handshake()
            except (OSError, ssl.SSLError):
                return
        super().finish_request(request, client_address)


class MetricsEndpoint:
    """`GET /metrics` on `listen` (HOST:PORT; port 0: any free one): `render()` gives the exposition text,
    `authorize(token)` who a token names. `tls`: (certificate PEM, key PEM); None serves plain HTTP (only
    for a cluster that runs --insecure-plaintext). `what` names it in errors and logs."""

    def __init__(self, listen: str, render: Callable[[], bytes], authorize: Authorize,
                 tls: tuple[bytes, bytes] | None, what: str):
        self.render, self.authorize, self.what = render, authorize, what
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        if not port.isdigit() or int(port) > 65535:
            raise UserError(f"{what}: {listen!r} is not HOST:PORT")
        context = None
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            _load_pem_chain(context, *tls)
        handler = type("Handler", (_Handler,), {"endpoint": self})
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._server = _Server((host or "0.0.0.0", int(port)), handler, family, context)
        except OSError as e:
            raise UserError(f"{what}: cannot listen on {listen}: {e.strerror} (another process on that port? "
                            "choose another HOST:PORT)") from None
        self.port = self._server.server_address[1]
        self.scheme = "https" if tls is not None else "http"
        shown = f"[{host}]" if ":" in host else (host or "0.0.0.0")
        self.address = f"{shown}:{self.port}"
        self.url = f"{self.scheme}://{self.address}/metrics"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"{what} /metrics", daemon=True)

    def start(self) -> "MetricsEndpoint":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops serving within the poll interval; open connections end with their threads (daemon)."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


def _load_pem_chain(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """ssl loads certificates only from files: a private temporary directory, removed at once."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tfdist-tls-") as directory:
        os.chmod(directory, 0o700)
        cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
        for path, data in ((cert, cert_pem), (key, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        context.load_cert_chain(cert, key)


def certificate_request(name: str) -> tuple[bytes, bytes]:
    """(key PEM, certificate request PEM) an agent sends: a fresh EC key, kept in memory."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    request = (x509.CertificateSigningRequestBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"tfdist agent {name}"[:64])]))
               .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, request.public_bytes(serialization.Encoding.PEM)
