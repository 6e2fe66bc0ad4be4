"""The config as Determined's `det.get_cluster_info().trial._config` holds it (TFDIST_EXPERIMENT_CONFIG): tfdist's
values in Determined's keys, the keys cluster/shared/determined_config.py kept as written over them, Determined's
defaults under both. Pure; the mode planners put it in every worker's environment (modes/base.py common_env)."""

from __future__ import annotations

import copy
import json
import shlex
from typing import Any

from cluster.shared import limits
from cluster.shared.config_values import ConfigError
from cluster.shared.experiment import ExperimentConfig


def device_variables(config: ExperimentConfig, gpu: bool) -> dict[str, str]:
    """The variables of Determined's map form that only one kind of node gets: this one's."""
    devices = (config.determined.get("environment") or {}).get("environment_variables") or {}
    return dict(devices.get("gpu" if gpu else "cpu") or {})


_DEFAULTS = {  # what Determined's harness reads, at Determined's defaults
    "checkpoint_policy": "best", "min_validation_period": {"batches": 0}, "min_checkpoint_period": {"batches": 0},
    "scheduling_unit": 100, "perform_initial_validation": False, "records_per_epoch": 0, "debug": False,
    "profiling": {"enabled": False, "begin_on_batch": 0, "end_after_batch": None, "sync_timings": True},
    "description": None, "labels": [], "bind_mounts": [],
}
_MERGED = ("resources", "optimizations", "environment", "checkpoint_storage", "profiling")  # sections, not values
MAX_VIEW_ENTRYPOINT = 4_096  # a longer command is left out of the view (the script has its own argv)


def experiment_view(config: ExperimentConfig) -> dict[str, Any]:
    """The config as Determined's trial sees it: tfdist's values in Determined's keys, the keys kept as written
    over them, Determined's defaults under both. Environment variables and the pod spec are left out (the
    worker has them; they would make the view too large for one environment string)."""
    kept = config.determined
    searcher = dict(config.searcher or kept.get("searcher") or {"name": "single", "metric": None,
                                                                "smaller_is_better": True, "max_length": None})
    optimizations = {"aggregation_frequency": config.aggregation_frequency,
                     "auto_tune_tensor_fusion": config.auto_tune_tensor_fusion,
                     "average_training_metrics": config.average_training_metrics,
                     "gradient_compression": config.gradient_compression != "none",
                     "average_aggregated_gradients": True, "mixed_precision": "O0", "tensor_fusion_threshold": 64,
                     "tensor_fusion_cycle_time": 1, "grad_updates_size_file": None}
    storage = {"type": "shared_fs", "host_path": config.checkpoint_storage, "storage_path": None,
               "save_experiment_best": 0, "save_trial_best": 1, "save_trial_latest": 1} \
        if config.checkpoint_storage else None
    image = config.kubernetes.get("image")
    command = shlex.join(config.entrypoint)
    view: dict[str, Any] = {
        **copy.deepcopy(_DEFAULTS),
        "name": config.name, "data": dict(config.user_data), "hyperparameters": dict(config.hyperparameters),
        "searcher": searcher, "max_restarts": config.max_restarts,
        "reproducibility": {"experiment_seed": config.seed},
        "resources": {"slots_per_trial": config.slots_per_trial},
        "optimizations": optimizations, "checkpoint_storage": storage,
        "environment": {"image": {"cpu": image.get("cpu"), "cuda": image.get("gpu")} if isinstance(image, dict)
                        else image},
        "entrypoint": command if 0 < len(command) <= MAX_VIEW_ENTRYPOINT else None,
    }
    for key, value in kept.items():
        if key in _MERGED and isinstance(view.get(key), dict) and isinstance(value, dict):
            view[key] = {**view[key], **{k: v for k, v in value.items() if k != "environment_variables"}}
        elif key != "searcher" or not config.searcher:
            view[key] = value
    return view


def view_json(config: ExperimentConfig) -> str:
    return json.dumps(experiment_view(config), sort_keys=True, default=str)


def check_view(config: ExperimentConfig) -> None:
    """The view fits one environment string (measured with the space as written: a trial's values are shorter)."""
    size = len(view_json(config))
    if size > limits.MAX_EXPERIMENT_VIEW_CHARS:
        raise ConfigError(f"the config: hyperparameters, data and Determined's keys together are {size:,} characters "
                          f"as JSON; the limit is {limits.MAX_EXPERIMENT_VIEW_CHARS:,} (every worker gets them in one "
                          "environment variable; pass large inputs in a file)")
