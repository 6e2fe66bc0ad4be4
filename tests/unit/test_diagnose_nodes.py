"""`tfdist diagnose` runs its variants on the baseline's nodes (issue 47 Must 1): config.diagnose.nodes, checked
at the coordinator's edge and carried on the wire, set by the runner for every variant after the baseline
(one_node: the baseline's node_rank 0 node). Where the coordinator places such a job:
tests/unit/test_scheduler_pinned.py; with real processes: tests/integration/test_pinned_nodes.py."""

import dataclasses
import json
from types import SimpleNamespace

import pytest

from cluster.client import diagnose_run
from cluster.shared import diagnose_variant, diagnosis, jobspec, limits
from cluster.shared.config import ConfigError, check_config, config_from_dict
from cluster.shared.diagnosis import VariantRun

VARIANT = {"variant": "synthetic_input", "steps": 5, "warmup": 1, "run": "r1"}


def test_nodes_are_kept_only_when_given():
    assert diagnose_variant.check_variant({**VARIANT, "nodes": ["a2", "a1"]}) == {**VARIANT, "nodes": ["a2", "a1"]}
    assert diagnose_variant.check_variant({**VARIANT, "nodes": ("local",)}) == {**VARIANT, "nodes": ["local"]}
    assert diagnose_variant.check_variant({**VARIANT, "nodes": []}) == VARIANT
    assert diagnose_variant.check_variant(VARIANT) == VARIANT
    assert diagnose_variant.pinned_nodes({**VARIANT, "nodes": ["a2", "a1"]}) == ("a2", "a1")
    assert diagnose_variant.pinned_nodes(VARIANT) == () and diagnose_variant.pinned_nodes({}) == ()


@pytest.mark.parametrize("nodes, message", [
    ("a1", r"diagnose.nodes: expected a list of node names, got 'a1' \(str\)"),
    (["a1", 3], r"diagnose.nodes\[1\]"),
    (["a1", ""], r"diagnose.nodes\[1\]"),
    (["a1", "a\n2"], r"diagnose.nodes\[1\]: contains a control character"),
    (["x" * (limits.MAX_AGENT_NAME_CHARS + 1)], r"diagnose.nodes\[0\]"),
    ([f"n{i}" for i in range(limits.MAX_SLOTS + 1)], r"diagnose.nodes: at most 65,536 nodes"),
    (["a1", "a2", "a1"], r"diagnose.nodes: node 'a1' \(str\) is named twice"),
])
def test_bad_nodes_are_refused_naming_the_value(nodes, message):
    config = config_from_dict({"entrypoint": "python train.py"})
    with pytest.raises(ConfigError, match=message):
        check_config(dataclasses.replace(config, diagnose={**VARIANT, "nodes": nodes}))


def test_the_nodes_travel_on_the_wire():
    config = check_config(dataclasses.replace(config_from_dict({"entrypoint": "python train.py",
                                                                "resources": {"slots_per_trial": 2}}),
                                              diagnose={**VARIANT, "nodes": ["a2", "a1"]}))
    sent = jobspec.job_spec(config)
    assert jobspec.from_pb(jobspec.to_pb(sent)).config.diagnose == {**VARIANT, "nodes": ["a2", "a1"]}
    assert jobspec.JobSpec.from_dict(json.loads(sent.to_json())).config.diagnose["nodes"] == ["a2", "a1"]


def test_a_variant_given_nodes_carries_them_and_one_without_does_not():
    config = check_config(config_from_dict({"name": "mnist", "entrypoint": "python train.py",
                                            "resources": {"slots_per_trial": 4}}))
    settings = diagnose_run.Settings(steps=12, warmup=2)
    made = check_config(diagnose_run.variant_config(config, "no_communication", settings, nodes=("a2", "a1")))
    assert made.diagnose == {"variant": "no_communication", "steps": 12, "warmup": 2, "run": "", "nodes": ["a2", "a1"]}
    assert "nodes" not in check_config(diagnose_run.variant_config(config, "baseline", settings)).diagnose


class Runner:
    """run_all's side of VariantRunner: records what each variant was asked to run on."""

    def __init__(self, variants, placement):
        self.settings = diagnose_run.Settings(variants=variants)
        self.client = SimpleNamespace(job=lambda job_id: SimpleNamespace(placement=placement))
        self.asked = []
        self.placed = tuple(p.agent for p in sorted(placement, key=lambda p: p.node_rank))

    def run(self, config, variant, slots=None, nodes=()):
        self.asked.append((variant, slots, tuple(nodes)))
        return VariantRun(variant, f"{variant}-job", self.placed if not nodes else tuple(nodes), 4,
                          (diagnosis.RankTiming(0, "a2", (0.1,)),))


