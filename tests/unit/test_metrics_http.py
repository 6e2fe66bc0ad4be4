"""cluster/shared/metrics_http.py over real sockets: HTTPS with the cluster's certificate, a bearer token
on every request, who may scrape (user/admin/monitor; not a node), what an unreachable authority means,
bounded requests and a prompt stop."""

import http.client
import socket
import ssl
import threading
import time

import pytest

from cluster.shared.credentials import Authority, Principal
from cluster.shared.metrics_http import MAX_HEAD, MetricsEndpoint
from tfdist.errors import PermissionDeniedError, UnavailableError

pytestmark = pytest.mark.timeout(60)

BODY = b"# HELP tfdist_up Up.\n# TYPE tfdist_up gauge\ntfdist_up 1.0\n"


@pytest.fixture(scope="module")
def authority():
    return Authority.create()


def tls_context(authority) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=authority.ca_pem.decode())
    return context


@pytest.fixture
def endpoint(authority):
    renders = []

    def render():
        renders.append(time.monotonic())
        return BODY

    def authorize(token):
        if token == "down":
            raise UnavailableError("the coordinator at 10.0.0.1:7470 did not answer")
        if token == "refused":
            raise PermissionDeniedError("a node credential (n1) may not read metrics")
        return authority.verify(token)

    served = MetricsEndpoint("127.0.0.1:0", render, authorize, (authority.cert_pem, authority.key_pem),
                             "the test's /metrics").start()
    served.renders = renders
    yield served
    served.stop()


def get(endpoint, authority, token=None, path="/metrics", method="GET", headers=None):
    # the certificate names tfdist-coordinator and 127.0.0.1: verified against the address, as Prometheus does
    connection = http.client.HTTPSConnection("127.0.0.1", endpoint.port, context=tls_context(authority), timeout=10)
    try:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        connection.request(method, path, headers=sent)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_a_monitor_user_or_admin_token_reads_the_metrics(endpoint, authority):
    for kind in ("monitor", "user", "admin"):
        status, headers, body = get(endpoint, authority, authority.issue(kind, "p").token)
        assert status == 200, body
        assert body == BODY
        assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert endpoint.url == f"https://127.0.0.1:{endpoint.port}/metrics"


def test_no_token_or_an_unknown_one_is_401_with_a_challenge(endpoint, authority):
    for token in (None, "", Authority.create().issue("monitor", "p").token, "x" * 5000):
        status, headers, body = get(endpoint, authority, token)
        assert status == 401, (token, body)
        assert headers["WWW-Authenticate"].startswith('Bearer realm="tfdist"')
    status, _, _ = get(endpoint, authority, headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert status == 401
    assert not endpoint.renders  # nothing was rendered for them


def test_a_node_token_is_403(endpoint, authority):
    status, _, body = get(endpoint, authority, authority.issue("node", "n1").token)
    assert status == 403
    assert b"node credential (n1) may not read metrics" in body and b"--monitor" in body
    status, _, body = get(endpoint, authority, "refused")  # the authority's own refusal (an agent's check)
    assert status == 403 and b"may not read" in body


def test_an_authority_that_does_not_answer_is_503_naming_it(endpoint, authority):
    status, _, body = get(endpoint, authority, "down")
    assert status == 503
    assert b"10.0.0.1:7470 did not answer" in body


def test_only_get_metrics_is_served(endpoint, authority):
    token = authority.issue("monitor", "p").token
    assert get(endpoint, authority, token, path="/")[0] == 404
    assert get(endpoint, authority, token, path="/metrics?name[]=x")[0] == 200
    assert get(endpoint, authority, token, method="POST")[0] == 405
    assert get(endpoint, authority, token, method="DELETE")[0] == 405


def test_plain_http_is_refused_on_a_tls_endpoint(endpoint):
    with socket.create_connection(("127.0.0.1", endpoint.port), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(5)
        try:
            answer = s.recv(100)
        except (ConnectionError, socket.timeout):
            answer = b""
    assert not answer.startswith(b"HTTP/1.1 200")


def test_oversized_heads_are_refused(endpoint, authority):
    token = authority.issue("monitor", "p").token
    status, _, _ = get(endpoint, authority, token, path="/metrics?" + "a" * (MAX_HEAD + 10))
    assert status == 431
    status, _, _ = get(endpoint, authority, token, headers={f"X-Pad-{i}": "b" * 100 for i in range(200)})
    assert status == 431  # 20 KB of headers: over MAX_HEAD


def test_a_silent_connection_does_not_hold_up_others_and_is_dropped(endpoint, authority, monkeypatch):
    import cluster.shared.metrics_http as metrics_http

    monkeypatch.setattr(metrics_http, "TIMEOUT", 1.0)  # read at each accept
    quiet = socket.create_connection(("127.0.0.1", endpoint.port), timeout=5)  # connects, never handshakes
    try:
        started = time.monotonic()
        assert get(endpoint, authority, authority.issue("monitor", "p").token)[0] == 200
        assert time.monotonic() - started < 5
        quiet.settimeout(10)
        try:
            left = quiet.recv(10)  # the server gives up on it after TIMEOUT
        except ConnectionError:
            left = b""
        assert left == b""
    finally:
        quiet.close()


def test_plaintext_serves_http_for_an_insecure_cluster(authority):
    served = MetricsEndpoint("127.0.0.1:0", lambda: BODY, authority.verify, None, "plain").start()
    try:
        assert served.url.startswith("http://")
        connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
        connection.request("GET", "/metrics")
        assert connection.getresponse().status == 401  # credentials still required
        connection.close()
        connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
        connection.request("GET", "/metrics", headers={"Authorization": f"Bearer {authority.issue('user', 'u').token}"})
        assert connection.getresponse().read() == BODY
        connection.close()
    finally:
        served.stop()


def test_stop_is_prompt_and_frees_the_port(authority):
    served = MetricsEndpoint("127.0.0.1:0", lambda: BODY, authority.verify, (authority.cert_pem, authority.key_pem),
                             "stopping").start()
    port = served.port
    idle = socket.create_connection(("127.0.0.1", port), timeout=5)  # an open connection does not delay it
    started = time.monotonic()
    served.stop()
    assert time.monotonic() - started < 1.0
    idle.close()
    again = MetricsEndpoint(f"127.0.0.1:{port}", lambda: BODY, authority.verify, None, "again")
    again.stop()


def test_a_taken_port_is_one_line_naming_it(authority):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        with pytest.raises(Exception) as raised:
            MetricsEndpoint(f"127.0.0.1:{holder.getsockname()[1]}", lambda: BODY, authority.verify, None, "the test's")
        assert "cannot listen on 127.0.0.1:" in str(raised.value)
        with pytest.raises(Exception, match="is not HOST:PORT"):
            MetricsEndpoint("127.0.0.1:http", lambda: BODY, authority.verify, None, "the test's")
    finally:
        holder.close()


def test_a_render_that_fails_is_500_not_a_traceback(authority):
    def broken():
        raise RuntimeError("boom")

    served = MetricsEndpoint("127.0.0.1:0", broken, lambda t: Principal("monitor", "p"), None, "broken").start()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
        connection.request("GET", "/metrics", headers={"Authorization": "Bearer t"})
        response = connection.getresponse()
        assert response.status == 500 and b"boom" not in response.read()
        connection.close()
    finally:
        served.stop()


def test_concurrent_scrapes(endpoint, authority):
    token = authority.issue("monitor", "p").token
    results = []

    def scrape():
        results.append(get(endpoint, authority, token)[0])

    threads = [threading.Thread(target=scrape) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [200] * 8
