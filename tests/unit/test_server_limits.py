"""The coordinator over real gRPC on loopback: oversized messages and unauthenticated calls are refused."""

import grpc
import pytest

from cluster.shared.rpc import Client, ClientError
from cluster.coordinator.server import MAX_MESSAGE_BYTES, CoordinatorServer
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

TOKEN = "k" * 40


@pytest.fixture
def server(tmp_path):
    s = CoordinatorServer(str(tmp_path), "127.0.0.1:0", token=TOKEN).start()
    yield s
    s.stop(grace=0)


def test_oversized_message_is_refused(server):
    client = Client(server.address, TOKEN)
    huge = pb.PushLogsRequest(agent="a", job_id="j", lines=[pb.LogLine(text="x" * (MAX_MESSAGE_BYTES + 1))])
    with pytest.raises(ClientError) as err:
        client.call(client.agents.PushLogs, huge)
    assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    client.close()


def test_every_rpc_needs_the_token(server):
    for token in (None, "w" * 40):
        client = Client(server.address, token)
        for method, request in ((client.coordinator.ListJobs, pb.ListJobsRequest()),
                                (client.agents.Register, pb.RegisterRequest())):
            with pytest.raises(ClientError) as err:
                client.call(method, request)
            assert err.value.code == grpc.StatusCode.UNAUTHENTICATED
        client.close()
    ok = Client(server.address, TOKEN)
    assert ok.jobs() == []
    ok.close()


def test_wait_for_work_is_held_until_the_agent_has_work_and_needs_the_token(server):
    import threading

    client = Client(server.address, TOKEN)
    answers = []
    waiter = threading.Thread(target=lambda: answers.append(client.call(
        client.agents.WaitForWork, pb.WaitForWorkRequest(agent="n1", seen=0, wait_ms=20_000), timeout=30)))
    waiter.start()
    server.core.agent_board.bump(["n2"])  # another node's work: n1's call stays held
    server.core.agent_board.bump(["n1"])
    waiter.join(timeout=25)
    assert [(a.version, a.held) for a in answers] == [(1, True)]
    stranger = Client(server.address, "w" * 40)
    with pytest.raises(ClientError) as err:
        stranger.call(stranger.agents.WaitForWork, pb.WaitForWorkRequest(agent="n1"))
    assert err.value.code == grpc.StatusCode.UNAUTHENTICATED
    client.close()
    stranger.close()
