"""The coordinator over real gRPC on loopback: oversized messages and unauthenticated calls are refused."""

import grpc
import pytest

from cluster.client import Client, ClientError
from cluster.coordinator.server import MAX_MESSAGE_BYTES, CoordinatorServer
from cluster.protos.tfdist.v1 import cluster_pb2 as pb

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
