"""A job that is one of `tfdist diagnose`'s variants: its config's `diagnose` section ({variant, steps, warmup,
run, nodes}) as the coordinator accepts it from the wire, the nodes it is pinned to (the scheduler places it
only there), and what tells its workers (TFDIST_DIAGNOSE_*, read by tfdist/diagnose.py). The variants
themselves and the verdict over them: cluster/shared/diagnosis.py."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from cluster.shared import limits
from cluster.shared.experiment import ExperimentConfig
from cluster.shared.config_values import ConfigError, check_choice, check_int, check_mapping, check_text, describe
from tfdist import envvars
from tfdist.diagnose import MAX_STEPS, VARIANTS

HIDDEN = "(hidden)"  # an environment value as the coordinator hands a job to users (answers.redact)


def check_variant(value: Any) -> dict[str, Any]:
    """A job's `diagnose` ({} or {variant, steps, warmup, run, nodes}: `run` names the one `tfdist diagnose` whose
    variants the jobs are; `nodes`, where given, the only nodes the job may run on: its baseline's), as the
    coordinator accepts it from the wire. `of`: the existing job these variants re-run (`tfdist diagnose JOB`),
    which the coordinator makes them from, for its owner (`variant_of`)."""
    section = check_mapping(value, "diagnose", ("variant", "steps", "warmup", "run", "nodes", "of"))
    if not section:
        return {}
    variant = check_choice(section.get("variant"), "diagnose.variant", VARIANTS)
    steps = check_int(section.get("steps"), "diagnose.steps", minimum=1, maximum=MAX_STEPS)
    warmup = check_int(section.get("warmup"), "diagnose.warmup", minimum=0, maximum=MAX_STEPS - steps)
    run = check_text(section.get("run", ""), "diagnose.run", 64, printable=True)
    checked = {"variant": variant, "steps": steps, "warmup": warmup, "run": run}
    nodes = _check_nodes(section.get("nodes", []))
    of = check_text(section.get("of", ""), "diagnose.of", 64, printable=True)
    return {**checked, **({"nodes": nodes} if nodes else {}), **({"of": of} if of else {})}


# What a variant may change of the job it re-runs (cluster/client/diagnose_run.py variant_config, with --slots and
# --distribution): everything else is the original's, its environment's values included.
VARIANT_CHANGES = ("name", "diagnose", "max_restarts", "slots_per_trial", "distribution_mode")


def variant_of(original: ExperimentConfig, submitted: ExperimentConfig) -> ExperimentConfig:
    """The variant `submitted` asks for, made from the `original` job's config: its fields VARIANT_CHANGES, and of
    its hyperparameters a global_batch_size cut with its slots (one_node); nothing else of it is taken."""
    changes = {field: getattr(submitted, field) for field in VARIANT_CHANGES}
    batch = submitted.hyperparameters.get("global_batch_size")
    if "global_batch_size" in original.hyperparameters and isinstance(batch, int) and not isinstance(batch, bool):
        changes["hyperparameters"] = {**original.hyperparameters, "global_batch_size": batch}
    return dataclasses.replace(original, **changes)


def _check_nodes(value: Any) -> list[str]:
    """`diagnose.nodes`: distinct node (agent) names, at most one a slot."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"diagnose.nodes: expected a list of node names, got {describe(value)}")
    if len(value) > limits.MAX_SLOTS:
        raise ConfigError(f"diagnose.nodes: at most {limits.MAX_SLOTS:,} nodes (a job has at most one a slot), "
                          f"got {len(value):,}")
    names = [check_text(name, f"diagnose.nodes[{i}]", limits.MAX_AGENT_NAME_CHARS, empty=False, printable=True)
             for i, name in enumerate(value)]
    if len(set(names)) < len(names):
        first = {name: i for i, name in reversed(list(enumerate(names)))}
        twice = next(name for i, name in enumerate(names) if first[name] < i)
        raise ConfigError(f"diagnose.nodes: node {describe(twice)} is named twice; name each node once")
    return names


def check_nodes_fit(variant: Mapping[str, Any], slots: int) -> None:
    """A job pinned to more nodes than it has slots could never use them all (nor should it keep them)."""
    nodes = variant.get("nodes", ()) if variant else ()
    if len(nodes) > slots:
        raise ConfigError(f"diagnose.nodes: {len(nodes):,} nodes for a job of {slots} slot{'s' if slots != 1 else ''}; "
                          "pin it to at most one node a slot")


def pinned_nodes(variant: Mapping[str, Any]) -> tuple[str, ...]:
    """The nodes a job's `diagnose` pins it to (its baseline's), () for any node."""
    return tuple(dict.fromkeys(variant.get("nodes", ()))) if variant else ()


def worker_env(variant: Mapping[str, Any]) -> dict[str, str]:
    """What tells a job's workers they run a diagnose variant (tfdist/diagnose.py reads it)."""
    if not variant:
        return {}
    return {envvars.DIAGNOSE_VARIANT: str(variant["variant"]), envvars.DIAGNOSE_STEPS: str(variant["steps"]),
            envvars.DIAGNOSE_WARMUP: str(variant["warmup"]),
            envvars.DIAGNOSE_INTERFACE: envvars.NODE_INTERFACE_PLACEHOLDER}
