"""The Gloo rendezvous store the agent serves for Horovod jobs, over a real socket, speaking
Horovod's HTTP store protocol."""

import http.client

import pytest

from cluster.agent.job_store import MAX_VALUE, JobStore


@pytest.fixture
def store():
    server = JobStore("127.0.0.1", 0).start()
    yield server
    server.stop()


def request(server, method, path, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, body=body)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_put_get_and_404_until_a_key_exists(store):
    assert request(store, "GET", "/global/rank_1") == (404, b"")  # Gloo polls until it appears
    assert request(store, "PUT", "/global/rank_1", b"198.18.0.3:4242")[0] == 200
    assert request(store, "GET", "/global/rank_1") == (200, b"198.18.0.3:4242")
    assert request(store, "DELETE", "/global/rank_1")[0] == 200
    assert request(store, "GET", "/global/rank_1") == (200, b"198.18.0.3:4242")  # a late reader still finds it


def test_ranks_that_reached_the_global_rendezvous_count_as_joined(store):
    for key in ("rank_0", "0", "rank_2"):
        request(store, "PUT", f"/global/{key}", b"x")
    request(store, "PUT", "/local_10.0.0.1/rank_1", b"x")  # other scopes say nothing about global ranks
    request(store, "PUT", "/global_process_set_hash_1/rank_3", b"x")
    assert store.ranks_joined() == {0, 2}


def test_malformed_requests_are_refused(store):
    assert request(store, "GET", "/only-scope")[0] == 400
    assert request(store, "PUT", "/a/b/c", b"x")[0] == 400
    conn = http.client.HTTPConnection("127.0.0.1", store.port, timeout=10)
    try:  # announced too big: refused before any of it is read
        conn.putrequest("PUT", "/global/big")
        conn.putheader("Content-Length", str(MAX_VALUE + 1))
        conn.endheaders()
        assert conn.getresponse().status == 400
    finally:
        conn.close()
