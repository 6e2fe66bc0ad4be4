"""A bounded gRPC fuzz (issue 16, Measured 10 and Must 10): every RPC of the service descriptors, with
messages generated from the message descriptors, against a real coordinator over TLS on loopback, with the
credentials that pass its access checks (an admin for user RPCs, node n1 for agent RPCs). No answer may be
INTERNAL or UNKNOWN (a client's mistake is INVALID_ARGUMENT, NOT_FOUND...), no call may hang past its
deadline, and the coordinator still answers afterwards.

Measured before: 38 `JSONDecodeError` and 38 `OverflowError: Python int too large to convert to SQLite
INTEGER` (numeric ids >= 2^63) answered INTERNAL in 27,138 calls. `make test` runs FUZZ_EXAMPLES examples per
RPC (about 30-60 s for all); `make fuzz` sets TFDIST_FUZZ_EXAMPLES much higher.
"""

import math
import os

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.agent_core import AgentsServer
from cluster.shared import jobspec
from cluster.shared.config import ExperimentConfig
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.rpc import Client, ClientError

# `make test`: the same examples every run (a failure reproduces); `make fuzz`: many more, new ones each run.
FUZZ_EXAMPLES = int(os.environ.get("TFDIST_FUZZ_EXAMPLES", "0")) or 200
DERANDOMIZE = "TFDIST_FUZZ_EXAMPLES" not in os.environ
CALL_DEADLINE = 15.0  # seconds; a long poll is held at most WATCH_WAIT_MAX, and wait_ms is kept short below
pytestmark = pytest.mark.timeout(120 + FUZZ_EXAMPLES * 2)

# Calls that change jobs go last (cancel, then submit), so earlier RPCs meet the jobs as the fixture made them.
CHANGING = ("PreemptJob", "ResumeJob", "CancelJob", "SubmitJob")
RPCS = sorted(((service.name, method) for service in pb.DESCRIPTOR.services_by_name.values()
               for method in service.methods), key=lambda rpc: CHANGING.index(rpc[1].name) + 1
              if rpc[1].name in CHANGING else 0)
BAD = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED)

# ---------------------------------------------------------------- values, from the descriptors

INT_RANGES = {F.TYPE_INT32: 31, F.TYPE_SINT32: 31, F.TYPE_SFIXED32: 31, F.TYPE_INT64: 63, F.TYPE_SINT64: 63,
              F.TYPE_SFIXED64: 63}
UINT_BITS = {F.TYPE_UINT32: 32, F.TYPE_FIXED32: 32, F.TYPE_UINT64: 64, F.TYPE_FIXED64: 64}
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
# Names the coordinator knows, so that calls pass its access checks and reach its handlers.
KNOWN = {"agent": ["n1"], "peer": ["n1", "n2"], "name": ["n1"], "ip": ["127.0.0.1", "::1", "10.0.0.1"],
         "stream": ["stdout", "stderr"], "states": ["QUEUED", "RUNNING", "FAILED"]}
ALWAYS = {"agent", "job_id", "name", "spec"}
JOB_REFS = ["1", "2", "0", "-1", "99999999999999999999", "9223372036854775808", "1-zz", "\u00b2", "1 OR 1=1"]


def _int(bits: int, signed: bool) -> st.SearchStrategy:
    low, high = (-(2 ** bits), 2 ** bits - 1) if signed else (0, 2 ** bits - 1)
    edges = [low, high, 0, 1, -1 if signed else 2, 65_536, 65_537, 2 ** 31 - 1]
    return st.one_of(st.sampled_from([e for e in edges if low <= e <= high]), st.integers(low, high))


def _scalar(field, job_ids) -> st.SearchStrategy:
    t = field.type
    if t in INT_RANGES:
        if field.name == "wait_ms":  # a long poll: keep the calls short (the check bounds the rest)
            return st.sampled_from([-(2 ** 31), -1, 0, 20, 600_001, 2 ** 31 - 1])
        return _int(INT_RANGES[t], True)
    if t in UINT_BITS:
        return _int(UINT_BITS[t], False)
    if t in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        edges = st.sampled_from([0.0, -1.0, math.nan, math.inf, -math.inf, 1e308, 5e-324])
        return st.one_of(edges, st.floats(allow_nan=True, width=64 if t == F.TYPE_DOUBLE else 32))
    if t == F.TYPE_BOOL:
        return st.booleans()
    if t == F.TYPE_BYTES:
        return st.binary(max_size=40)
    if t == F.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values])
    if field.name in ("job_id", "leased_jobs", "stop_jobs"):  # mostly the real jobs, to reach the handlers
        return st.one_of(st.sampled_from(job_ids), st.sampled_from(job_ids), st.sampled_from(JOB_REFS), TEXT)
    known = KNOWN.get(field.name)
    return st.one_of(st.sampled_from(known), st.sampled_from(known), TEXT) if known else TEXT


