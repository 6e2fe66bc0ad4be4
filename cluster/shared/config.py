"""The experiment config's rules: YAML in, one validated `ExperimentConfig` out (the value itself lives in
cluster/shared/experiment.py, which the mode planners read without these rules).

Determined's experiment config is accepted as written: each of its keys is used, said in one line (the config's
`notes`) or refused in one line (cluster/shared/determined_config.py translates it onto tfdist's sections first);
an unknown key is refused with a "did you mean", never silently ignored. Determined's typed hyperparameters and
`searcher` are cluster/shared/hyperparameters.py's (resolved here, with `--hparam`, into the values workers get); a
job without a `name` is named after its command (cluster/shared/job_name.py).
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any, Mapping, Sequence


from cluster.shared import (determined_config, determined_launchers, determined_view, diagnose_variant, hyperparameters, limits,
                            pod_spec_rules, search_space, searcher as searcher_lib)
from cluster.shared.config_file import ConfigFileError, load_yaml, yaml_errors, read_text
from cluster.shared.experiment import LOCAL_ONLY, ExperimentConfig  # noqa: F401 (the value, re-exported)
from cluster.shared.config_values import (ConfigError, check_bool, check_choice, check_int, check_mapping,  # noqa: F401
                                          check_seconds, check_text, describe, parse_env)  # (ConfigError, re-exported)
from cluster.shared.job_name import job_name
from cluster.shared.modes import PLANNERS

# Distribution modes (each has a launch plan in cluster/shared/modes/; `auto` is decided into one of them by
# cluster/shared/modes/auto.py). mwms: MultiWorkerMirroredStrategy across nodes; ps: parameter servers (chief,
# workers, ps, evaluator); horovod: one process per slot with Horovod over Gloo. Single-node, one process
# driving every slot: mirrored (MirroredStrategy), central_storage (CentralStorageStrategy), one_device.
DISTRIBUTION_MODES = ("auto", *PLANNERS)  # a mode is registered in one place: cluster/shared/modes
GRADIENT_COMPRESSIONS = ("none", "fp16")  # Horovod's compressors


# ---------------------------------------------------------------- parsing

def with_overrides(config: ExperimentConfig, *, slots: int | None = None, distribution: str | None = None,
                   entrypoint: tuple[str, ...] | list[str] | None = None) -> ExperimentConfig:
    """Applies command-line flags on top of the file, validated like the file; a config without `name` is
    named after the command that runs (`--hparam`s are applied where the file is read: `load_config`)."""
    changes: dict[str, Any] = {}
    if slots is not None:
        changes["slots_per_trial"] = check_int(slots, "--slots", minimum=1, maximum=limits.MAX_SLOTS)
        changes["slots_given"] = True
    if distribution is not None:
        changes["distribution_mode"] = check_choice(distribution, "--distribution", DISTRIBUTION_MODES)
    if entrypoint:
        changes.update(_launched(tuple(entrypoint)))
    if not config.name_given:
        changes["name"] = job_name(tuple(changes.get("entrypoint", config.entrypoint)))
    new = dataclasses.replace(config, **changes)
    _check_launcher_mode(new, "--distribution" if distribution is not None else "distribution.mode")
    _check_mode_slots(new.distribution_mode, new.slots_per_trial, "--slots/--distribution")
    _check_mode_options(new, "--distribution")
    return new



def load_config(path: str, hparams: Sequence[str] = ()) -> ExperimentConfig:
    """Reads and validates a YAML config file (a regular file, within limits.MAX_CONFIG_BYTES, UTF-8), with
    `--hparam NAME=VALUE`s over its hyperparameters. Raises ConfigError."""
    try:
        text = read_text(path)
    except ConfigFileError as e:
        raise ConfigError(f"{path}: {e}") from None
    return parse_config(text, source=path, hparams=hparams)


def parse_config(text: str, source: str = "<config>", hparams: Sequence[str] = ()) -> ExperimentConfig:
    try:
        raw = load_yaml(text)
    except ConfigFileError as e:
        raise ConfigError(f"{source}: {e}") from None
    except yaml_errors() as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    try:
        return config_from_dict({} if raw is None else raw, hparams=hparams)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


_TOP_KEYS = ("name", "entrypoint", "resources", "distribution", "optimizations", "watchdog", "hyperparameters",
             "environment", "max_restarts", "checkpoint_storage", "searcher", "kubernetes", "reproducibility")
_KUBERNETES_KEYS = ("image", "pod_spec", "working_dir")  # the Kubernetes engine's own keys: each pod of the job
_CHECKPOINT_KEYS = ("type", "host_path", "storage_path")
CHECKPOINT_STORAGE_TYPES = ("shared_fs",)
_WATCHDOG_KEYS = ("step_timeout",)
_RESOURCES_KEYS = ("slots_per_trial",)
_DISTRIBUTION_KEYS = ("mode", "num_ps", "evaluator")
_OPTIMIZATIONS_KEYS = ("gradient_compression", "auto_tune_tensor_fusion", "average_training_metrics",
                       "aggregation_frequency")
_ENVIRONMENT_KEYS = ("variables",)


def config_from_dict(raw: Any, hparams: Sequence[str] = ()) -> ExperimentConfig:
    """The YAML document's shape (sections, Determined's list of NAME=VALUE, a string entrypoint, typed
    hyperparameters with `hparams`, the --hparam NAME=VALUEs, over them) into the typed value, then the
    value's own checks (`check_config`)."""
    translated = determined_config.translate(determined_config.check_top(raw, _TOP_KEYS), hparams)
    root = translated.root
    resources = check_mapping(root.get("resources", {}), "resources", _RESOURCES_KEYS)
    distribution = check_mapping(root.get("distribution", {}), "distribution", _DISTRIBUTION_KEYS)
    environment = check_mapping(root.get("environment", {}), "environment", _ENVIRONMENT_KEYS)
    optimizations = check_mapping(root.get("optimizations", {}), "optimizations", _OPTIMIZATIONS_KEYS)
    watchdog = check_mapping(root.get("watchdog", {}), "watchdog", _WATCHDOG_KEYS)
    if "name" in root and (not isinstance(root["name"], str) or not root["name"].strip()):
        raise ConfigError(f"name: expected a non-empty string, got {describe(root['name'])}; or leave it out "
                          "(the job is named after its command)")
    search = _searcher(root.get("searcher"))
    values = _hyperparameters(root.get("hyperparameters"), hparams, search.searches)
    kept = dict(translated.determined)
    if root.get("searcher") is not None and not search.searches:  # single: for the script's view only
        kept["searcher"] = search.to_mapping()
    config = ExperimentConfig(
        name=root.get("name", ""),
        slots_per_trial=resources.get("slots_per_trial", 1),
        distribution_mode=distribution.get("mode", "auto"),
        num_ps=distribution.get("num_ps", 1),
        evaluator=distribution.get("evaluator", False),
        gradient_compression=optimizations.get("gradient_compression", "none"),
        auto_tune_tensor_fusion=optimizations.get("auto_tune_tensor_fusion", False),
        average_training_metrics=optimizations.get("average_training_metrics", False),
        aggregation_frequency=optimizations.get("aggregation_frequency", 1),
        step_timeout=watchdog.get("step_timeout", ExperimentConfig.step_timeout),
        hyperparameters=values,
        environment_variables=parse_env(environment.get("variables")),
        max_restarts=root.get("max_restarts", ExperimentConfig.max_restarts),
        checkpoint_storage=_parse_checkpoint_storage(root.get("checkpoint_storage")),
        kubernetes=check_mapping(root.get("kubernetes", {}), "kubernetes", _KUBERNETES_KEYS),
        searcher=search.to_mapping() if search.searches else {},
        seed=_seed(root.get("reproducibility")),
        user_data=translated.user_data,
        determined=kept,
        slots_given="slots_per_trial" in resources,
        name_given="name" in root,
        priority=translated.priority,
        notes=translated.notes,
        **_launched(_parse_entrypoint(root.get("entrypoint"))),
    )
    _check_launcher_mode(config, "distribution.mode")
    if config.launcher == "determined.launch.tensorflow" and "TF_USE_LEGACY_KERAS" not in config.environment_variables:
        config = dataclasses.replace(config, notes=(*config.notes, determined_launchers.KERAS_3_NOTE))
    return check_config(config, ps_options_given="num_ps" in distribution or "evaluator" in distribution)


