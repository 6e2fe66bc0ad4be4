"""Bounded admission (issue 16, Must 6 and 10): the documented limits (cluster/shared/limits.py) checked by the
config's rules, the spec's codec and the coordinator's request checks; the coordinator's admission work bounded
by the cluster, never by a number in the request."""

import dataclasses
import math
import tracemalloc

import grpc
import pytest

from cluster.coordinator import request_checks
from cluster.coordinator.scheduler import InfeasibleJob, Node, PendingJob, achievable_sizes, check_feasible, schedule
from tests.agent_core import AgentsServer
from cluster.shared import jobspec, limits
from cluster.shared.config import ConfigError, ExperimentConfig, check_config, parse_config
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.rpc import Client, ClientError

pytestmark = pytest.mark.timeout(120)


# ---------------------------------------------------------------- the scheduler's work is the cluster's

def test_an_infeasible_huge_job_costs_what_the_cluster_does_not_what_it_asks():
    """Measured 5: slots=2147483647 made achievable_sizes build and scan a 2^31-bit set under the lock
    (minutes; 300,000,000 slots froze it 16.7 s). Memory is the deterministic measure: the bitset of the
    request's size is 256 MiB, the cluster's (3 x 8 slots) a few bytes."""
    nodes = [Node(n, 8, 8) for n in ("a", "b", "c")]
    tracemalloc.start()
    try:
        with pytest.raises(InfeasibleJob) as err:
            check_feasible(2 ** 31 - 1, nodes)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
    assert str(err.value).endswith("Sizes that fit: 1-8, 16, 24. Nearest: 24.")
    assert achievable_sizes([8, 8, 8], limit=2 ** 31) == achievable_sizes([8, 8, 8]) == (8, {16, 24})


def test_achievable_sizes_of_many_equal_nodes_and_mixed_ones():
    assert achievable_sizes([8] * 1000, limit=10 ** 9)[1] == set(range(16, 8001, 8))
    assert achievable_sizes([2, 3, 3, 5], limit=100) == (5, {6, 7, 8, 10, 11, 13})
    with pytest.raises(InfeasibleJob, match="Nearest: 8 or 10"):
        check_feasible(9, [Node("a", 5, 5), Node("b", 3, 3), Node("c", 2, 2)])


def test_a_job_beside_a_node_of_two_billion_slots_is_placed_without_walking_them():
    """best_fit walked every number from the job's slots up to the largest node's (2^31 steps here)."""
    nodes = [Node("big", 2 ** 31 - 1, 2 ** 31 - 1), Node("small", 8, 8)]
    decision = schedule(nodes, [PendingJob("j", 9)])
    assert [a.nodes for a in decision.assignments] == [(("big", 9),)]


# ---------------------------------------------------------------- the config's limits (files and the wire alike)

def _nested(depth: int) -> list:
    value: list = [1]
    for _ in range(depth):
        value = [value]
    return value


BASE = ExperimentConfig(entrypoint=("python", "train.py"), distribution_mode="mwms")