def message(descriptor, job_ids: list[str], depth: int = 0) -> st.SearchStrategy:
    """A message of `descriptor` with a random subset of its fields set (oneofs: at most one member);
    nested messages to a bounded depth."""
    if descriptor.name == "JobSpec":  # a valid spec with random fields over it: reaches check_config
        return message_fields(descriptor, job_ids, depth).map(_over_valid_spec)
    return message_fields(descriptor, job_ids, depth)


def message_fields(descriptor, job_ids, depth):
    cls = _class(descriptor)
    parts, always = {}, {}
    for field in descriptor.fields:
        value = _field(field, job_ids, depth)
        if value is not None:  # who and what a call is about are always set: calls reach the handlers
            if field.name in ALWAYS:
                always[field.name] = value
            else:
                parts[field.name] = st.one_of(st.none(), value)
    oneofs = [[f.name for f in o.fields] for o in descriptor.oneofs]

    def build(values):
        chosen = {}
        for group in oneofs:  # one member of each oneof at most
            present = [n for n in group if values.get(n) is not None]
            for name in present[1:]:
                values[name] = None
        for name, value in values.items():
            if value is not None:
                chosen[name] = value
        return cls(**chosen)

    return st.fixed_dictionaries(always, optional=parts).map(build)


def _field(field, job_ids, depth):
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key_field, value_field = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        values = (message(value_field.message_type, job_ids, depth + 1) if value_field.message_type is not None
                  else _scalar(value_field, job_ids))
        if depth > 3 and value_field.message_type is not None:
            return None
        return st.dictionaries(_scalar(key_field, job_ids), values, max_size=3)
    if field.message_type is not None:
        if depth > 3:
            return None
        one = st.deferred(lambda: message(field.message_type, job_ids, depth + 1))
    else:
        one = _scalar(field, job_ids)
    if field.is_repeated:
        return st.lists(one, max_size=3)
    return one


def _class(descriptor):
    return pb.DESCRIPTOR.message_types_by_name.get(descriptor.name) and getattr(pb, descriptor.name)


def _over_valid_spec(random_spec: pb.JobSpec) -> pb.JobSpec:
    spec = jobspec.to_pb(jobspec.job_spec(ExperimentConfig(entrypoint=("python", "-c", "pass"), name="fuzz"),
                                          working_dir="/"))
    spec.MergeFrom(random_spec)
    return spec


# ---------------------------------------------------------------- a real coordinator

@pytest.fixture(scope="module")
def coordinator(tmp_path_factory):
    server = AgentsServer(str(tmp_path_factory.mktemp("state")), "127.0.0.1:0").start()
    admin = Client(server.address, server.issue("admin", "fuzz"))
    node = Client(server.address, server.issue("node", "n1"))
    node.call(node.agents.Register, pb.RegisterRequest(agent=pb.AgentInfo(
        name="n1", slots=4, addresses=[pb.Address(ip="127.0.0.1", prefix_len=8)])))
    def spec(slots):
        config = ExperimentConfig(entrypoint=("python", "-c", "pass"), slots_per_trial=slots)
        return jobspec.to_pb(jobspec.job_spec(config, working_dir="/"))

    placed = [admin.submit(spec(2), retry_for=0) for _ in range(2)]
    job_ids = [admin.submit(spec(4), retry_for=0), *placed]  # a QUEUED job (first) behind two placed ones
    yield server, {"Coordinator": admin, "AgentService": node}, job_ids
    admin.close()
    node.close()
    server.stop(grace=0)


@pytest.mark.parametrize("service,method", RPCS, ids=[m.name for _, m in RPCS])
def test_no_rpc_answers_internal_or_hangs(coordinator, service, method):
    server, clients, job_ids = coordinator
    client = clients[service]
    stub = client.coordinator if service == "Coordinator" else client.agents
    call = getattr(stub, method.name)
    seen = []

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, derandomize=DERANDOMIZE, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    @given(message(method.input_type, job_ids))
    def one_call(request):
        try:
            client.call(call, request, timeout=CALL_DEADLINE)
            seen.append("OK")
        except ClientError as e:
            assert e.code not in BAD, f"{method.name}({request}) answered {e.code.name}: {e}"
            seen.append(e.code.name)

    one_call()
    assert seen
    # still answering, and still knows its node
    agents = clients["Coordinator"].call(clients["Coordinator"].coordinator.ListAgents, pb.ListAgentsRequest(), timeout=10)
    assert "n1" in [a.name for a in agents.agents]
