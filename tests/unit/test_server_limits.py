"""The coordinator over real gRPC + TLS on loopback: oversized messages and unauthenticated calls are refused."""

import grpc
import pytest

from cluster.shared.rpc import Client, ClientError
from cluster.coordinator.server import MAX_MESSAGE_BYTES
from tests.agent_core import AgentsServer
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

@pytest.fixture
def server(tmp_path):
    s = AgentsServer(str(tmp_path), "127.0.0.1:0").start()
    yield s
    s.stop(grace=0)


def test_oversized_message_is_refused(server):
    client = Client(server.address, server.issue("node", "a"))
    huge = pb.PushLogsRequest(agent="a", job_id="j", lines=[pb.LogLine(text="x" * (MAX_MESSAGE_BYTES + 1))])
    with pytest.raises(ClientError) as err:
        client.call(client.agents.PushLogs, huge)
    assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    client.close()


def test_wait_for_work_is_held_until_the_agent_has_work_and_needs_the_nodes_credential(server):
    import threading

    client = Client(server.address, server.issue("node", "n1"))
    answers = []
    waiter = threading.Thread(target=lambda: answers.append(client.call(
        client.agents.WaitForWork, pb.WaitForWorkRequest(agent="n1", seen=0, wait_ms=20_000), timeout=30)))
    waiter.start()
    server.core.agent_board.bump(["n2"])  # another node's work: n1's call stays held
    server.core.agent_board.bump(["n1"])
    waiter.join(timeout=25)
    assert [(a.version, a.held) for a in answers] == [(server.core.agent_board.version("n1"), True)]
    assert answers[0].version > server.core.agent_board.version("n2")  # one counter: each bump a new version
    stranger = Client(server.address, server.issue("node", "n2"))
    with pytest.raises(ClientError) as err:
        stranger.call(stranger.agents.WaitForWork, pb.WaitForWorkRequest(agent="n1"))
    assert err.value.code == grpc.StatusCode.PERMISSION_DENIED
    client.close()
    stranger.close()