def _launched(entrypoint: tuple[str, ...]) -> dict[str, Any]:
    """The entrypoint's fields: the command a Determined launcher in it wraps (and which launcher), or whether the
    script is its own launcher (it imports `determined`: read from the file, as the job's workers will run it)."""
    if not entrypoint:
        return {"entrypoint": entrypoint}
    try:
        found = determined_launchers.unwrap(entrypoint)
    except determined_launchers.LauncherError as e:
        raise ConfigError(str(e)) from None
    own = not found.launcher and determined_launchers.script_imports_determined(found.command)
    return {"entrypoint": found.command, "launcher": found.launcher, "own_launcher": own}


def _check_launcher_mode(config: ExperimentConfig, where: str) -> None:
    """A launcher stands for a mode: another mode named beside it, or an option only another mode has, is refused."""
    mode = determined_launchers.mode_of(config.launcher)
    if mode and config.distribution_mode not in ("auto", mode):
        raise ConfigError(f"{where}: the entrypoint names {config.launcher}, which runs mode {mode}, but the mode is "
                          f"{config.distribution_mode}; drop the launcher or the mode")
    if mode and mode != "horovod" and config.horovod_only_options:
        raise ConfigError(f"optimizations: {', '.join(config.horovod_only_options)} is implemented through Horovod, "
                          f"but the entrypoint names {config.launcher} (mode {mode}); name determined.launch.horovod "
                          "or drop the option")


