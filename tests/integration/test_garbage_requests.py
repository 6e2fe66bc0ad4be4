"""Undecodable and oversized requests against a real coordinator process over TLS (issue 30, Must 4).

Measured before: a TLS client with no token sending b"\\xff\\xff\\xff" to any method got INTERNAL, and the
coordinator logged about 410 bytes of grpc's "Exception deserializing request!" traceback per call (1,156
calls/s from one thread: about 460 KB/s of log). Now: UNAUTHENTICATED without a token, INVALID_ARGUMENT with
one, and at most a rate-limited line in the log. A message over the 8 MiB cap is refused by gRPC's core
(RESOURCE_EXHAUSTED) before tfdist sees it, with nothing logged.
"""

import os
import time

import grpc
import pytest

from cluster.coordinator import wire_guard
from cluster.shared.auth import METADATA_KEY
from cluster.shared.credentials import Authority
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

pytestmark = pytest.mark.timeout(240)

GARBAGE = b"\xff\xff\xff"  # a varint that never ends: no protobuf message decodes from it
TRUNCATED = b"\x0a\x05ab"  # field 1, 5 bytes long, 2 sent
FLOOD = 2_000
LINE_BOUND = 600  # bytes one rate-limited log line may take (a traceback per call was about 400 bytes)
OVERSIZED = 9 * 1024 * 1024  # past the coordinator's 8 MiB max_receive_message_length
METHODS = [f"/{service.full_name}/{method.name}" for service in pb.DESCRIPTOR.services_by_name.values()
           for method in service.methods]
STREAMING = [m for s in pb.DESCRIPTOR.services_by_name.values() for m in s.methods
             if m.client_streaming or m.server_streaming]


def tls_channel(cluster) -> grpc.Channel:
    """TLS verified against the cluster's CA, no token: anyone who can reach the port."""
    ca = open(os.path.join(cluster.state_dir, "credentials", "ca.pem"), "rb").read()
    return grpc.secure_channel(cluster.address, grpc.ssl_channel_credentials(ca),
                               options=[("grpc.ssl_target_name_override", "tfdist-coordinator"),
                                        ("grpc.max_send_message_length", 2 * OVERSIZED)])


def call(channel: grpc.Channel, method: str, body: bytes, metadata=()) -> tuple[grpc.StatusCode, str]:
    """Sends `body` as is (no serializer: the bytes are the message) and returns (code, details)."""
    raw = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
    try:
        raw(body, timeout=15, metadata=metadata)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details() or ""


def log_size(cluster) -> int:
    return (cluster.tmp / "coordinator.log").stat().st_size


def test_garbage_floods_answer_unauthenticated_or_invalid_argument_and_barely_log(local_cluster):
    cluster = local_cluster()
    channel = tls_channel(cluster)
    token = Authority.load(os.path.join(cluster.state_dir, "credentials")).issue("user", "alice").token
    alice = ((METADATA_KEY, f"Bearer {token}"),)
    # What Gate answers a well-formed request without a token: a garbage one gets the same line.
    code, gate_says = call(channel, "/tfdist.v1.Coordinator/ListJobs", pb.ListJobsRequest().SerializeToString())
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert len(METHODS) == 21 and not STREAMING  # both services; no streaming RPC to cover (yet)
    before, started = log_size(cluster), time.monotonic()

    answers = {}
    for i in range(FLOOD):
        method = METHODS[i % len(METHODS)]
        answers.setdefault(call(channel, method, (GARBAGE, TRUNCATED)[i % 2]), []).append(method)
    assert list(answers) == [(grpc.StatusCode.UNAUTHENTICATED, gate_says)], {k: len(v) for k, v in answers.items()}

    for method in METHODS:  # a valid token: the client's mistake, named
        code, details = call(channel, method, GARBAGE, alice)
        expected = pb.DESCRIPTOR.services_by_name[method.split("/")[1].split(".")[-1]].methods_by_name[
            method.rsplit("/", 1)[1]].input_type.full_name
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (method, code, details)
        assert details.startswith(f"the request to {method} is not a valid {expected}: "), details
        assert "another version" in details

    grown = log_size(cluster) - before
    text = (cluster.tmp / "coordinator.log").read_text()[before:]
    lines = 1 + int((time.monotonic() - started) // wire_guard.LOG_EVERY) + 1  # the first, one per period, slack
    assert grown < lines * LINE_BOUND, (f"{FLOOD} garbage calls grew the coordinator's log by {grown} bytes "
                                        f"(at most {lines} lines):\n{text[:3000]}")
    assert "Traceback" not in text and "deserializing" not in text, text
    assert "undecodable" in text and "127.0.0.1" in text, text  # one line says what happened, and from where

    # A well-formed call still works.
    assert call(channel, "/tfdist.v1.Coordinator/ListJobs", pb.ListJobsRequest().SerializeToString(),
                alice)[0] == grpc.StatusCode.OK


def test_an_oversized_request_is_refused_by_grpc_without_a_traceback(local_cluster):
    cluster = local_cluster()
    channel = tls_channel(cluster)
    token = Authority.load(os.path.join(cluster.state_dir, "credentials")).issue("node", "n1").token
    before = log_size(cluster)
    for method in ("/tfdist.v1.Coordinator/SubmitJob", "/tfdist.v1.AgentService/PushLogs"):
        for metadata in ((), ((METADATA_KEY, f"Bearer {token}"),)):
            for body in (b"\x00" * OVERSIZED, GARBAGE * (OVERSIZED // len(GARBAGE))):
                code, details = call(channel, method, body, metadata)
                assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (method, code, details)
    text = (cluster.tmp / "coordinator.log").read_text()[before:]
    assert log_size(cluster) - before < LINE_BOUND and "Traceback" not in text, text
    assert call(channel, "/tfdist.v1.Coordinator/ListJobs", pb.ListJobsRequest().SerializeToString())[0] == \
        grpc.StatusCode.UNAUTHENTICATED  # still answering
