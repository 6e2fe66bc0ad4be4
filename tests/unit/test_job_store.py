"""The job store the agent serves (Horovod's HTTP store protocol behind the run's secret), over real
sockets: the secret on every request, its limits, and the errors a worker gets at each."""

import http.client
import resource
import socket
import subprocess
import sys
import time

import pytest

from cluster.agent.job_store import MAX_VALUE, JobStore
from tests.conftest import REPO
from tfdist.collectives import Collectives, StoreLimitError, StoreSecretError, store_request

SECRET = "s3cret-of-this-run"


@pytest.fixture
def store():
    server = JobStore("127.0.0.1", 0, SECRET).start()
    yield server
    server.stop()


def request(server, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.reason, response.read()
    finally:
        conn.close()


def raw(server, data: bytes) -> bytes:
    """Sends `data` as it is and returns everything the store answers before it closes."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def test_put_get_and_404_until_a_key_exists(store):
    assert request(store, "GET", f"/{SECRET}/global/rank_1")[0] == 404  # Gloo polls until it appears
    assert request(store, "PUT", f"/{SECRET}/global/rank_1", b"198.18.0.3:4242")[0] == 200
    assert request(store, "GET", f"/{SECRET}/global/rank_1") == (200, "OK", b"198.18.0.3:4242")
    assert request(store, "DELETE", f"/{SECRET}/global/rank_1")[0] == 200
    assert request(store, "GET", f"/{SECRET}/global/rank_1")[2] == b"198.18.0.3:4242"  # a late reader finds it
    assert request(store, "PUT", f"/{SECRET}/tfdist/1-0", b"x")[0] == 200
    assert request(store, "DELETE", f"/{SECRET}/tfdist/1-0")[0] == 200  # collectives' keys do go
    assert request(store, "GET", f"/{SECRET}/tfdist/1-0")[0] == 404


def test_gloo_asks_with_its_port_after_the_secret(store):
    """Gloo's URL is http://<ADDR>:<PORT>/<scope>/<key> with ADDR = host:port/<secret>: the path's first
    segment is `<secret>:<port>`."""
    assert request(store, "PUT", f"/{SECRET}:{store.port}/global/rank_0", b"a")[0] == 200
    assert request(store, "GET", f"/{SECRET}:{store.port}/global/rank_0")[2] == b"a"
    assert request(store, "GET", f"/{SECRET}:{store.port + 1}/global/rank_0")[0] == 403


@pytest.mark.parametrize("prefix", ["", "/wrong", f"/{SECRET}x", f"/{SECRET[:-1]}", "/", f"/{SECRET.upper()}"])
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_a_request_without_the_secret_is_refused_and_changes_nothing(store, prefix, method):
    store.put("tfdist", "1-0", b"rank 0 value")
    status, reason, body = request(store, method, f"{prefix}/tfdist/1-0", b"poison" if method == "PUT" else None)
    assert (status, reason) == (403, "secret") and b"rank 0 value" not in body
    assert store.get("tfdist", "1-0") == b"rank 0 value" and store.key_count() == 1 and store.refused == 1


def test_a_worker_without_the_secret_gets_one_error_naming_it(store):
    with pytest.raises(StoreSecretError, match=r"refused PUT /tfdist/1-0: this worker has no store secret "
                                               r"\(TFDIST_STORE_SECRET is not set\)"):
        Collectives(f"127.0.0.1:{store.port}", 0, 2, "mwms", secret="").allgather(1)
    with pytest.raises(StoreSecretError, match=r"store secret \(TFDIST_STORE_SECRET\) is not this run's"):
        store_request(f"127.0.0.1:{store.port}", "GET", "/tfdist/1-0", secret="an-old-run")
    with pytest.raises(StoreSecretError, match=r"^TFDIST_STORE_SECRET is not a store secret \(9 characters") as e:
        store_request(f"127.0.0.1:{store.port}", "GET", "/tfdist/1-0", secret="bad\r\nline")
    assert "bad" not in str(e.value)
    assert store.key_count() == 0


def test_a_value_over_the_limit_is_refused_before_it_is_read(store):
    conn = http.client.HTTPConnection("127.0.0.1", store.port, timeout=10)
    try:  # announced too big: the answer comes without a byte of the body sent
        conn.putrequest("PUT", f"/{SECRET}/global/big")
        conn.putheader("Content-Length", str(MAX_VALUE + 1))
        conn.endheaders()
        response = conn.getresponse()
        assert (response.status, response.reason) == (413, "value-size")
        assert b"a value of 1048577 bytes is over the limit of 1048576 bytes per value" in response.read()
    finally:
        conn.close()
    with pytest.raises(StoreLimitError, match=r"refused PUT /tfdist/big at its value-size limit: a value of "
                                              r"1048577 bytes is over the limit"):
        store_request(f"127.0.0.1:{store.port}", "PUT", "/tfdist/big", b"x" * (MAX_VALUE + 1), secret=SECRET)
    assert store.key_count() == 0


def test_the_jobs_total_and_its_keys_are_capped_with_one_clear_error():
    server = JobStore("127.0.0.1", 0, SECRET, max_total=3 * MAX_VALUE, max_keys=50).start()
    address = f"127.0.0.1:{server.port}"
    try:
        for i in range(2):
            assert store_request(address, "PUT", f"/tfdist/v{i}", b"x" * MAX_VALUE, secret=SECRET)[0] == 200
        with pytest.raises(StoreLimitError, match=r"at its job-total limit: storing 1048576 bytes would bring the "
                                                  r"job's store to 3145752 bytes; its limit is 3145728"):
            store_request(address, "PUT", "/tfdist/v2", b"x" * MAX_VALUE, secret=SECRET)
        assert store_request(address, "PUT", "/tfdist/v1", b"y" * MAX_VALUE, secret=SECRET)[0] == 200  # replaced
        assert server.stored_bytes() == 2 * MAX_VALUE + 2 * len("tfdistv0") and server.get("tfdist", "v2") is None
        for i in range(48):
            store_request(address, "PUT", f"/tfdist/k{i}", b"1", secret=SECRET)
        with pytest.raises(StoreLimitError, match=r"at its key-count limit: the job's store holds 50 keys"):
            store_request(address, "PUT", "/tfdist/one-more", b"1", secret=SECRET)
        store_request(address, "DELETE", "/tfdist/k0", secret=SECRET)  # room again
        assert store_request(address, "PUT", "/tfdist/one-more", b"1", secret=SECRET)[0] == 200
        server.put("tfdist-preempt", "request", b"tfdist preempt")  # the agent's own request passes a full store
        assert server.get("tfdist-preempt", "request") == b"tfdist preempt"
    finally:
        server.stop()


def test_a_chunked_or_length_less_put_is_refused_and_not_stored(store):
    chunked = (f"PUT /{SECRET}/global/rank_0 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               "5\r\nhello\r\n0\r\n\r\n").encode()
    assert raw(store, chunked).startswith(b"HTTP/1.1 411 length-required\r\n")
    assert raw(store, f"PUT /{SECRET}/global/rank_0 HTTP/1.0\r\n\r\nhello".encode()).startswith(b"HTTP/1.1 411 ")
    status, reason, body = request(store, "PUT", f"/{SECRET}/global/rank_0", iter([b"a", b"b"]))  # http.client chunks
    assert (status, reason) == (411, "length-required") and b"chunked bodies are not stored" in body
    assert store.get("global", "rank_0") is None and store.key_count() == 0


def test_malformed_requests_are_refused(store):
    assert request(store, "GET", f"/{SECRET}/only-scope")[:2] == (400, "malformed")
    assert request(store, "PUT", f"/{SECRET}/a/b/c", b"x")[:2] == (400, "malformed")
    assert request(store, "POST", f"/{SECRET}/a/b", b"x")[:2] == (405, "method")
    assert raw(store, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 403 ")  # no secret: nothing more is said
    assert raw(store, f"GET /{SECRET}/a/b\r\n\r\n".encode()).startswith(b"HTTP/1.1 400 malformed")
    assert raw(store, f"GET /{SECRET}/a/b HTTP/1.1\r\nX: {'y' * 20000}\r\n\r\n".encode()).startswith(
        b"HTTP/1.1 431 header-size")
    assert raw(store, f"PUT /{SECRET}/a/b HTTP/1.1\r\nContent-Length: -1\r\n\r\n".encode()).startswith(
        b"HTTP/1.1 400 malformed")


def test_a_slow_request_is_cut_off_at_the_time_limit_and_the_worker_is_told():
    server = JobStore("127.0.0.1", 0, SECRET, timeout=1.0).start()
    try:
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(f"GET /{SECRET}/glo".encode())  # and then nothing
            answer = s.recv(4096)
            assert s.recv(4096) == b""  # closed
        assert answer.startswith(b"HTTP/1.1 408 request-time\r\n") and time.monotonic() - start < 5
    finally:
        server.stop()


def test_stop_closes_the_port_and_what_was_open(store):
    hanging = socket.create_connection(("127.0.0.1", store.port), timeout=10)
    hanging.sendall(b"GET /")
    deadline = time.monotonic() + 5
    while store.peak_connections < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    store.stop()
    assert hanging.recv(100) == b""
    hanging.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", store.port), timeout=5).close()


HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
RAISED = 8192 if HARD == resource.RLIM_INFINITY else min(8192, HARD)


@pytest.mark.parametrize("soft, hard, cap, raised", [(256, 256, 64, 256), (256, HARD, min(2048, RAISED // 4), RAISED)])
def test_the_connection_cap_follows_the_files_the_agent_may_open(soft, hard, cap, raised):
    """A quarter of the open-file limit, which the agent first raises toward the hard one (a soft 1024 is
    a default, not a policy); at most MAX_CONNECTIONS."""
    code = ("import resource, sys\n"
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))\n"
            "from cluster.agent.job_store import _connection_cap\n"
            "print(_connection_cap(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.stdout.split() == [str(cap), str(raised)], done.stderr


def test_the_loop_comes_up_at_the_first_connection_and_a_store_nobody_used_stops_without_it():
    """A run whose workers never reach the store (no tfdist.init(), no Horovod) does not import asyncio
    (30-45 ms of a local launch); the first connection brings the loop up and is answered; stop() ends
    either one promptly, and a second stop() does nothing."""
    code = ("import sys, http.client\n"
            "from cluster.agent.job_store import JobStore\n"
            "idle = JobStore('127.0.0.1', 0).start()\n"
            "idle.put('tfdist-preempt', 'request', b'x')\n"
            "idle.stop(); idle.stop()\n"
            "print('asyncio' in sys.modules)\n"
            "used = JobStore('127.0.0.1', 0, 'k').start()\n"
            "c = http.client.HTTPConnection('127.0.0.1', used.port, timeout=10)\n"
            "c.request('PUT', '/k/s/key', body=b'v'); print(c.getresponse().status)\n"
            "print('asyncio' in sys.modules, used.get('s', 'key'))\n"
            "used.stop(); used.stop()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["False", "200", "True b'v'"], done.stdout