def check_config(config: ExperimentConfig, ps_options_given: bool = False) -> ExperimentConfig:
    """Every rule a config obeys, on the typed value: what `config_from_dict` builds from a file and what the
    coordinator decodes from the wire get the same checks and messages, each value's own before the rules
    between values. Returns it normalised (seconds as float, plain dict and tuple copies).
    `ps_options_given`: the file named a parameter-server option (even at its default value)."""
    hparams = _check_hyperparameters(config.hyperparameters)
    if "global_batch_size" in hparams and not config.searcher:  # searched: each trial's is checked
        check_int(hparams["global_batch_size"], "hyperparameters.global_batch_size", minimum=1,
                   maximum=limits.MAX_GLOBAL_BATCH_SIZE)
    name = job_name(config.entrypoint) if config.name == "" and config.entrypoint else config.name
    if not isinstance(name, str) or (name != "" and not name.strip()):  # "": not named, nor a command yet
        raise ConfigError(f"name: expected a non-empty string, got {describe(name)}")
    check_text(name, "name", limits.MAX_NAME_CHARS, printable=True)
    check_text(config.checkpoint_storage, "checkpoint_storage", limits.MAX_PATH_CHARS)
    checked = dataclasses.replace(
        config,
        name=name,
        entrypoint=_check_entrypoint(config.entrypoint),
        slots_per_trial=check_int(config.slots_per_trial, "resources.slots_per_trial", minimum=1,
                                   maximum=limits.MAX_SLOTS),
        distribution_mode=check_choice(config.distribution_mode, "distribution.mode", DISTRIBUTION_MODES),
        num_ps=check_int(config.num_ps, "distribution.num_ps", minimum=1, maximum=limits.MAX_NUM_PS),
        evaluator=check_bool(config.evaluator, "distribution.evaluator"),
        gradient_compression=check_choice(config.gradient_compression, "optimizations.gradient_compression",
                                           GRADIENT_COMPRESSIONS),
        auto_tune_tensor_fusion=check_bool(config.auto_tune_tensor_fusion, "optimizations.auto_tune_tensor_fusion"),
        average_training_metrics=check_bool(config.average_training_metrics,
                                             "optimizations.average_training_metrics"),
        aggregation_frequency=check_int(config.aggregation_frequency, "optimizations.aggregation_frequency",
                                         minimum=1, maximum=limits.MAX_AGGREGATION_FREQUENCY),
        step_timeout=check_seconds(config.step_timeout, "watchdog.step_timeout"),
        hyperparameters=hparams,
        environment_variables=parse_env(config.environment_variables),
        max_restarts=check_int(config.max_restarts, "max_restarts", minimum=0, maximum=limits.MAX_RESTARTS),
        kubernetes=_check_kubernetes(config.kubernetes),
        searcher=_check_search(config.searcher, hparams),
        seed=check_int(config.seed, "reproducibility.experiment_seed", minimum=0, maximum=2**31 - 1),
        user_data=determined_config.check_kept(config.user_data, "data", limits.MAX_USER_DATA_CHARS),
        determined=determined_config.check_determined(config.determined),
        diagnose=diagnose_variant.check_variant(config.diagnose),
    )
    determined_view.check_view(checked)
    diagnose_variant.check_nodes_fit(checked.diagnose, checked.slots_per_trial)
    _check_mode_slots(checked.distribution_mode, checked.slots_per_trial, "resources.slots_per_trial")
    _check_mode_options(checked, "distribution.mode", ps_options_given=ps_options_given)
    return checked


