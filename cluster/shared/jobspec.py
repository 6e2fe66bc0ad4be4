"""The job spec and its one codec.

A `JobSpec` is what a client submits: the validated experiment config (`config`, whose distribution mode
is already decided: `auto` is resolved once, by `job_spec`, and travels with the job) and how it was
submitted (priority, working directory, start-up timeout, submission id). This module alone converts it to
and from the wire (`to_pb`/`from_pb`) and to and from the coordinator's stored form (`to_json`/`from_dict`).

The config's fields cross by name: every field of `ExperimentConfig` (but those marked LOCAL_ONLY) has a
field of the same name in the proto's `JobConfig`. Adding a config field means adding it to the dataclass
and to `JobConfig`; tests/unit/test_jobspec.py walks every field and fails on one that is lost.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Mapping

from google.protobuf import json_format

from cluster.shared import limits
from cluster.shared.config import ConfigError, check_config
from cluster.shared.experiment import LOCAL_ONLY, ExperimentConfig
from cluster.shared.job_name import job_name
from cluster.shared.modes import auto
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist.errors import UserError


class SpecError(UserError):
    """A job spec from the wire that cannot be a job: the message names the field and the fix."""


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """What was submitted. `config.distribution_mode` is the decided mode (never `auto`)."""

    config: ExperimentConfig
    mode_reason: str = ""  # why that mode (auto's decision, or "distribution.mode is X")
    priority: int = 0
    working_dir: str = ""
    startup_timeout: float = 0.0  # 0: the coordinator's default
    submission_id: str = ""
    experiment_id: str = ""  # a trial's experiment (cluster/coordinator/experiments/); "": a job of its own
    trial: int = 0  # its number there (1, 2, ...)

    # What readers ask most, by the names they knew.
    @property
    def name(self) -> str:
        return self.config.name

    @property
    def entrypoint(self) -> tuple[str, ...]:
        return self.config.entrypoint

    @property
    def slots(self) -> int:
        return self.config.slots_per_trial

    @property
    def distribution_mode(self) -> str:
        return self.config.distribution_mode

    @property
    def max_restarts(self) -> int:
        return self.config.max_restarts

    @property
    def step_timeout(self) -> float:
        return self.config.step_timeout

    @property
    def checkpoint_storage(self) -> str:
        return self.config.checkpoint_storage

    def to_json(self) -> str:
        """The stored form (the coordinator's state): the wire message as JSON. Made once per value (the
        value is frozen), so the coordinator can make it before it takes its lock."""
        made = self.__dict__.get("_json")
        if made is None:
            made = json_format.MessageToJson(to_pb(self), indent=None, sort_keys=True, preserving_proto_field_name=True)
            object.__setattr__(self, "_json", made)
        return made

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "JobSpec":
        """From the stored form; trusted (it was validated when submitted), so not checked again."""
        return from_pb(json_format.ParseDict(data, pb.JobSpec()), validate=False)


def job_spec(config: ExperimentConfig, *, priority: int = 0, working_dir: str = "", startup_timeout: float = 0.0,
             submission_id: str = "") -> JobSpec:
    """The spec a client submits: `auto` decided here, once; a relative checkpoint_storage made absolute
    from where the client runs (every node must find the same directory)."""
    decision = auto.decide(config)
    storage = os.path.abspath(config.checkpoint_storage) if config.checkpoint_storage else ""
    name = config.name or job_name(config.entrypoint)  # "": not named (ExperimentConfig's default)
    spec = JobSpec(dataclasses.replace(config, name=name, distribution_mode=decision.mode, checkpoint_storage=storage),
                   decision.reason, priority, working_dir, startup_timeout, submission_id)
    problem = submission_problem(spec)
    if problem:
        raise SpecError(problem)
    return spec


def submission_problem(spec: JobSpec) -> str:
    """What is wrong with how a job was submitted (the config has its own `check_config`), or ""; the same
    limits in the client and at the coordinator's edge."""
    checks = (
        ("priority", limits.int_problem(spec.priority, limits.MIN_PRIORITY, limits.MAX_PRIORITY)),
        ("startup_timeout", limits.seconds_problem(spec.startup_timeout)),
        ("working_dir", limits.text_problem(spec.working_dir, limits.MAX_PATH_CHARS)),
        ("submission_id", limits.text_problem(spec.submission_id, limits.MAX_SUBMISSION_ID_CHARS)),
        ("mode_reason", limits.text_problem(spec.mode_reason, limits.MAX_MODE_REASON_CHARS)),
    )
    return next((f"{where}: {problem}" for where, problem in checks if problem), "")


# The config's fields `tfdist job --json` shows under their own keys (docs/json.md); every other one goes
# into its `config` object by its field name, so a new config field appears there by itself.
PLAIN_OWN_KEYS = ("name", "entrypoint", "slots_per_trial", "distribution_mode", "hyperparameters",
                  "environment_variables")


