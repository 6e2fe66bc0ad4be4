"""Every key of Determined's experiment config and what tfdist does with it: ONE table (`TABLE`), read by the
translation (cluster/shared/determined_config.py: a note's text is its row's) and rendered by the docs
(docs/determined.md, `markdown()`), so what tfdist says and what the docs say are the same words.

Fates: `used` (tfdist has the concept and applies it, silently), `partly` (applied by some engines only, said in
one line), `noted` (accepted, changes nothing in tfdist: one line when the value is not Determined's default),
`refused` (one line naming the key and what tfdist does instead). Keys are Determined's schema's
(schemas/expconf/v0/*.json, both generations of its searchers)."""

from __future__ import annotations

import dataclasses
from typing import Any

USED, PARTLY, NOTED, REFUSED = "used", "partly", "noted", "refused"
_NONE = object()  # a row without a default: any value given is said


@dataclasses.dataclass(frozen=True)
class Row:
    key: str  # dotted, as Determined spells it; "checkpoint_storage.type: s3" names one value
    fate: str
    what: str  # what tfdist does instead: a note's or a refusal's text after "KEY: "
    default: Any = _NONE  # Determined's default: a value equal to it is not said

    def says(self, value: Any) -> bool:
        """Whether `value` is worth a line (a `noted` or `partly` key away from Determined's default)."""
        return self.fate in (PARTLY, NOTED) and (self.default is _NONE or value != self.default)