def _check_kubernetes(value: Any) -> dict[str, Any]:
    """`kubernetes: {image: IMAGE, pod_spec: {...}, working_dir: DIR}`: read by the Kubernetes engine alone
    (other engines run the job as they would without it); the pod spec is the base of each of the job's pods, as
    Determined's `environment.pod_spec`, through an allow-list (pod_spec_rules: the pods are the coordinator's,
    so nothing in it may grant more than every user has), and checked by the API server when the pods are
    made; `working_dir`: where the workers run in the image (default: the image's WorkingDir)."""
    section = check_mapping(value, "kubernetes", _KUBERNETES_KEYS)
    image = section.get("image")
    for kind, name in (image.items() if isinstance(image, dict) else [("", image)] if "image" in section else []):
        if kind not in ("", "cpu", "gpu"):
            raise ConfigError(f"kubernetes.image.{str(kind)[:60]}: unknown key; a pair is {{cpu: IMAGE, gpu: IMAGE}}")
        check_text(name, f"kubernetes.image{'.' + kind if kind else ''}", limits.MAX_PATH_CHARS, empty=False,
                   printable=True)
    if "working_dir" in section:
        check_text(section["working_dir"], "kubernetes.working_dir", limits.MAX_PATH_CHARS, empty=False, printable=True)
        if not str(section["working_dir"]).startswith("/"):
            raise ConfigError(f"kubernetes.working_dir: {section['working_dir']!r} is not an absolute path; give "
                              "the directory in the image the workers run in, e.g. /workspace")
    if "pod_spec" in section:
        spec = section["pod_spec"]
        if not isinstance(spec, dict):
            raise ConfigError(f"kubernetes.pod_spec: expected a pod spec (a mapping), got {describe(spec)}")
        containers = spec.get("containers", [])
        if not isinstance(containers, list) or not all(isinstance(c, dict) for c in containers):
            raise ConfigError(f"kubernetes.pod_spec.containers: expected a list of containers, got "
                              f"{describe(containers)}; name the one tfdist runs the workers in `tfdist-worker`")
        try:
            pod_spec_rules.check_pod_spec(spec)
        except pod_spec_rules.PodSpecError as e:
            raise ConfigError(str(e)) from None
    try:
        return hyperparameters.check_values(section)  # what the wire carries: YAML's plain values, bounded
    except hyperparameters.HyperparameterError as e:
        raise ConfigError(str(e).replace("hyperparameters", "kubernetes", 1)) from None


def _hyperparameters(spec: Any, overrides: Sequence[str], search: bool) -> dict[str, Any]:
    """The values workers get from Determined's hyperparameters section, the --hparams over it (the space
    as written, when a searcher searches)."""
    try:
        return hyperparameters.resolve({} if spec is None else spec, overrides, search=search)
    except hyperparameters.HyperparameterError as e:
        raise ConfigError(str(e)) from None


def _check_search(value: Mapping[str, Any], space: Mapping[str, Any]) -> dict[str, Any]:
    """A searcher that searches (as it travels: its checked mapping) and what it needs of the space."""
    if not value:
        return {}
    search = _searcher(value)
    if not search.searches:
        return {}
    if search.name == "grid":
        try:
            search_space.grid(space)
        except hyperparameters.HyperparameterError as e:
            raise ConfigError(str(e)) from None
    batch = space.get("global_batch_size")
    if batch is not None and not (isinstance(batch, Mapping) and batch.get("type") in hyperparameters.SEARCH_TYPES):
        check_int(batch, "hyperparameters.global_batch_size", minimum=1, maximum=limits.MAX_GLOBAL_BATCH_SIZE)
    elif batch is not None:  # every value a trial may get
        kind = batch["type"]
        if kind not in ("int", "categorical"):
            raise ConfigError(f"hyperparameters.global_batch_size: a batch size is an integer: search it with type "
                              f"int or categorical, not {kind}")
        for value in batch["vals"] if kind == "categorical" else (batch["minval"], batch["maxval"]):
            check_int(value, "hyperparameters.global_batch_size", minimum=1, maximum=limits.MAX_GLOBAL_BATCH_SIZE)
    return search.to_mapping()


def _searcher(value: Any) -> searcher_lib.SearcherConfig:
    try:
        return searcher_lib.parse(value)
    except searcher_lib.SearcherError as e:
        raise ConfigError(str(e)) from None