def to_plain(spec: JobSpec) -> dict[str, Any]:
    """The spec's part of `tfdist job --json` (docs/json.md): JSON types only (numbers as numbers, the
    hyperparameters as an object), the environment's names only (its values never leave the coordinator),
    the rest of the config under `config`, then how the job was submitted."""
    config = spec.config
    return {
        "name": config.name,
        "command": list(config.entrypoint),
        "slots": config.slots_per_trial,
        "priority": spec.priority,
        "distribution": {"mode": config.distribution_mode, "reason": spec.mode_reason},
        "hyperparameters": _plain(config.hyperparameters),
        "environment": sorted(config.environment_variables),
        "config": {f.name: _plain(getattr(config, f.name)) for f in wire_fields() if f.name not in PLAIN_OWN_KEYS},
        "working_dir": spec.working_dir,
        "startup_timeout": spec.startup_timeout or None,  # None: the coordinator's default
        "submission_id": spec.submission_id,
        "experiment_id": spec.experiment_id or None,  # a trial's experiment
        "trial": spec.trial or None,
    }


def _plain(value: Any) -> Any:
    """A value as JSON has it: tuples as lists, mappings as objects, NaN and infinities (not JSON) as None."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


VALUE_MAPS = ("hyperparameters", "kubernetes", "searcher", "user_data", "determined", "diagnose")  # config fields of YAML's values, types kept on the wire


def wire_fields() -> list[dataclasses.Field]:
    """The config's fields that travel with the job."""
    return [f for f in dataclasses.fields(ExperimentConfig) if not f.metadata.get(LOCAL_ONLY)]


# ---------------------------------------------------------------- wire

def to_pb(spec: JobSpec) -> pb.JobSpec:
    message = pb.JobSpec(priority=spec.priority, working_dir=spec.working_dir, startup_timeout=spec.startup_timeout,
                         submission_id=spec.submission_id, mode_reason=spec.mode_reason,
                         experiment_id=spec.experiment_id, trial=spec.trial)
    config = message.config
    for field in wire_fields():
        value = getattr(spec.config, field.name)
        target = getattr(config, field.name)  # AttributeError: the field is missing from JobConfig
        if field.name in VALUE_MAPS:
            target.CopyFrom(map_to_pb(value))
        elif isinstance(value, Mapping):
            target.update({str(k): str(v) for k, v in value.items()})
        elif isinstance(value, (tuple, list)):
            target.extend(value)
        else:
            setattr(config, field.name, value)
    return message


def from_pb(message: pb.JobSpec, validate: bool = True) -> JobSpec:
    """The spec as a coordinator receives it: checked by the config's own rules when `validate` (its edge),
    taken as it is when read back from its own state."""
    if not message.HasField("config"):
        raise SpecError("the job spec carries no config: the client and the coordinator run different tfdist "
                        "versions (the config moved into JobSpec.config); run the same version on both")
    values = {}
    for field in wire_fields():
        value = getattr(message.config, field.name)
        if field.name in VALUE_MAPS:
            value = map_from_pb(value)
        elif field.name == "environment_variables":
            value = dict(value)
        elif field.name == "entrypoint":
            value = tuple(value)
        values[field.name] = value
    config = ExperimentConfig(**values, slots_given=True)
    if validate:
        if config.distribution_mode == "auto":
            raise SpecError("the job spec's distribution mode is auto: the submitting client decides it "
                            "(cluster.shared.jobspec.job_spec); submit the decided mode")
        if not config.entrypoint:
            raise SpecError("the job has no entrypoint: give a command")
        if message.experiment_id or message.trial:
            raise SpecError("job spec: experiment_id and trial are the coordinator's (it makes an experiment's "
                            "trials); submit the experiment's config, with its searcher")
        try:
            config = check_config(config)
        except ConfigError as e:
            raise SpecError(f"job spec: {e}") from None
    spec = JobSpec(config, message.mode_reason, message.priority, message.working_dir, message.startup_timeout,
                   message.submission_id, message.experiment_id, message.trial)
    problem = submission_problem(spec) if validate else ""
    if problem:
        raise SpecError(f"job spec: {problem}")
    return spec


def _value_to_pb(value: Any) -> pb.Value:
    if value is None:
        return pb.Value(null_value=True)
    if isinstance(value, bool):
        return pb.Value(bool_value=value)
    if isinstance(value, int) and -(2 ** 63) <= value < 2 ** 63:
        return pb.Value(int_value=value)
    if isinstance(value, float):
        return pb.Value(float_value=value)
    if isinstance(value, Mapping):
        return pb.Value(map_value=map_to_pb(value))
    if isinstance(value, (list, tuple)):
        return pb.Value(list_value=pb.ValueList(items=[_value_to_pb(v) for v in value]))
    return pb.Value(string_value=str(value))  # YAML dates (json.dumps(default=str) made them strings too); ints
    # beyond 64 bits also arrive as strings


def map_to_pb(mapping: Mapping[str, Any]) -> pb.ValueMap:
    message = pb.ValueMap()
    for key, value in mapping.items():
        message.fields[str(key)].CopyFrom(_value_to_pb(value))
    return message


def _value_from_pb(value: pb.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "map_value":
        return map_from_pb(value.map_value)
    if kind == "list_value":
        return [_value_from_pb(v) for v in value.list_value.items]
    if kind in (None, "null_value"):
        return None
    return getattr(value, kind)


def map_from_pb(message: pb.ValueMap) -> dict[str, Any]:
    return {key: _value_from_pb(message.fields[key]) for key in message.fields}