@pytest.mark.parametrize("change,message", [
    (dict(slots_per_trial=limits.MAX_SLOTS + 1), "resources.slots_per_trial: must be at most 65,536, got 65537"),
    (dict(max_restarts=10 ** 12), "max_restarts: must be at most 1,000, got 1000000000000"),
    (dict(distribution_mode="ps", num_ps=5000), "distribution.num_ps: must be at most 1,024, got 5000"),
    (dict(aggregation_frequency=2 ** 40), "optimizations.aggregation_frequency: must be at most 1,000,000"),
    (dict(step_timeout=math.nan), "watchdog.step_timeout: expected a number of seconds >= 0 (0 turns it off), got nan"),
    (dict(step_timeout=math.inf), "watchdog.step_timeout: expected a number of seconds >= 0 (0 turns it off), got inf"),
    (dict(step_timeout=1e9), "watchdog.step_timeout: must be at most 604800 seconds (7 days), got 1e+09"),
    (dict(name="x" * 300), "name: is 300 characters long; the limit is 256"),
    (dict(name="job\nname"), "name: contains a control character"),
    (dict(entrypoint=("python",) * 5000), "entrypoint: has 5,000 arguments; the limit is 4,096"),
    (dict(entrypoint=("python", "a" * 70_000)), "entrypoint[1]: is 70,000 characters long; the limit is 65,536"),
    (dict(entrypoint=("python", *["a" * 60_000] * 5)), "entrypoint: its arguments hold 300,006 characters"),
    (dict(entrypoint=("python", "a\0b")), "entrypoint[1]: contains a NUL byte"),
    (dict(checkpoint_storage="/ckpt\0"), "checkpoint_storage: contains a NUL byte"),
    (dict(environment_variables={"K": "v\0"}), "environment.variables.K: contains a NUL byte"),
    (dict(environment_variables={"K": "v" * 70_000}), "environment.variables.K: is 70,000 characters long"),
    (dict(environment_variables={f"K{i}": "" for i in range(1025)}), "environment.variables: 1,025 variables"),
    (dict(environment_variables={f"K{i}": "v" * 60_000 for i in range(5)}),
     "environment.variables: names and values hold more than 262,144 characters"),
    (dict(environment_variables={"K" * 300: "v"}), "a name of 300 characters; the limit is 256"),
    (dict(hyperparameters={"lr": _nested(40)}),
     "hyperparameters: are nested deeper than 32 levels"),
    (dict(hyperparameters={"global_batch_size": 2 ** 64}), "hyperparameters.global_batch_size: must be at most"),
    (dict(hyperparameters={"xs": list(range(20_000))}), "hyperparameters: have more than 10,000 keys, values"),
    (dict(hyperparameters={"s": "x" * 70_000}), "hyperparameters: hold more than 65,536 characters"),
    (dict(hyperparameters={"s": ["\x01" * 20_000]}), "hyperparameters: are 120,011 characters as JSON"),
])
def test_each_limit_is_one_message_naming_the_value(change, message):
    with pytest.raises(ConfigError) as err:
        check_config(dataclasses.replace(BASE, **change))
    assert message in str(err.value)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


def test_at_the_limits_the_config_is_accepted():
    config = dataclasses.replace(BASE, slots_per_trial=limits.MAX_SLOTS, max_restarts=limits.MAX_RESTARTS,
                                 step_timeout=limits.MAX_SECONDS, name="n" * limits.MAX_NAME_CHARS,
                                 environment_variables={"K": "v" * limits.MAX_ENV_VALUE_CHARS})
    assert check_config(config) == config


def test_a_shared_or_recursive_hyperparameter_costs_no_more_than_the_bound():
    shared = ["x"] * 10
    for _ in range(12):  # 10^12 leaves written out
        shared = [shared] * 10
    loop: list = []
    loop.append(loop)
    for value, problem in ((shared, "have more than 10,000"), (loop, "nested deeper than 32")):
        assert problem in limits.tree_problem({"a": value})


def test_yaml_anchors_within_the_bounds_still_work():
    config = parse_config("hyperparameters:\n  base: &b {lr: 0.1, layers: [1, 2]}\n  copy: *b\n")
    assert config.hyperparameters["copy"] == {"lr": 0.1, "layers": [1, 2]}


# ---------------------------------------------------------------- over the wire: a real coordinator

@pytest.fixture(scope="module")
def coordinator(tmp_path_factory):
    server = AgentsServer(str(tmp_path_factory.mktemp("state")), "127.0.0.1:0").start()
    admin, node = Client(server.address, server.issue("admin", "root")), Client(server.address, server.issue("node", "n1"))
    node.call(node.agents.Register, pb.RegisterRequest(agent=pb.AgentInfo(
        name="n1", slots=8, addresses=[pb.Address(ip="127.0.0.1", prefix_len=8)])))
    yield server, admin, node
    admin.close()
    node.close()
    server.stop(grace=0)


def _spec(**config) -> pb.JobSpec:
    spec = jobspec.to_pb(jobspec.job_spec(ExperimentConfig(entrypoint=("python", "-c", "pass")), working_dir="/"))
    for name, value in config.items():
        setattr(spec.config if hasattr(spec.config, name) else spec, name, value)
    return spec


