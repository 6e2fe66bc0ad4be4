"""The job spec's one codec: every config field crosses config -> wire -> coordinator (its edge, its
SQLite state, a real gRPC answer) and back; a field the codec or the proto forgets fails here."""

from __future__ import annotations

import dataclasses
import json
import typing

import pytest

from cluster.shared import jobspec
from cluster.shared.config import LOCAL_ONLY, ExperimentConfig, parse_config
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist.errors import UserError

# Values a field must hold to pass the config's rules; any other field gets one made from its type.
# Horovod's options and parameter-server options exclude each other: two configs cover them (PS_CONFIG).
CONSTRAINED = {
    "distribution_mode": "horovod",  # the mode every optimization below is valid under
    "gradient_compression": "fp16",
    "num_ps": 1,  # ps mode only: PS_CONFIG changes it
    "evaluator": False,
    "environment_variables": {"MY_FLAG": "1", "OTHER": "two words"},
    "hyperparameters": {"global_batch_size": 64, "lr": 0.25, "layers": [3, 4.5, "x"], "nested": {"a": None, "b": True},
                        "big": 2 ** 40, "neg": -7},
    "entrypoint": ("python", "train.py", "--flag"),
    "kubernetes": {"image": "registry.example.com/tfdist:1", "pod_spec": {"containers": [
        {"name": "tfdist-worker", "resources": {"limits": {"memory": "64Gi"}}}], "tolerations": []}},
    "searcher": {"name": "adaptive_asha", "metric": "val_loss", "smaller_is_better": False, "max_trials": 8,
                 "max_concurrent_trials": 2, "max_length": {"epochs": 8}, "max_rungs": 3, "divisor": 2.0,
                 "mode": "aggressive", "bracket_rungs": [], "stop_once": False},
    "user_data": {"url": "https://example.com/d.tgz", "sizes": [1, 2.5], "flags": {"a": True, "b": None}},
    "determined": {"records_per_epoch": 5000, "min_validation_period": {"batches": 10}, "labels": ["a"],
                   "resources": {"max_slots": 4, "weight": 0.5}},
    "diagnose": {"variant": "no_communication", "steps": 20, "warmup": 5, "run": "4f2a9c01", "nodes": ["a2", "a1"]},
}


def _changed(field: dataclasses.Field, default):
    """A valid value unlike the default, made from the field's type so a new field is covered unasked."""
    if field.name in CONSTRAINED:
        return CONSTRAINED[field.name]
    kind = typing.get_type_hints(ExperimentConfig)[field.name]
    if kind is bool:
        return not default
    if kind is int:
        return default + 3
    if kind is float:
        return default + 1.5
    if kind is str:
        return f"/{field.name}-value"
    raise AssertionError(f"ExperimentConfig.{field.name}: give a test value in CONSTRAINED ({kind})")


def _default(field: dataclasses.Field):
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default


PS_CONFIG = {"distribution_mode": "ps", "num_ps": 2, "evaluator": True, "gradient_compression": "none",
             "auto_tune_tensor_fusion": False, "aggregation_frequency": 1, "searcher": {}}  # and a job, not a search


def every_field_changed() -> list[ExperimentConfig]:
    """Configs that together hold every wire field away from its default."""
    values = {f.name: _changed(f, _default(f)) for f in jobspec.wire_fields()}
    configs = [ExperimentConfig(**values), ExperimentConfig(**{**values, **PS_CONFIG})]
    for field in jobspec.wire_fields():  # the test is only as good as this: no field left at its default
        assert any(getattr(c, field.name) != _default(field) for c in configs), field.name
    return configs


def _submitted(config: ExperimentConfig) -> jobspec.JobSpec:
    return jobspec.JobSpec(config, "distribution.mode is horovod", priority=5, working_dir="/work",
                           startup_timeout=42.0, submission_id="sub-1")


def test_the_wire_and_local_fields_cover_the_config():
    local = [f.name for f in dataclasses.fields(ExperimentConfig) if f.metadata.get(LOCAL_ONLY)]
    assert local == ["slots_given", "name_given", "priority", "notes", "launcher", "own_launcher"]
    assert {f.name for f in jobspec.wire_fields()} == set(pb.JobConfig.DESCRIPTOR.fields_by_name), \
        "ExperimentConfig and the proto's JobConfig must have the same fields (cluster/shared/protos)"


@pytest.mark.parametrize("which", [0, 1], ids=["horovod", "ps"])
def test_every_field_survives_the_wire_and_the_stored_form(which):
    spec = _submitted(every_field_changed()[which])
    wire = pb.JobSpec.FromString(jobspec.to_pb(spec).SerializeToString())
    decoded = jobspec.from_pb(wire)  # the coordinator's edge: validated
    assert decoded == spec
    stored = jobspec.JobSpec.from_dict(json.loads(decoded.to_json()))  # its state: not validated again
    assert stored == spec
    for field in jobspec.wire_fields():
        assert getattr(stored.config, field.name) == getattr(spec.config, field.name), field.name


def test_hyperparameters_keep_their_types():
    spec = _submitted(every_field_changed()[0])
    hparams = jobspec.from_pb(jobspec.to_pb(spec)).config.hyperparameters
    assert type(hparams["global_batch_size"]) is int and type(hparams["lr"]) is float
    assert hparams["layers"] == [3, 4.5, "x"] and type(hparams["layers"][0]) is int
    assert hparams["nested"] == {"a": None, "b": True} and hparams["big"] == 2 ** 40


