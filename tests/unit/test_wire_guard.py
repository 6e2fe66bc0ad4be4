"""WireGuard (cluster/coordinator/wire_guard.py): the rate-limited log line, and an in-process server with
every kind of method, registered the way generated code registers them (grpcio's registered-method path),
to show the interceptor sees each. The real coordinator: tests/integration/test_garbage_requests.py."""

from concurrent import futures

import grpc
import pytest

from cluster.coordinator.wire_guard import NO_CREDENTIAL, Tally, WireGuard, expected_message, peer_host
from cluster.shared.auth import METADATA_KEY
from cluster.shared.credentials import Authority
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

pytestmark = pytest.mark.timeout(60)
GARBAGE = b"\xff\xff\xff"


def test_tally_logs_the_first_event_then_one_line_per_interval_counting_the_rest():
    tally = Tally("undecodable request", every=10.0)
    first = tally.note("ipv4:10.0.0.1", "bad 1", now=100.0)
    assert first.startswith("refused 1 undecodable request from ipv4:10.0.0.1 (latest: bad 1); ")
    assert "one line per 10 s at most" in first
    assert [tally.note("ipv4:10.0.0.2", f"bad {i}", now=100.0 + i * 0.001) for i in range(2, 1_002)] == [None] * 1_000
    for i, peer in enumerate(["ipv4:10.0.0.3", "ipv4:10.0.0.4", "ipv4:10.0.0.5", "ipv4:10.0.0.2"]):
        assert tally.note(peer, "bad", now=105.0 + i) is None
    line = tally.note("ipv4:10.0.0.6", "bad last", now=110.5)
    assert line.startswith("refused 1,005 undecodable requests in the last 10 s from ipv4:10.0.0.2, ipv4:10.0.0.3, "
                           "ipv4:10.0.0.4, ipv4:10.0.0.5 and others (latest: bad last); "), line
    assert tally.note("ipv4:10.0.0.6", "again", now=111.0) is None  # the interval restarts at the line
    assert tally.note("ipv4:10.0.0.6", "later", now=200.0).startswith(
        "refused 2 undecodable requests in the last 90 s from ipv4:10.0.0.6 (latest: later)")


def test_peer_host_and_expected_message():
    assert peer_host("ipv4:127.0.0.1:43210") == "ipv4:127.0.0.1"
    assert peer_host("ipv6:[::1]:43210") == "ipv6:[::1]"
    assert peer_host("unix:/tmp/sock") == "unix:/tmp/sock"
    assert expected_message("/tfdist.v1.AgentService/Heartbeat") == "tfdist.v1.HeartbeatRequest"
    assert expected_message("/no.Such/Method") == "request message"


SERVICE = "tfdist.v1.Coordinator"  # a real service name, so the expected message type resolves
KINDS = {"ListJobs": grpc.unary_unary_rpc_method_handler, "GetJob": grpc.unary_stream_rpc_method_handler,
         "CancelJob": grpc.stream_unary_rpc_method_handler, "ResumeJob": grpc.stream_stream_rpc_method_handler}


@pytest.fixture
def guarded():
    """An in-process server with one method of each kind, registered only on the registered-method path;
    each answers how many requests it decoded."""
    authority = Authority.create(hosts=["127.0.0.1"])
    counted = []
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         interceptors=[WireGuard(authority, lambda method, code: counted.append((method, code)))])

    def behaviour(name, make):
        one = lambda request, context: pb.ListJobsResponse(total=1)
        many = lambda requests, context: pb.ListJobsResponse(total=sum(1 for _ in requests))
        body = {"ListJobs": one, "GetJob": lambda r, c: iter([one(r, c)]), "CancelJob": many,
                "ResumeJob": lambda rs, c: iter([many(rs, c)])}[name]
        return make(body, request_deserializer=getattr(pb, f"{name}Request").FromString,
                    response_serializer=pb.ListJobsResponse.SerializeToString)

    server.add_registered_method_handlers(SERVICE, {name: behaviour(name, make) for name, make in KINDS.items()})
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield channel, authority, counted
    finally:
        channel.close()
        server.stop(0)


def _call(channel, name, bodies, metadata=()):
    path = f"/{SERVICE}/{name}"
    kind = list(KINDS).index(name)
    make = [channel.unary_unary, channel.unary_stream, channel.stream_unary, channel.stream_stream][kind]
    stub = make(path, request_serializer=None, response_deserializer=pb.ListJobsResponse.FromString,
                _registered_method=True)
    request = bodies[-1] if kind < 2 else iter(bodies)  # a unary call sends the last
    try:
        answer = stub(request, timeout=10, metadata=metadata)
        return "OK", (list(answer)[0] if kind % 2 else answer).total
    except grpc.RpcError as e:
        return e.code().name, e.details()


@pytest.mark.parametrize("name", list(KINDS))
def test_each_kind_of_method_refuses_garbage_in_one_status_line(guarded, name, caplog):
    channel, authority, counted = guarded
    token = ((METADATA_KEY, f"Bearer {authority.issue('user', 'alice').token}"),)
    good = pb.ListJobsRequest(page_size=3).SerializeToString() if name == "ListJobs" else b""
    assert _call(channel, name, [good, good]) == ("OK", 1 if list(KINDS).index(name) < 2 else 2)
    assert _call(channel, name, [GARBAGE]) == ("UNAUTHENTICATED", NO_CREDENTIAL)
    assert _call(channel, name, [b"", GARBAGE], (("authorization", "Bearer tfd1:admin:root:" + "A" * 43),)) == \
        ("UNAUTHENTICATED", NO_CREDENTIAL)
    code, details = _call(channel, name, [b"", GARBAGE], token)
    assert code == "INVALID_ARGUMENT"
    assert details.startswith(f"the request to /{SERVICE}/{name} is not a valid tfdist.v1.{name}Request: "), details
    assert counted == [(name, "UNAUTHENTICATED")] * 2 + [(name, "INVALID_ARGUMENT")]
    logged = [r for r in caplog.records if r.name == "tfdist.coordinator" or r.name.startswith("grpc")]
    assert [r.getMessage().split(" (latest")[0] for r in logged] == ["refused 1 undecodable request from ipv4:127.0.0.1"]
    assert all(r.exc_info is None for r in logged)