@pytest.mark.parametrize("who,method,request_,message", [
    ("admin", "SubmitJob", pb.SubmitJobRequest(spec=_spec(slots_per_trial=2 ** 31 - 1)),
     "resources.slots_per_trial: must be at most 65,536, got 2147483647"),
    ("admin", "SubmitJob", pb.SubmitJobRequest(spec=_spec(priority=2 ** 31 - 1)), "job spec: priority: must be between"),
    ("admin", "SubmitJob", pb.SubmitJobRequest(spec=_spec(startup_timeout=math.nan)),
     "job spec: startup_timeout: expected a finite number of seconds, got nan"),
    ("admin", "SubmitJob", pb.SubmitJobRequest(spec=_spec(max_restarts=2 ** 31 - 1)), "max_restarts: must be at most"),
    ("admin", "GetJob", pb.GetJobRequest(job_id="99999999999999999999"), "has more than 18 digits"),
    ("admin", "GetJob", pb.GetJobRequest(job_id="\u00b2"), "is not a job id"),
    ("admin", "CancelJob", pb.CancelJobRequest(job_id="1 OR 1=1"), "is not a job id"),
    ("admin", "GetLogs", pb.GetLogsRequest(job_id="1", limit=-1), "limit: must be between 0"),
    ("admin", "GetLogs", pb.GetLogsRequest(job_id="1", after_seq=-5), "after_seq: must be between 0"),
    ("admin", "GetLogs", pb.GetLogsRequest(job_id="1", wait_ms=-1), "wait_ms: must be between 0 and 600,000"),
    ("admin", "GetLogs", pb.GetLogsRequest(job_id="1", rank=-7), "rank: must be between -1"),
    ("admin", "ListJobs", pb.ListJobsRequest(states=["EXPLODED"]), "states[0]: unknown job state 'EXPLODED'"),
    ("node", "Register", pb.RegisterRequest(agent=pb.AgentInfo(name="n1", slots=2 ** 31 - 1)),
     "agent.slots: must be between 1 and 65,536"),
    ("node", "Register", pb.RegisterRequest(agent=pb.AgentInfo(name="n1", slots=2, addresses=[pb.Address(ip="bogus")])),
     "agent.addresses[0].ip: 'bogus' is not an IP address"),
    ("node", "Heartbeat", pb.HeartbeatRequest(agent="n1", port_results=[pb.PortCheckResult(job_id="1-ab",
                                                                                          busy_ports=[70000])]),
     "port_results[0].busy_ports[0]: must be between 0 and 65,535"),
    ("node", "Heartbeat", pb.HeartbeatRequest(agent="n1", running=[pb.RunningTask(job_id="1-ab", progress=[
        pb.RankProgress(rank=0, age=math.nan)])]), "running[0].progress[0].age: expected a finite number"),
    ("node", "WaitForWork", pb.WaitForWorkRequest(agent="n1", seen=-1), "seen: must be between 0"),
    ("node", "PushLogs", pb.PushLogsRequest(agent="n1", job_id="1-ab", lines=[pb.LogLine()] * 10_001),
     "lines: 10,001 items; the limit is 10,000"),
    ("node", "ReportMetrics", pb.ReportMetricsRequest(agent="n1", job_id="1-ab", first_seq=2 ** 63 - 1, metrics=[
        pb.Metric(name="loss")] * 2), "first_seq: must be between 0 and 4,611,686,018,427,387,904"),
])
def test_a_bad_field_answers_invalid_argument_naming_it(coordinator, who, method, request_, message):
    """Measured 10: numeric ids >= 2^63 reached SQLite (`OverflowError`, answered INTERNAL), a bad address
    was stored and broke placement later, negative limits read every line."""
    server, admin, node = coordinator
    client = admin if who == "admin" else node
    service = client.coordinator if hasattr(client.coordinator, method) else client.agents
    with pytest.raises(ClientError) as err:
        client.call(getattr(service, method), request_, timeout=10)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT, err.value
    assert message in str(err.value)
    assert admin.call(admin.coordinator.ListAgents, pb.ListAgentsRequest(), timeout=10).agents[0].slots == 8


def test_every_rpc_of_the_descriptors_has_a_rule():
    assert set(request_checks.RULES) == {m.name for s in pb.DESCRIPTOR.services_by_name.values() for m in s.methods}


def test_a_bad_stored_address_or_subnet_fails_one_placement_in_words_not_every_one():
    from cluster.coordinator.placement import PlacementError, choose_addresses
    from cluster.shared.model import Address

    nodes = {"a": (Address("bogus", 24, "eth0"), Address("10.0.0.1", 24, "eth0")), "b": (Address("10.0.0.2", 99, ""),
                                                                                   Address("10.0.0.2", 24, "eth0"))}
    assert choose_addresses(nodes) == {"a": "10.0.0.1", "b": "10.0.0.2"}
    assert choose_addresses(nodes, "10.0.0.0/8") == {"a": "10.0.0.1", "b": "10.0.0.2"}
    with pytest.raises(PlacementError, match="'not-a-cidr' is not a network"):
        choose_addresses(nodes, "not-a-cidr")
