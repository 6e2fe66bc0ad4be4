"""The experiment config as one typed value: what a job is asked to be. Its rules (YAML parsing, checks,
command-line overrides) are cluster/shared/config.py's; the mode planners read the value alone."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

LOCAL_ONLY = "local_only"  # field metadata: a fact of the submitting terminal, not carried with the job


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    name: str = ""  # "": not named; check_config names the job after its command (cluster/shared/job_name.py)
    entrypoint: tuple[str, ...] = ()
    slots_per_trial: int = 1
    distribution_mode: str = "auto"  # as configured; cluster/shared/modes/auto.py decides `auto`
    num_ps: int = 1  # ps mode: parameter-server tasks
    evaluator: bool = False  # ps mode: a side-car evaluator task
    gradient_compression: str = "none"  # optimizations.gradient_compression (Horovod)
    auto_tune_tensor_fusion: bool = False  # optimizations.auto_tune_tensor_fusion (Horovod's autotuner)
    average_training_metrics: bool = False  # optimizations.average_training_metrics (tfdist's metrics callback)
    aggregation_frequency: int = 1  # optimizations.aggregation_frequency: all-reduce every k steps
    step_timeout: float = 600.0  # watchdog.step_timeout: seconds a rank may make no progress (0: off)
    hyperparameters: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    environment_variables: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Restarts after a failure (the whole gang, from the latest checkpoint). 0 by default, unlike
    # Determined's 5: a script with a bug would otherwise run six times before the user hears of it.
    max_restarts: int = 0
    checkpoint_storage: str = ""  # checkpoint_storage.host_path (+ storage_path): a directory every node shares
    kubernetes: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the Kubernetes engine's image, pod_spec
    # A searcher that searches (cluster/shared/searcher.py, as its checked mapping): the config is an experiment's,
    # `hyperparameters` its space (typed specs kept), and each trial a job with its values. {}: one job.
    searcher: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    seed: int = 0  # reproducibility.experiment_seed (0: the coordinator picks one and keeps it)
    # Determined's `data`: handed to the script as it is (TFDIST_USER_DATA, and the Determined view's `data`).
    user_data: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Determined's keys tfdist keeps as written, by section (records_per_epoch, min_validation_period,
    # resources.max_slots, ...: cluster/shared/determined_config.py), for the view scripts read
    # (cluster/shared/determined_view.py) and what tfdist reads of them (records_per_epoch).
    determined: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # A `tfdist diagnose` variant this job is ({variant, steps, warmup}: cluster/shared/diagnosis.py); the workers
    # are told it (TFDIST_DIAGNOSE_*). {}: an ordinary job. Set by the diagnose runner, not read from YAML.
    diagnose: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Whether slots_per_trial was given (file or --slots) rather than defaulted: inside a Slurm allocation
    # an unset one takes the allocation's tasks, a given one must agree with them.
    slots_given: bool = dataclasses.field(default=False, compare=False, metadata={LOCAL_ONLY: True})
    # Whether `name` was given in the file: without it, `--` COMMAND renames the job after that command.
    name_given: bool = dataclasses.field(default=False, compare=False, metadata={LOCAL_ONLY: True})
    # resources.priority (Determined's) as tfdist's: the job's priority unless --priority is given; None: not set.
    priority: int | None = dataclasses.field(default=None, compare=False, metadata={LOCAL_ONLY: True})
    # One line each, "KEY: what tfdist does": Determined's keys that change nothing here, or only on some engines
    # (`tfdist launch` prints them before the job starts).
    notes: tuple[str, ...] = dataclasses.field(default=(), compare=False, metadata={LOCAL_ONLY: True})
    # Determined's launcher the entrypoint named (e.g. "determined.launch.tensorflow"; the entrypoint is the command
    # it wraps), or "": `auto` runs the command in that launcher's mode (cluster/shared/determined_launchers.py).
    launcher: str = dataclasses.field(default="", compare=False, metadata={LOCAL_ONLY: True})
    # The entrypoint's script imports `determined` and names no launcher: it is its own launcher, and `auto` runs it
    # once per node, as Determined does (mode per_node).
    own_launcher: bool = dataclasses.field(default=False, compare=False, metadata={LOCAL_ONLY: True})

    @property
    def global_batch_size(self) -> int | None:
        return self.hyperparameters.get("global_batch_size")

    @property
    def optimizations(self) -> dict[str, Any]:
        """The `optimizations` section as configured (what a JobSpec carries)."""
        return {"gradient_compression": self.gradient_compression,
                "auto_tune_tensor_fusion": self.auto_tune_tensor_fusion,
                "average_training_metrics": self.average_training_metrics,
                "aggregation_frequency": self.aggregation_frequency}

    @property
    def horovod_only_options(self) -> list[str]:
        """Options set that only Horovod provides (they make `auto` choose Horovod)."""
        chosen = []
        if self.gradient_compression != "none":
            chosen.append(f"optimizations.gradient_compression={self.gradient_compression}")
        if self.auto_tune_tensor_fusion:
            chosen.append("optimizations.auto_tune_tensor_fusion=true")
        return chosen