_TRIAL_API = "applies to Determined's Trial API; your script decides when it "
_ZERO = {"batches": 0}
TABLE: tuple[Row, ...] = (
    Row("name", USED, "the job's name (default: its command's)"),
    Row("entrypoint", USED, "the command every worker runs; one naming Determined's launcher runs the command it wraps "
                            "in that launcher's mode (docs/determined.md#launchers)"),
    Row("hyperparameters", USED, "ctx.hparams; typed ones are searched"),
    Row("max_restarts", USED, "restarts of the whole gang after a failure (default 0, unlike Determined's 5)"),
    Row("reproducibility.experiment_seed", USED, "the seed an experiment draws its trials' values from"),
    Row("data", USED, "handed to the script as it is: TFDIST_USER_DATA (JSON) and "
                      "det.get_cluster_info().trial._config['data']"),
    Row("records_per_epoch", USED, "an epoch's records: a trial with max_length in epochs whose script reports no "
                                   "epoch count is measured as batches x global_batch_size / records_per_epoch",
        default=0),
    Row("description", NOTED, "kept for the script (TFDIST_EXPERIMENT_CONFIG); tfdist shows a job by its name"),
    Row("labels", NOTED, "kept for the script (TFDIST_EXPERIMENT_CONFIG); tfdist shows a job by its name", default=[]),
    Row("workspace", NOTED, "Determined's web UI grouping; tfdist lists jobs by name and id", default=""),
    Row("project", NOTED, "Determined's web UI grouping; tfdist lists jobs by name and id", default=""),
    Row("debug", NOTED, "tfdist launch --verbose shows more of a job", default=False),
    Row("min_validation_period", NOTED, _TRIAL_API + "validates", default=_ZERO),
    Row("min_checkpoint_period", NOTED, _TRIAL_API + "checkpoints (tfdist.callbacks.Checkpoint's save_freq)",
        default=_ZERO),
    Row("perform_initial_validation", NOTED, _TRIAL_API + "validates", default=False),
    Row("scheduling_unit", NOTED, _TRIAL_API + "reports (tfdist.callbacks.MetricsReporter: every epoch)", default=100),
    Row("checkpoint_policy", NOTED, _TRIAL_API + "saves (tfdist.callbacks.Checkpoint)", default="best"),
    Row("profiling", NOTED, "tfdist does not profile: use TensorBoard's profiler "
                            "(tf.keras.callbacks.TensorBoard(profile_batch=...))", default={"enabled": False}),
    Row("log_policies", NOTED, "tfdist matches no log patterns: a failed job names its rank and last lines, and "
                               "max_restarts decides restarts", default=[]),
    Row("retention_policy", NOTED, "tfdist keeps a job's logs as long as its record"),
    Row("integrations", NOTED, "tfdist calls no Pachyderm or webhook when a job ends"),
    Row("tensorboard_storage", NOTED, "ignored by Determined too; TensorBoard files go where your script writes them "
                                      "(tfdist tensorboard)"),
    Row("security", NOTED, "Kerberos: unused by Determined too"),
    Row("data_layer", NOTED, "removed in Determined 0.19.10 and ignored, as Determined ignores it"),
    Row("preemption_timeout", NOTED, "tfdist asks a preempted job to stop at a common step and save, and waits for it "
                                     "(docs/fault-tolerance.md)"),
    Row("pbs", NOTED, "tfdist runs on Slurm (tfdist launch --slurm), not PBS", default={}),
    Row("slurm", NOTED, "give sbatch's options to tfdist launch --slurm OPTIONS; slots_per_node and gpu_type are not "
                        "read", default={}),
    Row("internal", REFUSED, "Determined's own key (null only)", default=None),
    Row("bind_mounts", PARTLY, "a job on a node's host (local, agents, Slurm) uses a path where it is: a mount whose "
                               "container_path is its host_path holds as it is, another is not made (the script sees "
                               "host_path); a Kubernetes pod mounts no host path (PodSecurity restricted refuses "
                               "hostPath): mount a volume through environment.pod_spec", default=[]),
    # ---------------------------------------------------------------- environment
    Row("environment.environment_variables", USED, "every worker's environment (tfdist's environment.variables); of a "
                                                   "{cpu, gpu} map each list on its kind of node"),
    Row("environment.environment_variables.rocm", NOTED, "tfdist offers NVIDIA GPU nodes: the rocm list is not used",
        default=[]),
    Row("environment.image", PARTLY, "the image of the job's pods under a coordinator's Kubernetes engine "
                                     "(kubernetes.image; of a {cpu, gpu} pair, gpu on GPU nodes); other engines run "
                                     "the job in the node's own environment"),
    Row("environment.image.rocm", NOTED, "tfdist offers NVIDIA GPU nodes: the rocm image is not used"),
    Row("environment.pod_spec", PARTLY, "the base of each pod under a coordinator's Kubernetes engine "
                                        "(kubernetes.pod_spec: its spec, through the same allow-list; "
                                        "determined-container is tfdist-worker); other engines ignore it"),
    Row("environment.force_pull_image", PARTLY, "Kubernetes: the worker container's imagePullPolicy is Always; "
                                                "other engines pull no image", default=False),
    Row("environment.registry_auth", REFUSED, "a registry password would travel with the job to its workers: name an "
                                              "imagePullSecret in environment.pod_spec (spec.imagePullSecrets)",
        default=None),
    Row("environment.add_capabilities", REFUSED, "tfdist's pods run PodSecurity restricted (no added capabilities), "
                                                 "and a job on a host has its user's own rights", default=[]),
    Row("environment.drop_capabilities", NOTED, "tfdist's pods drop ALL capabilities already; a job on a host has its "
                                                "user's own rights", default=[]),
    Row("environment.ports", NOTED, "tfdist leases its workers' ports itself; a port your script opens is on its "
                                    "node's address", default={}),
    Row("environment.proxy_ports", NOTED, "tfdist has no proxy to a job's ports: reach them on the node (kubectl "
                                          "port-forward under Kubernetes)", default=[]),
    # ---------------------------------------------------------------- resources
    Row("resources.slots_per_trial", USED, "the job's slots, at least 1 (Determined's 0, a CPU-only trial, is "
                                           "refused: a slot is a GPU on a GPU node)"),
    Row("resources.priority", USED, "the job's priority: tfdist's = 42 - priority (Determined's 1-99, lower first, "
                                    "default 42 is tfdist's higher first, default 0); --priority overrides it"),
    Row("resources.max_slots", USED, "an experiment runs at most max_slots / slots_per_trial trials at once (it caps "
                                     "searcher.max_concurrent_trials)"),
    Row("resources.slots", NOTED, "Determined's slots of a command or notebook; a trial's are "
                                  "resources.slots_per_trial"),
    Row("resources.weight", NOTED, "tfdist's queue is priority, then submission order (resources.priority)",
        default=1),
    Row("resources.resource_pool", NOTED, "tfdist runs on its coordinator's nodes: choose the cluster with "
                                          "--coordinator", default=""),
    Row("resources.shm_size", NOTED, "a job on a host uses the node's /dev/shm; under Kubernetes mount an emptyDir "
                                     "with medium: Memory at /dev/shm through environment.pod_spec"),
    Row("resources.agent_label", NOTED, "removed in Determined 0.20 and ignored, as Determined ignores it"),
    Row("resources.devices", NOTED, "a job on a host sees the node's devices (its GPUs by CUDA_VISIBLE_DEVICES); "
                                    "under Kubernetes request a device plugin's resource in environment.pod_spec",
        default=[]),
    Row("resources.is_single_node", NOTED, "tfdist places a job on as few whole nodes as hold its slots; to keep it "
                                           "on one node use distribution.mode mirrored", default=None),
    Row("resources.native_parallel", NOTED, "Determined's removed native API; ignored", default=False),
    # ---------------------------------------------------------------- optimizations
    Row("optimizations.aggregation_frequency", USED, "all-reduce every k steps (mwms, horovod)"),
    Row("optimizations.gradient_compression", USED, "true: Horovod's fp16 compression (makes auto choose horovod)"),
    Row("optimizations.auto_tune_tensor_fusion", USED, "Horovod's autotuner (makes auto choose horovod)"),
    Row("optimizations.average_training_metrics", USED, "MetricsReporter averages every rank's logs"),
    Row("optimizations.average_aggregated_gradients", NOTED, "tfdist.aggregate_gradients averages what it aggregates "
                                                             "(Keras's gradient accumulation)", default=True),
    Row("optimizations.mixed_precision", NOTED, "Apex AMP of Determined's PyTorch Trial; set Keras's mixed-precision "
                                                "policy in your script", default="O0"),
    Row("optimizations.tensor_fusion_threshold", NOTED, "Horovod's own default applies; set HOROVOD_FUSION_THRESHOLD "
                                                        "(bytes) in environment.environment_variables", default=64),
    Row("optimizations.tensor_fusion_cycle_time", NOTED, "Horovod's own default applies; set HOROVOD_CYCLE_TIME (ms) "
                                                         "in environment.environment_variables", default=1),
    Row("optimizations.grad_updates_size_file", NOTED, "Horovod's autotuner's file; not written", default=None),
    # ---------------------------------------------------------------- checkpoint_storage
    Row("checkpoint_storage.type: shared_fs", USED, "host_path (+ storage_path: inside it, relative or absolute) is "
                                                    "the directory every node shares"),
    Row("checkpoint_storage.type: directory", USED, "container_path is the directory (every node must see the same "
                                                    "one for a restart elsewhere)"),
    Row("checkpoint_storage.type: s3", REFUSED, "tfdist checkpoints to a shared filesystem: set type shared_fs with "
                                                "host_path (a directory every node mounts), or type directory"),
    Row("checkpoint_storage.type: gcs", REFUSED, "as s3"),
    Row("checkpoint_storage.type: azure", REFUSED, "as s3"),
    Row("checkpoint_storage.container_path", NOTED, "of shared_fs: the job runs on the node and writes to "
                                                    "host_path/storage_path; nothing is mounted"),
    Row("checkpoint_storage.checkpoint_path", NOTED, "Determined's legacy key; checkpoints go to "
                                                     "host_path/storage_path"),
    Row("checkpoint_storage.tensorboard_path", NOTED, "Determined's legacy key; TensorBoard files go where your "
                                                      "script writes them"),
    Row("checkpoint_storage.propagation", NOTED, "nothing is mounted", default="rprivate"),
    Row("checkpoint_storage.save_experiment_best", NOTED, "tfdist keeps a job's newest checkpoints "
                                                          "(tfdist.callbacks.Checkpoint's max_to_keep, default 3); "
                                                          "no garbage collection runs", default=0),
    Row("checkpoint_storage.save_trial_best", NOTED, "as save_experiment_best", default=1),
    Row("checkpoint_storage.save_trial_latest", NOTED, "as save_experiment_best", default=1),
    # ---------------------------------------------------------------- searcher (cluster/shared/searcher.py)
    Row("searcher.name", USED, "single, grid, random, adaptive_asha (and tfdist's tpe) run (single over searched "
                               "hyperparameters is one random trial, as Determined draws it); async_halving, pbt, "
                               "custom, adaptive, adaptive_simple, sync_halving are refused"),
    Row("searcher.metric", USED, "what the search optimises"),
    Row("searcher.smaller_is_better", USED, "its direction"),
    Row("searcher.max_length", USED, "a number of batches, or {batches|records|epochs: N}"),
    Row("searcher.time_metric", USED, "with max_time: batches, records or epochs is max_length in that unit; another "
                                      "metric's name measures a trial by that metric's value reported with the "
                                      "searcher metric"),
    Row("searcher.max_time", USED, "the length in time_metric"),
    Row("searcher.max_trials", USED, "trials of random, tpe, adaptive_asha"),
    Row("searcher.max_concurrent_trials", USED, "trials at once (default 16)"),
    Row("searcher.max_rungs", USED, "adaptive_asha's rungs"),
    Row("searcher.divisor", USED, "adaptive_asha's divisor"),
    Row("searcher.mode", USED, "adaptive_asha's brackets"),
    Row("searcher.bracket_rungs", USED, "adaptive_asha's rungs per bracket"),
    Row("searcher.stop_once", USED, "false only: a trial that loses a rung pauses and may be promoted"),
    Row("searcher.source_trial_id", REFUSED, "continue a tfdist job with tfdist resume ID, or load the checkpoint in "
                                             "your script", default=None),
    Row("searcher.source_checkpoint_uuid", REFUSED, "as source_trial_id", default=None),
)

ROWS = {row.key: row for row in TABLE}
# Determined's keys of other configs (notebooks, commands, shells): not an experiment's.
NOT_EXPERIMENT = ("idle_timeout", "notebook_idle_type", "work_dir", "context")


def row(key: str) -> Row:
    return ROWS[key]


def top_keys() -> tuple[str, ...]:
    """Determined's top-level keys."""
    return tuple(dict.fromkeys(r.key.split(".")[0] for r in TABLE))


def section_keys(section: str) -> tuple[str, ...]:
    """Determined's keys of one section (`resources`...), as written under it."""
    prefix = section + "."
    return tuple(dict.fromkeys(r.key[len(prefix):].split(".")[0].split(":")[0] for r in TABLE
                               if r.key.startswith(prefix)))


def markdown() -> str:
    """The table as docs/determined.md shows it."""
    lines = ["| Determined's key | tfdist | what tfdist does |", "|---|---|---|"]
    for r in TABLE:
        lines.append(f"| `{r.key}` | {r.fate} | {r.what.replace('|', '/')} |")
    return "\n".join(lines) + "\n"
