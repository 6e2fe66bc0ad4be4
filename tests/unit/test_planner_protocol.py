"""Every distribution mode is a `Planner`: the type checker holds each registered planner to the protocol
(through `PLANNERS: dict[str, Planner]`), and each plan carries the success rule its planner declares."""

import os
import sys
import textwrap

import pytest

from cluster.client.launch import check_worker_needs
from cluster.shared.config import DISTRIBUTION_MODES, parse_config
from cluster.shared.modes import PLANNERS, JobPlan, NodePlacement, Placement, SuccessRule
from tfdist.errors import UserError
from tests.mypy_check import registry_errors


# Two planners that break the protocol, registered the way modes/__init__.py registers the real ones.
BROKEN_PLANNERS = textwrap.dedent('''\
    from cluster.shared.modes.base import JobPlan, Placement, Planner, SuccessRule


    class WrongPlanSignature:
        name = "wrong_signature"
        single_node = False
        success = SuccessRule.ALL_RANKS
        worker_needs: tuple[str, ...] = ()

        def ports_on(self, nodes, config) -> list[int]:
            return []

        def plan(self, placement: Placement) -> JobPlan:  # no config, no devices
            raise NotImplementedError


    class NoWorkerNeeds:
        name = "no_worker_needs"
        single_node = False
        success = SuccessRule.CHIEF

        def ports_on(self, nodes, config) -> list[int]:
            return []

        def plan(self, placement, config, devices) -> JobPlan:
            raise NotImplementedError


    REGISTRY: dict[str, Planner] = {"wrong": WrongPlanSignature(), "partial": NoWorkerNeeds()}
    ''')


def test_mypy_holds_every_registered_planner_to_the_protocol_and_refuses_a_broken_one(tmp_path):
    """One mypy run over cluster/shared/modes (must be clean) and a module of broken planners (must not be):
    the second half proves the first can fail."""
    assert registry_errors(os.path.join("cluster", "shared", "modes"), BROKEN_PLANNERS, tmp_path) == [
        'Dict entry 0 has incompatible type "str": "WrongPlanSignature"; expected "str": "Planner"  [dict-item]',
        'Dict entry 1 has incompatible type "str": "NoWorkerNeeds"; expected "str": "Planner"  [dict-item]']


def _placement_for(name, planner):
    """One node (single-node modes) or two, one slot each, with the ports the planner asks for."""
    hosts = ["10.0.0.1"] if planner.single_node else ["10.0.0.1", "10.0.0.2"]
    config = parse_config(f"distribution: {{mode: {name}}}")
    counts = planner.ports_on([NodePlacement(h, h, 1, ()) for h in hosts], config)
    ports = iter(range(5000, 5000 + sum(counts)))
    nodes = tuple(NodePlacement(h, h, 1, tuple(next(ports) for _ in range(c))) for h, c in zip(hosts, counts))
    return Placement("j", nodes), config


@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_every_planner_plans_with_its_declared_success_rule_under_its_name(name):
    planner = PLANNERS[name]
    placement, config = _placement_for(name, planner)
    plan = planner.plan(placement, config, [()] * len(placement.nodes))
    assert isinstance(plan, JobPlan) and plan.success is planner.success
    assert planner.name == name and {p.env["TFDIST_DISTRIBUTION"] for p in plan.processes} == {name}
    assert plan.store is not None  # every mode leases the job's store on its first node


def test_the_registry_plans_every_configurable_mode_and_declares_what_differs():
    assert DISTRIBUTION_MODES == ("auto", *PLANNERS)  # the config accepts what is registered, nothing else
    assert {n: (p.success, p.single_node, p.worker_needs) for n, p in PLANNERS.items()} == {
        "mwms": (SuccessRule.ALL_RANKS, False, ()),
        "ps": (SuccessRule.CHIEF, False, ()),
        "horovod": (SuccessRule.ALL_RANKS, False, ("horovod",)),
        "mirrored": (SuccessRule.ALL_RANKS, True, ()),
        "central_storage": (SuccessRule.ALL_RANKS, True, ()),
        "one_device": (SuccessRule.ALL_RANKS, True, ()),
        "per_node": (SuccessRule.ALL_RANKS, False, ()),
        "jax": (SuccessRule.ALL_RANKS, False, ("jax",)),
        "torch": (SuccessRule.ALL_RANKS, False, ("torch",))}


class _NeedsMissingModule:
    name = "needs_missing"
    worker_needs = ("json", "tfdist_no_such_module_here")


def test_a_local_launch_refuses_a_worker_python_lacking_what_the_planner_needs():
    with pytest.raises(UserError) as raised:
        check_worker_needs(sys.executable, _NeedsMissingModule())
    assert str(raised.value) == (
        f"distribution mode needs_missing needs tfdist_no_such_module_here, which is not installed for "
        f"{sys.executable}; install `tfdist_no_such_module_here` into that Python")
    check_worker_needs(sys.executable, PLANNERS["mwms"])  # needs nothing: no probe, no error


def test_the_probe_sees_a_pythonpath_the_config_gives_the_workers(tmp_path):
    (tmp_path / "tfdist_no_such_module_here.py").write_text("")
    check_worker_needs(sys.executable, _NeedsMissingModule(), {"PYTHONPATH": str(tmp_path)})  # found there