def test_every_field_survives_a_real_coordinator(tmp_path):
    """Through gRPC into a coordinator, its SQLite file, a restart of it, and GetJob back."""
    from cluster.shared.model import Address, AgentRecord
    from tests.agent_core import AgentsServer
    from cluster.shared.rpc import Client

    specs = [_submitted(c) for c in every_field_changed()]
    specs[1] = dataclasses.replace(specs[1], submission_id="sub-2")
    server = AgentsServer(str(tmp_path), "127.0.0.1:0").start()
    try:
        server.core.nodes.register(AgentRecord("n1", 8, (Address("127.0.0.1", 8),)), (), (), 0.0)  # room for the jobs
        client = Client(server.address, server.issue("user", "alice"))
        job_ids = [client.submit(jobspec.to_pb(spec), retry_for=0) for spec in specs]
        client.close()
    finally:
        server.stop()
    server = AgentsServer(str(tmp_path), "127.0.0.1:0").start()  # read back from the state file
    try:
        client = Client(server.address, server.issue("user", "alice"))
        # A config whose searcher searches is an experiment: its spec is stored with it, and each trial's job
        # carries it with the trial's values.
        searches = {i for i, job_id in enumerate(job_ids) if job_id.startswith("e")}
        assert searches == {i for i, spec in enumerate(specs) if spec.config.searcher}
        experiments = {i: server.store.experiment(job_ids[i]) for i in searches}
        for i, experiment in experiments.items():
            assert experiment.spec == specs[i]
            trial = server.store.job(experiment.search["trials"][0]["job"]).spec
            assert trial.config.searcher == specs[i].config.searcher and trial.experiment_id == experiment.id
        kept = [i for i in range(len(specs)) if i not in searches]
        specs = [specs[i] for i in kept]
        job_ids = [job_ids[i] for i in kept]
        jobs = [client.job(job_id) for job_id in job_ids]
        client.close()
        stored = [server.store.job(job_id).spec for job_id in job_ids]
    finally:
        server.stop()
    assert stored == specs and experiments
    # Users read everything back except environment values, which never leave the coordinator.
    hidden = [dataclasses.replace(s, config=dataclasses.replace(
        s.config, environment_variables={k: "(hidden)" for k in s.config.environment_variables})) for s in specs]
    assert [jobspec.from_pb(job.spec, validate=False) for job in jobs] == hidden
    assert {job.owner for job in jobs} == {"alice"}


def test_auto_is_decided_once_by_the_client_and_travels():
    config = parse_config("entrypoint: python t.py\noptimizations: {gradient_compression: fp16}\n")
    assert config.distribution_mode == "auto"
    spec = jobspec.job_spec(config)
    assert spec.distribution_mode == "horovod" and "gradient_compression" in spec.mode_reason
    assert jobspec.from_pb(jobspec.to_pb(spec)).mode_reason == spec.mode_reason
    undecided = jobspec.to_pb(dataclasses.replace(spec, config=config))
    with pytest.raises(UserError, match="distribution mode is auto"):
        jobspec.from_pb(undecided)


def test_a_spec_without_config_is_an_older_client():
    with pytest.raises(UserError, match="the client and the coordinator run different tfdist versions"):
        jobspec.from_pb(pb.JobSpec(priority=1))


def test_bad_values_from_the_wire_get_the_configs_messages():
    good = jobspec.job_spec(parse_config("entrypoint: python t.py\n"))
    for change, message in [({"slots_per_trial": 0}, "resources.slots_per_trial: must be at least 1"),
                            ({"gradient_compression": "zip"}, "optimizations.gradient_compression"),
                            ({"environment_variables": {"TFDIST_RANK": "3"}}, "TFDIST_RANK is set by tfdist"),
                            ({"step_timeout": -1.0}, "watchdog.step_timeout"),
                            ({"distribution_mode": "mpi"}, "distribution.mode: unknown value 'mpi'")]:
        bad = dataclasses.replace(good, config=dataclasses.replace(good.config, **change))
        with pytest.raises(UserError, match=message):
            jobspec.from_pb(jobspec.to_pb(bad))


def test_the_json_people_read_has_every_field_and_json_types_only():
    """`tfdist job --json` (docs/json.md): every wire field once, under its own key or in `config`;
    environment names only; numbers as numbers."""
    spec = _submitted(every_field_changed()[0])
    plain = jobspec.to_plain(spec)
    assert (plain["slots"], plain["environment"], plain["hyperparameters"]) == \
        (spec.slots, ["MY_FLAG", "OTHER"], CONSTRAINED["hyperparameters"])
    assert plain["distribution"] == {"mode": "horovod", "reason": "distribution.mode is horovod"}
    assert (plain["command"], plain["priority"], plain["startup_timeout"]) == (list(CONSTRAINED["entrypoint"]), 5, 42.0)
    shown = set(plain["config"]) | set(jobspec.PLAIN_OWN_KEYS)
    assert shown == {f.name for f in jobspec.wire_fields()} and not set(plain["config"]) & set(jobspec.PLAIN_OWN_KEYS)
    assert json.loads(json.dumps(plain, allow_nan=False)) == plain  # tuples as lists: what --json prints