def _seed(value: Any) -> int:
    """Determined's `reproducibility: {experiment_seed: N}`: an experiment's sampling seed (0: chosen when the
    experiment is made, and kept with it)."""
    section = check_mapping(value if value is not None else {}, "reproducibility", ("experiment_seed",))
    return check_int(section.get("experiment_seed", 0), "reproducibility.experiment_seed", minimum=0,
                     maximum=2**31 - 1)


def _parse_checkpoint_storage(value: Any) -> str:
    """Determined's shared_fs form ({type: shared_fs, host_path: ..., storage_path: ...}) or a plain path."""
    if value is None:
        return ""
    if isinstance(value, str):
        value = {"host_path": value}
    section = check_mapping(value, "checkpoint_storage", _CHECKPOINT_KEYS)
    check_choice(section.get("type", "shared_fs"), "checkpoint_storage.type", CHECKPOINT_STORAGE_TYPES)
    host_path = section.get("host_path")
    if not isinstance(host_path, str) or not host_path.strip():
        raise ConfigError(f"checkpoint_storage.host_path: expected a directory every node shares, got "
                          f"{describe(host_path)}")
    sub = section.get("storage_path", "")
    if not isinstance(sub, str) or sub.startswith("/") or ".." in sub.split("/"):
        raise ConfigError(f"checkpoint_storage.storage_path: expected a relative path inside host_path, got "
                          f"{describe(sub)}")
    return f"{host_path.rstrip('/')}/{sub}".rstrip("/") if sub else host_path


def _check_mode_slots(mode: str, slots: int, where: str) -> None:
    if mode == "one_device" and slots != 1:
        raise ConfigError(f"{where}: distribution mode one_device drives exactly one device, got {slots} slots; "
                          "use mode mirrored (one node) or mwms (several nodes) for more")


def _check_mode_options(config: ExperimentConfig, where: str, ps_options_given: bool = False) -> None:
    """Options that only one mode implements are refused under another, never silently ignored."""
    mode = config.distribution_mode
    if mode != "ps" and (ps_options_given or config.num_ps != 1 or config.evaluator):
        raise ConfigError(f"{where}: distribution.num_ps and distribution.evaluator apply to parameter-server "
                          f"training only, but the mode is {mode}; set distribution.mode: ps")
    if config.aggregation_frequency > 1 and mode not in ("auto", "mwms", "horovod"):
        raise ConfigError(f"{where}: optimizations.aggregation_frequency is implemented for mwms and horovod, but "
                          f"the mode is {mode}; set distribution.mode: mwms or horovod (or auto), or drop the option")
    horovod_only = config.horovod_only_options
    if horovod_only and mode not in ("auto", "horovod"):
        raise ConfigError(f"{where}: {', '.join(horovod_only)} is implemented through Horovod, but the mode is "
                          f"{mode}; set distribution.mode: horovod (or auto), or drop the option")


def _check_entrypoint(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (tuple, list)) or not all(isinstance(p, str) for p in value):
        raise ConfigError(f"entrypoint: expected a list of strings, got {describe(value)}")
    if len(value) > limits.MAX_ARGS:
        raise ConfigError(f"entrypoint: has {len(value):,} arguments; the limit is {limits.MAX_ARGS:,}")
    for i, part in enumerate(value):
        check_text(part, f"entrypoint[{i}]", limits.MAX_ARG_CHARS)
    total = sum(len(p) for p in value)
    if total > limits.MAX_ENTRYPOINT_CHARS:
        raise ConfigError(f"entrypoint: its arguments hold {total:,} characters; the limit is "
                          f"{limits.MAX_ENTRYPOINT_CHARS:,} (pass large inputs in a file)")
    return tuple(value)


def _check_hyperparameters(value: Any) -> dict[str, Any]:
    try:
        return hyperparameters.check_values(value)
    except hyperparameters.HyperparameterError as e:
        raise ConfigError(str(e)) from None



def _parse_entrypoint(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        try:
            parts = shlex.split(value)
        except ValueError as e:
            raise ConfigError(f"entrypoint: cannot split {value!r} into arguments: {e}") from None
        if not parts:
            raise ConfigError("entrypoint: is empty; give a command such as 'python train.py'")
        return tuple(parts)
    if isinstance(value, list):
        if not value:
            raise ConfigError("entrypoint: is an empty list; give a command such as ['python', 'train.py']")
        for i, part in enumerate(value):
            if not isinstance(part, (str, int, float)) or isinstance(part, bool):
                raise ConfigError(f"entrypoint[{i}]: expected a string, got {describe(part)}")
        return tuple(str(p) for p in value)
    raise ConfigError(f"entrypoint: expected a string or a list of strings, got {describe(value)}")
