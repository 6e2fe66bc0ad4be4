"""Determined's experiment config as tfdist runs it: `translate` is a pure function from the YAML's mapping to
tfdist's own sections, the keys tfdist keeps as written (`determined`), the script's `data` and the one-line
notes `tfdist launch` prints; what each key becomes is cluster/shared/determined_keys.py's one table.
The other way, the config as Determined's trial sees it, is cluster/shared/determined_view.py's.
cluster/shared/config.py applies it."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
from typing import Any, Mapping, Sequence

from cluster.shared import determined_keys as keys, limits, pod_spec_rules, searcher as searcher_lib
from cluster.shared.config_values import ConfigError, check_int, check_text, describe, parse_env

TFDIST_ENVIRONMENT = ("variables",)
DEFAULT_PRIORITY = 42  # Determined's: 1-99, lower first; tfdist's is 42 - it (higher first, default 0)
WORKER = "tfdist-worker"  # the container tfdist runs the workers in (Determined's determined-container)
_LENGTH_UNITS = ("batches", "records", "epochs")
_SHAPES = {  # Determined's top-level keys tfdist keeps as written: what each must be (null: left out)
    "bind_mounts": list, "checkpoint_policy": ("best", "all", "none"), "data": dict, "data_layer": dict,
    "debug": bool, "description": str, "integrations": dict, "labels": list, "log_policies": list,
    "min_checkpoint_period": "length", "min_validation_period": "length", "pbs": dict, "perform_initial_validation":
    bool, "preemption_timeout": int, "profiling": dict, "project": str, "records_per_epoch": int,
    "retention_policy": dict, "scheduling_unit": int, "security": dict, "slurm": dict, "tensorboard_storage": dict,
    "workspace": str, "internal": type(None),
}
ONLY_DETERMINED = tuple(_SHAPES)


@dataclasses.dataclass(frozen=True)
class Translation:
    root: dict[str, Any]  # the config in tfdist's own sections
    user_data: dict[str, Any]
    determined: dict[str, Any]  # Determined's keys kept as written (the view's), by section
    notes: tuple[str, ...]
    priority: int | None  # resources.priority as tfdist's


def check_top(raw: Any, own: tuple[str, ...]) -> dict[str, Any]:
    """The document is a mapping of tfdist's (`own`) and Determined's top-level keys; another is refused."""
    if not isinstance(raw, dict):
        raise ConfigError(f"the config: expected a mapping, got {describe(raw)}")
    known = (*own, *(k for k in keys.top_keys() if k not in own))
    for key in raw:
        if key in known:
            continue
        if key in keys.NOT_EXPERIMENT:
            raise ConfigError(f"{key}: a key of Determined's notebook, command and shell configs, not of an "
                              "experiment's; drop it")
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"did you mean '{close[0]}'?" if close else \
            f"tfdist supports: {', '.join(own)}, and Determined's experiment-config keys (docs/determined.md)"
        raise ConfigError(f"{str(key)[:60]}: unknown key; {hint}")
    return raw


def check_determined(value: Any) -> dict[str, Any]:
    """The kept keys as they travel (the coordinator's edge too): bounded, and what tfdist reads of them right."""
    kept = check_kept(value, "the Determined keys kept for the script", limits.MAX_DETERMINED_CHARS)
    if kept.get("records_per_epoch") is not None:
        check_int(kept["records_per_epoch"], "records_per_epoch", minimum=0)
    devices = (kept.get("environment") or {}).get("environment_variables") or {}
    for kind in devices:
        if kind not in ("cpu", "gpu"):
            raise ConfigError(f"environment.environment_variables.{str(kind)[:60]}: expected cpu or gpu")
        parse_env(devices[kind], f"environment.environment_variables.{kind}")
    return kept


def translate(root: Mapping[str, Any], overrides: Sequence[str] = ()) -> Translation:
    """Determined's keys of `root` (a mapping of top-level keys) onto tfdist's; ConfigError names a refused one."""
    out = {k: v for k, v in root.items() if k not in ONLY_DETERMINED}
    notes: list[str] = []
    kept: dict[str, Any] = {}
    for key in ONLY_DETERMINED:
        value = root.get(key)
        if value is None:
            continue
        _check_shape(key, value)
        if key == "internal":
            raise ConfigError(f"internal: {keys.row(key).what}; drop it")
        if key == "bind_mounts":
            notes += _bind_mounts(value)
        elif keys.row(key).says(value):
            notes.append(f"{key}: {keys.row(key).what}")
        if key != "data":
            kept[key] = value
    environment, kubernetes, extra = _environment(root.get("environment"), root.get("kubernetes"), notes)
    out.update(environment=environment, kubernetes=kubernetes)
    if extra:
        kept["environment"] = extra
    resources, priority, extra = _resources(root.get("resources"), notes)
    out["resources"] = resources
    if extra:
        kept["resources"] = extra
        max_slots = extra.get("max_slots")
        if max_slots is not None:
            out["searcher"] = searcher_lib.capped_by_slots(root.get("searcher"), max_slots, resources.get("slots_per_trial", 1))
    if isinstance(out.get("searcher"), dict) and out["searcher"].get("name") == "single":
        out["searcher"] = searcher_lib.single_as_drawn(out["searcher"], root.get("hyperparameters"), overrides, notes)
    out["optimizations"], extra = _split("optimizations", root.get("optimizations"), notes, _OPTIMIZATIONS)
    if extra:
        kept["optimizations"] = extra
    storage, extra = _checkpoint_storage(root.get("checkpoint_storage"), notes)
    out["checkpoint_storage"] = storage
    if extra:
        kept["checkpoint_storage"] = extra
    for key in _SECTIONS:
        if out[key] in (None, {}) and key not in root:
            del out[key]
    kept = check_kept(kept, "the Determined keys kept for the script", limits.MAX_DETERMINED_CHARS)
    data = check_kept(root.get("data") or {}, "data", limits.MAX_USER_DATA_CHARS)
    return Translation(out, data, kept, tuple(notes), priority)


_SECTIONS = ("environment", "kubernetes", "resources", "optimizations", "checkpoint_storage")
_OPTIMIZATIONS = ("gradient_compression", "auto_tune_tensor_fusion", "average_training_metrics",
                  "aggregation_frequency")


def _check_shape(key: str, value: Any) -> None:
    shape = _SHAPES[key]
    if shape == "length":
        _length(value, key)
    elif isinstance(shape, tuple):
        if value not in shape:
            raise ConfigError(f"{key}: expected one of {', '.join(shape)}, got {describe(value)}")
    elif shape is int:
        check_int(value, key, minimum=1 if key == "scheduling_unit" else 0)
    elif not isinstance(value, shape):
        kind = {dict: "a mapping", list: "a list", bool: "true or false", str: "a string"}.get(shape, "null")
        raise ConfigError(f"{key}: expected {kind}, got {describe(value)}")
    if key == "labels" and not all(isinstance(v, str) for v in value):
        raise ConfigError(f"labels: expected a list of strings, got {describe(value)}")


def _length(value: Any, where: str) -> None:
    """Determined's length: {batches|records|epochs: N}."""
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in _LENGTH_UNITS or \
            isinstance(next(iter(value.values())), bool) or not isinstance(next(iter(value.values())), int) or \
            next(iter(value.values())) < 0:
        raise ConfigError(f"{where}: expected one of {{batches: N}}, {{records: N}}, {{epochs: N}}, got "
                          f"{describe(value)}")


def _unknown(section: str, key: Any, allowed: tuple[str, ...]) -> ConfigError:
    close = difflib.get_close_matches(str(key), allowed, n=1)
    hint = f"did you mean '{section}.{close[0]}'?" if close else f"it takes {', '.join(allowed)}"
    return ConfigError(f"{section}.{str(key)[:60]}: unknown key; {hint}")


def _section(section: str, value: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{section}: expected a mapping, got {describe(value)}")
    for key in value:
        if key not in allowed:
            raise _unknown(section, key, allowed)
    return value


def _split(section: str, value: Any, notes: list[str], own: tuple[str, ...], special: tuple[str, ...] = ()
           ) -> tuple[dict, dict]:
    """A section of tfdist's keys (`own`) and Determined's: tfdist's, and Determined's kept, each said in one
    line or refused by its row (`special`: the caller's to say)."""
    theirs = keys.section_keys(section)
    given = _section(section, value, tuple(dict.fromkeys((*own, *theirs))))
    mine = {k: v for k, v in given.items() if k in own}
    extra = {k: v for k, v in given.items() if k not in own and v is not None}
    if section == "optimizations" and isinstance(mine.get("gradient_compression"), bool):
        mine["gradient_compression"] = "fp16" if mine["gradient_compression"] else "none"  # Determined's bool
    for key, item in extra.items():
        row = keys.row(f"{section}.{key}")
        if row.fate == keys.REFUSED and item != row.default:
            raise ConfigError(f"{section}.{key}: {row.what}")
        if row.says(item) and key not in special:
            notes.append(f"{section}.{key}: {row.what}")
    return mine, extra


# ---------------------------------------------------------------- environment

def _environment(value: Any, kubernetes: Any, notes: list[str]) -> tuple[dict, dict, dict]:
    """tfdist's environment, its kubernetes section with Determined's image and pod spec, Determined's kept."""
    own, extra = _split("environment", value, notes, TFDIST_ENVIRONMENT, special=("image", "pod_spec"))
    if kubernetes is not None and not isinstance(kubernetes, dict):
        raise ConfigError(f"kubernetes: expected a mapping, got {describe(kubernetes)}")
    kube = dict(kubernetes or {})
    for key, target in (("environment_variables", None), ("image", "image"), ("pod_spec", "pod_spec")):
        if key not in extra:
            continue
        item = extra.pop(key)
        if target is None and "variables" in own:
            raise ConfigError("environment.environment_variables: environment.variables names the variables too; "
                              "keep one")
        if target is not None and target in kube:
            raise ConfigError(f"environment.{key}: kubernetes.{target} names the pods' {target} too; keep one")
        if target is None:
            own["variables"], devices = _variables(item, notes)
            if devices:
                extra["environment_variables"] = devices
        else:
            kube[target] = _image(item, notes) if key == "image" else _pod_spec(item, notes)
            if kube[target] is None:
                del kube[target]
    if extra.pop("force_pull_image", False):
        spec = copy.deepcopy(kube.get("pod_spec") or {})
        containers = spec.setdefault("containers", [])
        worker = next((c for c in containers if isinstance(c, dict) and c.get("name") == WORKER), None)
        if worker is None:
            containers.append(worker := {"name": WORKER})
        worker.setdefault("imagePullPolicy", "Always")
        kube["pod_spec"] = spec
    return own, kube, extra


def _variables(value: Any, notes: list[str]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Determined's list of NAME=VALUE (every node), or its map by device: what both kinds of node get, and
    what differs (`{"cpu": {...}, "gpu": {...}}`, applied by `device_variables`)."""
    where = "environment.environment_variables"
    if not isinstance(value, dict):
        return parse_env(value, where), {}
    for key in value:
        if key not in ("cpu", "cuda", "gpu", "rocm"):
            raise ConfigError(f"{where}.{str(key)[:60]}: unknown key; expected cpu, cuda (or gpu), rocm")
    if value.get("rocm"):
        notes.append(f"{where}.rocm: {keys.row(where + '.rocm').what}")
    gpu_key = "cuda" if value.get("cuda") is not None else "gpu"  # Determined's: cuda, else the older gpu
    cpu, gpu = parse_env(value.get("cpu") or [], f"{where}.cpu"), parse_env(value.get(gpu_key) or [], f"{where}.{gpu_key}")
    common = {k: v for k, v in cpu.items() if gpu.get(k) == v}
    devices = {kind: {k: v for k, v in found.items() if k not in common} for kind, found in (("cpu", cpu), ("gpu", gpu))}
    return common, {kind: found for kind, found in devices.items() if found}


def _image(value: Any, notes: list[str]) -> str | dict[str, str] | None:
    """One image, or a {cpu, gpu} pair (Determined's cuda, else gpu)."""
    where = "environment.image"
    if isinstance(value, str):
        notes.append(f"{where}: {keys.row(where).what}")
        return check_text(value, where, limits.MAX_PATH_CHARS, empty=False, printable=True)
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an image or {{cpu: IMAGE, gpu: IMAGE}}, got {describe(value)}")
    for key in value:
        if key not in ("cpu", "cuda", "gpu", "rocm"):
            raise ConfigError(f"{where}.{str(key)[:60]}: unknown key; expected cpu, cuda (or gpu), rocm")
    if value.get("rocm") is not None:
        notes.append(f"{where}.rocm: {keys.row(where + '.rocm').what}")
    pair = {"cpu": value.get("cpu"), "gpu": value.get("cuda") if value.get("cuda") is not None else value.get("gpu")}
    pair = {k: check_text(v, f"{where}.{k}", limits.MAX_PATH_CHARS, empty=False, printable=True)
            for k, v in pair.items() if v is not None}
    if not pair:
        return None
    notes.append(f"{where}: {keys.row(where).what}")
    return pair["cpu"] if len(set(pair.values())) == 1 and len(pair) == 2 else pair


def _pod_spec(value: Any, notes: list[str]) -> dict[str, Any] | None:
    """Determined's pod_spec is a Pod: its `spec` is tfdist's kubernetes.pod_spec, the same allow-list."""
    where = "environment.pod_spec"
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a Pod (apiVersion, kind, metadata, spec), got {describe(value)}")
    for key in value:
        if key not in ("apiVersion", "kind", "metadata", "spec"):
            raise ConfigError(f"{where}.{str(key)[:60]}: not a key of a Pod; Determined's pod_spec is a Pod "
                              "(apiVersion, kind, metadata, spec): the pod's keys go under spec")
    if value.get("metadata"):
        notes.append(f"{where}.metadata: tfdist names and labels its pods itself; these are not applied")
    spec = value.get("spec")
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}.spec: expected a pod spec (a mapping), got {describe(spec)}")
    spec = copy.deepcopy(spec)
    for container in spec.get("containers") or ():
        if isinstance(container, dict) and container.get("name") == "determined-container":
            container["name"] = WORKER
    try:
        pod_spec_rules.check_pod_spec(spec)
    except ConfigError as e:
        raise ConfigError(str(e).replace("kubernetes.pod_spec", f"{where}.spec")) from None
    notes.append(f"{where}: {keys.row(where).what}")
    return spec


def _bind_mounts(value: list) -> list[str]:
    """One line per mount: where a job on a host finds it, and that a pod mounts none."""
    said = []
    for i, mount in enumerate(value):
        where = f"bind_mounts[{i}]"
        if not isinstance(mount, dict) or not isinstance(mount.get("host_path"), str) or \
                not isinstance(mount.get("container_path"), str):
            raise ConfigError(f"{where}: expected {{host_path: PATH, container_path: PATH}}, got {describe(mount)}")
        host, inside = mount["host_path"], mount["container_path"]
        if host.rstrip("/") == inside.rstrip("/"):
            said.append(f"{where}: {host} is used where it is on a host; a Kubernetes pod mounts no host path "
                        "(PodSecurity restricted refuses hostPath): mount a volume through environment.pod_spec")
        else:
            said.append(f"{where}: not made: a job on a host sees {host} at {host}, not at {inside} (point the "
                        "script there); a Kubernetes pod mounts no host path: mount a volume through "
                        "environment.pod_spec")
    return said


# ---------------------------------------------------------------- resources, checkpoint storage, searcher

def _resources(value: Any, notes: list[str]) -> tuple[dict, int | None, dict]:
    own, extra = _split("resources", value, notes, ("slots_per_trial",))
    priority = extra.get("priority")
    if priority is not None:
        priority = DEFAULT_PRIORITY - check_int(priority, "resources.priority", minimum=1, maximum=99)
    if extra.get("max_slots") is not None:
        slots = own.get("slots_per_trial", 1)
        if check_int(extra["max_slots"], "resources.max_slots", minimum=1) < slots:
            raise ConfigError(f"resources.max_slots: {extra['max_slots']} is fewer than the {slots} slots of a trial: "
                              "no trial could run; raise it or drop it")
    return own, priority, extra


_GC = ("save_experiment_best", "save_trial_best", "save_trial_latest")


_STORAGE = {"shared_fs": ("type", "host_path", "storage_path", "container_path", "checkpoint_path", "tensorboard_path",
                          "propagation", *_GC), "directory": ("type", "container_path", *_GC)}


def _checkpoint_storage(value: Any, notes: list[str]) -> tuple[Any, dict]:
    """A path (tfdist's), or Determined's shared_fs or directory as one path; its other keys kept and said."""
    if value is None or isinstance(value, str):
        return value, {}
    if not isinstance(value, dict):
        raise ConfigError(f"checkpoint_storage: expected a path or a mapping, got {describe(value)}")
    kind = value.get("type")
    if kind in ("s3", "gcs", "azure"):
        raise ConfigError(f"checkpoint_storage.type: {kind}: {keys.row('checkpoint_storage.type: s3').what}")
    if kind not in (None, "shared_fs", "directory"):
        raise ConfigError(f"checkpoint_storage.type: unknown value {describe(kind)}; expected one of shared_fs, "
                          "directory")
    section = _section("checkpoint_storage", value, _STORAGE[kind or "shared_fs"])
    path_keys = ("container_path",) if kind == "directory" else ("type", "host_path", "storage_path")
    extra = {k: v for k, v in section.items() if k not in path_keys and k != "type" and v is not None}
    for key, item in extra.items():
        row = keys.row(f"checkpoint_storage.{key}")
        if row.says(item):
            notes.append(f"checkpoint_storage.{key}: {row.what}")
    if kind == "directory":
        path = section.get("container_path")
        if not isinstance(path, str) or not path.strip():
            raise ConfigError(f"checkpoint_storage.container_path: type directory needs the directory, got "
                              f"{describe(path)}")
        return path, extra
    if kind is None and section.get("host_path") is None:  # only Determined's GC keys: tfdist's default place
        return None, extra
    mine = {k: v for k, v in section.items() if k in ("host_path", "storage_path") and v is not None}
    host, sub = mine.get("host_path"), mine.get("storage_path")
    if isinstance(host, str) and isinstance(sub, str) and sub.startswith("/"):  # Determined: absolute, inside host_path
        if os.path.commonpath([os.path.normpath(sub), os.path.normpath(host)]) != os.path.normpath(host):
            raise ConfigError(f"checkpoint_storage.storage_path: {sub} is not inside host_path {host}")
        mine = {"host_path": sub}
    return {"type": "shared_fs", **mine}, extra


def check_kept(value: Any, where: str, max_chars: int) -> dict[str, Any]:
    """What travels as written (`data`, Determined's kept keys): a mapping within the tree bounds and
    `max_chars` of JSON (they reach every worker in its environment)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {describe(value)}")
    problem = limits.tree_problem(value, max_chars=max_chars)
    if not problem:
        size = len(json.dumps(dict(value), sort_keys=True, default=str))
        problem = f"are {size:,} characters as JSON; the limit is {max_chars:,}" if size > max_chars else ""
    if problem:
        raise ConfigError(f"{where}: {problem} (they reach every worker in its environment; pass large inputs in a "
                          "file)")
    return dict(value)