def test_every_variant_after_the_baseline_runs_on_its_nodes():
    placement = [SimpleNamespace(agent="a1", node_rank=1, slots=2), SimpleNamespace(agent="a2", node_rank=0, slots=2)]
    runner = Runner(diagnosis.VARIANTS, placement)
    diagnose_run.run_all(runner, config_from_dict({"entrypoint": "python train.py"}))
    assert runner.asked == [("baseline", None, ()), ("one_node", 2, ("a2",)), ("no_communication", None, ("a2", "a1")),
                            ("synthetic_input", None, ("a2", "a1"))]


def test_a_local_run_pins_its_variants_to_the_one_node_local():
    runner = Runner(diagnosis.VARIANTS, [SimpleNamespace(agent="local", node_rank=0, slots=4)])
    runs = diagnose_run.run_all(runner, config_from_dict({"entrypoint": "python train.py"}))
    assert runner.asked == [("baseline", None, ()), ("no_communication", None, ("local",)),
                            ("synthetic_input", None, ("local",))]
    assert runs[1] == VariantRun("one_node", skipped="the job runs on one node")


def test_a_mode_whose_all_reduce_aggregation_cannot_remove_is_told_without_running_the_variant():
    runner = Runner(diagnosis.VARIANTS, [SimpleNamespace(agent="local", node_rank=0, slots=2)])
    runs = diagnose_run.run_all(runner, config_from_dict({"entrypoint": "python train.py",
                                                          "distribution": {"mode": "torch"}}))
    assert [asked[0] for asked in runner.asked] == ["baseline", "synthetic_input"]
    assert runs[2].name == "no_communication" and runs[2].skipped.startswith("mode torch: the torch mode has no Keras")


# ---------------------------------------------------------------- diagnose JOB: the environment stays put

def test_a_variant_of_an_existing_job_gets_its_hidden_environment_back_for_its_owner_only(tmp_path):
    """`tfdist diagnose JOB` reads the job as users see it, its environment's values "(hidden)": the coordinator
    fills them in from the original for the original's owner, and refuses anyone else's variant of it."""
    from cluster.coordinator.answers import job_to_pb
    from cluster.coordinator.core import BadRequest, Settings
    from cluster.coordinator.store import SqliteStore
    from cluster.coordinator import views
    from tests.agent_core import AgentCore
    from tests.core_nodes import Node

    core = AgentCore(SqliteStore(str(tmp_path / "c.sqlite")), Settings(port_range=(30000, 30009)))
    Node(core, "a1", slots=2).register()
    config = check_config(config_from_dict({"entrypoint": "python train.py", "environment": {
        "variables": {"API_TOKEN": "s3cret", "MODE": "fast"}}}))
    original, _ = core.submit(jobspec.job_spec(config), 1.0, owner="alice")
    seen = jobspec.from_pb(job_to_pb(views.job_view(core, original)).spec, validate=False).config
    assert dict(seen.environment_variables) == {"API_TOKEN": "(hidden)", "MODE": "(hidden)"}

    settings = diagnose_run.Settings(of=original)
    variant = jobspec.job_spec(dataclasses.replace(diagnose_run.variant_config(seen, "baseline", settings)))
    mine, _ = core.submit(variant, 2.0, owner="alice")
    assert dict(core.store.job(mine).spec.config.environment_variables) == {"API_TOKEN": "s3cret", "MODE": "fast"}
    assert core.store.job(mine).spec.config.diagnose["variant"] == "baseline"
    # Another command under the same `of` runs the original's: no value is read back by a command of one's choosing.
    leak = dataclasses.replace(variant, config=dataclasses.replace(
        variant.config, entrypoint=("python", "-c", "import os; print(os.environ['API_TOKEN'])"),
        environment_variables={"API_TOKEN": "(hidden)", "MODE": "(hidden)", "PYTHONSTARTUP": "/tmp/x.py"}))
    other, _ = core.submit(leak, 2.5, owner="alice")
    assert core.store.job(other).spec.config.entrypoint == ("python", "train.py")
    assert dict(core.store.job(other).spec.config.environment_variables) == {"API_TOKEN": "s3cret", "MODE": "fast"}
    with pytest.raises(BadRequest, match=f"job {original}: not a job of yours to diagnose"):
        core.submit(variant, 3.0, owner="mallory")


def test_a_job_is_pinned_to_no_more_nodes_than_it_has_slots():
    config = config_from_dict({"entrypoint": "python train.py", "resources": {"slots_per_trial": 2}})
    pinned = dataclasses.replace(config, diagnose={**VARIANT, "nodes": ["a1", "a2", "a3"]})
    with pytest.raises(ConfigError, match="diagnose.nodes: 3 nodes for a job of 2 slots"):
        check_config(pinned)
