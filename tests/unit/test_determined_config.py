"""Determined's experiment configs run as written (issue 46): every key of Determined's experiment config is
used, said in one line, or refused in one line naming it; never a traceback. The configs here are written in
our own words with every key form Determined's published example configs use (TF/Keras, PyTorch, the Core API
tutorial, DeepSpeed, Hugging Face; both generations of its searchers)."""

from __future__ import annotations

import dataclasses
import json
import os
import re

import pytest

from cluster.client.launch import preflight
from cluster.coordinator.experiments.runner import reports, trial_spec
from cluster.engines.kubernetes.run_objects import pod_image
from cluster.shared import determined_keys, determined_view, jobspec, searcher as searcher_lib
from cluster.shared.config import ConfigError, parse_config
from cluster.shared.model import Allocation, Experiment, ExperimentState, MetricRow
from cluster.shared.modes import NodePlacement, Placement, mwms
from tests.conftest import run_cli
from tfdist.errors import UserError

# ---------------------------------------------------------------- the measured failures (first)

# iris_tf_keras/adaptive.yaml's shape (the older generation): `data` and an image pair were unknown keys.
IRIS = """
name: iris_search
data:
  train_url: http://example.com/iris/train.csv
  test_url: http://example.com/iris/test.csv
environment:
  image:
    cpu: example.com/tf:2.15
    gpu: example.com/tf:2.15
hyperparameters:
  learning_rate: {type: log, minval: -5.0, maxval: 1.0, base: 10.0}
  learning_rate_decay: 1.0e-6
  layer1_dense_size: {type: int, minval: 4, maxval: 32}
  global_batch_size: {type: int, minval: 5, maxval: 30}
searcher:
  name: adaptive_asha
  metric: val_categorical_accuracy
  smaller_is_better: false
  max_length: {batches: 6400}
  max_trials: 512
entrypoint: python3 train.py
"""
# cifar10_tf_keras/adaptive.yaml's shape: `data`, then `records_per_epoch`, were unknown keys.
CIFAR = """
name: cifar_search
data: {url: https://example.com/cifar.tar.gz}
hyperparameters:
  learning_rate: {type: log, minval: -5.0, maxval: 1.0, base: 10.0}
  dropout: {type: double, minval: 0.2, maxval: 0.5}
  global_batch_size: {type: int, minval: 16, maxval: 64}
  horizontal_flip: {type: categorical, vals: [True, False]}
records_per_epoch: 50000
searcher: {name: adaptive_asha, mode: aggressive, metric: val_error, max_length: {epochs: 32}, max_trials: 16}
entrypoint: python3 train.py
"""


def test_iris_adaptive_is_accepted_with_its_data_and_image():
    config = parse_config(IRIS, "iris.yaml")
    assert config.user_data == {"train_url": "http://example.com/iris/train.csv",
                                "test_url": "http://example.com/iris/test.csv"}
    assert config.kubernetes == {"image": "example.com/tf:2.15"}  # one image for both kinds of node
    assert config.distribution_mode == "auto" and config.searcher["max_length"] == {"batches": 6400}
    assert config.notes == (f"environment.image: {determined_keys.row('environment.image').what}",)
    without_data = parse_config(re.sub(r"data:\n(  .*\n)+", "", IRIS), "iris.yaml")
    assert without_data.user_data == {} and without_data.kubernetes == config.kubernetes


def test_cifar_adaptive_is_accepted_with_records_per_epoch():
    config = parse_config(CIFAR, "cifar.yaml")
    assert config.user_data == {"url": "https://example.com/cifar.tar.gz"}
    assert config.determined == {"records_per_epoch": 50000} and config.notes == ()
    assert searcher_lib.parse(config.searcher).max_length == ("epochs", 32)


def _trial(config, number, values):
    spec = jobspec.job_spec(dataclasses.replace(config, checkpoint_storage=""))
    return trial_spec(Experiment("e1-ab", 1, spec, ExperimentState.ACTIVE, 0.0), number, values)


def test_a_searched_global_batch_size_passes_preflight_and_each_trial_splits_its_own(capsys):
    config = parse_config(IRIS.replace("entrypoint:", "resources: {slots_per_trial: 2}\nentrypoint:"))
    preflight(config)  # was: TypeError: '<' not supported between instances of 'dict' and 'int'
    assert capsys.readouterr().err.startswith("tfdist: config: environment.image: ")
    for number, batch, per_replica in ((1, 17, 8), (2, 30, 15)):
        trial = _trial(config, number, {"learning_rate": 0.01, "layer1_dense_size": 8, "global_batch_size": batch})
        nodes = (NodePlacement("a", "127.0.0.1", 2, (1, 2)),)
        env = mwms.MWMS.plan(Placement(f"{number}-x", nodes), trial.config, [()]).processes[1].env
        assert (env["TFDIST_GLOBAL_BATCH_SIZE"], env["TFDIST_PER_REPLICA_BATCH_SIZE"]) == (str(batch), str(per_replica))
        assert json.loads(env["TFDIST_EXPERIMENT_CONFIG"])["hyperparameters"]["global_batch_size"] == batch


def test_a_searched_global_batch_size_smaller_than_the_slots_is_one_line():
    config = parse_config(IRIS.replace("entrypoint:", "resources: {slots_per_trial: 8}\nentrypoint:"))
    with pytest.raises(UserError, match=r"^hyperparameters.global_batch_size=5 is smaller than the 8 slots"):
        preflight(config)


# ---------------------------------------------------------------- every key form of Determined's examples

def note(key):
    return f"{key}: {determined_keys.row(key).what}"


ACCEPTED = [  # (the config's body, what it became)
    ("bind_mounts: [{host_path: /tmp, container_path: /tmp, read_only: false}]",
     lambda c: c.notes[0].startswith("bind_mounts[0]: /tmp is used where it is on a host; a Kubernetes pod")),
    ("bind_mounts: [{host_path: /tmp, container_path: /data}]",
     lambda c: c.notes[0].startswith("bind_mounts[0]: not made: a job on a host sees /tmp at /tmp, not at /data")),
    ("checkpoint_policy: none", lambda c: c.notes == (note("checkpoint_policy"),)),
    ("checkpoint_storage: {save_trial_latest: 5}",
     lambda c: c.checkpoint_storage == "" and c.notes == (note("checkpoint_storage.save_trial_latest"),)),
    ("checkpoint_storage: {type: shared_fs, host_path: /mnt/ckpt, storage_path: /mnt/ckpt/team, "
     "container_path: /determined_shared_fs, propagation: rprivate, save_trial_best: 1}",
     lambda c: c.checkpoint_storage == "/mnt/ckpt/team" and c.notes == (note("checkpoint_storage.container_path"),)),
    ("checkpoint_storage: {type: directory, container_path: /mnt/shared}", lambda c: c.checkpoint_storage == "/mnt/shared"),
    ("data: {dataroot: /data, dataset: mnist, image_size: 64}",
     lambda c: c.user_data == {"dataroot": "/data", "dataset": "mnist", "image_size": 64}),
    ("debug: false\ndescription: a test run\nlabels: [a, b]",
     lambda c: c.notes == (note("description"), note("labels")) and c.determined["labels"] == ["a", "b"]),
    ("entrypoint: [python3, train.py, --epochs, '2']", lambda c: c.entrypoint == ("python3", "train.py", "--epochs", "2")),
    ("environment: {environment_variables: [NCCL_DEBUG=INFO, 'NCCL_SOCKET_IFNAME=ens,eth,ib'], force_pull_image: true}",
     lambda c: c.environment_variables == {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "ens,eth,ib"}
     and c.kubernetes == {"pod_spec": {"containers": [{"name": "tfdist-worker", "imagePullPolicy": "Always"}]}}
     and c.notes == (note("environment.force_pull_image"),)),
    ("environment: {environment_variables: {cpu: [A=1, B=cpu], gpu: [A=1, B=gpu]}}",
     lambda c: c.environment_variables == {"A": "1"} and
     c.determined["environment"] == {"environment_variables": {"cpu": {"B": "cpu"}, "gpu": {"B": "gpu"}}}),
    ("environment: {image: example.com/torch:2}", lambda c: c.kubernetes == {"image": "example.com/torch:2"}),
    ("environment: {image: {gpu: example.com/gpu:1}}", lambda c: c.kubernetes == {"image": {"gpu": "example.com/gpu:1"}}),
    ("environment: {image: {cpu: example.com/cpu:1, cuda: example.com/cuda:1, gpu: example.com/old:1}}",
     lambda c: c.kubernetes == {"image": {"cpu": "example.com/cpu:1", "gpu": "example.com/cuda:1"}}),
    ("environment: {proxy_ports: [{proxy_port: 6379, proxy_tcp: true}], ports: {ray: 6379}}",
     lambda c: c.notes == (note("environment.proxy_ports"), note("environment.ports"))),  # as written
    ("environment: {pod_spec: {apiVersion: v1, kind: Pod, spec: {containers: [{name: determined-container, "
     "volumeMounts: [{name: d, mountPath: /data}]}], volumes: [{name: d, persistentVolumeClaim: {claimName: d}}]}}}",
     lambda c: c.kubernetes["pod_spec"]["containers"][0]["name"] == "tfdist-worker"
     and c.notes == (note("environment.pod_spec"),)),
    ("max_restarts: 2", lambda c: c.max_restarts == 2),
    ("min_validation_period: {batches: 10}\nmin_checkpoint_period: {epochs: 1}",
     lambda c: c.notes == (note("min_checkpoint_period"), note("min_validation_period"))),
    ("min_validation_period: {batches: 0}\nperform_initial_validation: false\nscheduling_unit: 100",
     lambda c: c.notes == () and c.determined["scheduling_unit"] == 100),
    ("profiling: {enabled: true, begin_on_batch: 0, end_after_batch: 100, sync_timings: true}",
     lambda c: c.notes == (note("profiling"),)),
    ("resources: {slots_per_trial: 2, shm_size: 4294967296}",
     lambda c: c.slots_per_trial == 2 and c.notes == (note("resources.shm_size"),)),
    ("resources: {slots: 1, shm_size: 17179869184}",
     lambda c: c.notes == (note("resources.slots"), note("resources.shm_size"))),
    ("resources: {slots_per_trial: 2, max_slots: 4, priority: 10, weight: 1, resource_pool: gpu-pool}\n"
     "hyperparameters: {lr: {type: double, minval: 0.1, maxval: 0.2}}\n"
     "searcher: {name: random, metric: loss, max_trials: 8, max_length: 100}",
     lambda c: c.priority == 32 and c.searcher["max_concurrent_trials"] == 2 and c.searcher["max_length"] == {
         "batches": 100} and c.notes == (note("resources.resource_pool"),)),
    ("resources: {priority: 42, agent_label: x, devices: [{host_path: /dev/fuse, container_path: /dev/fuse}], "
     "is_single_node: true, native_parallel: false}",
     lambda c: c.priority == 0 and c.notes == (note("resources.agent_label"), note("resources.devices"),
                                               note("resources.is_single_node"))),
    ("optimizations: {gradient_compression: true, aggregation_frequency: 2, average_aggregated_gradients: true, "
     "mixed_precision: O1, tensor_fusion_threshold: 64, tensor_fusion_cycle_time: 5}",
     lambda c: c.gradient_compression == "fp16" and c.aggregation_frequency == 2 and c.distribution_mode == "auto"
     and c.notes == (note("optimizations.mixed_precision"), note("optimizations.tensor_fusion_cycle_time"))),
    ("records_per_epoch: 60000\nsearcher: {name: single, metric: val_loss, max_length: {epochs: 2}}",
     lambda c: c.searcher == {} and c.determined["searcher"]["max_length"] == {"epochs": 2}),
    ("searcher: {name: single, metric: x}", lambda c: c.searcher == {} and c.notes == ()),
    ("resources: {slots_per_trial: 8}\nhyperparameters: {increment_by: {type: int, minval: 1, maxval: 8}}\n"
     "searcher: {name: single, metric: x}",  # the Core API tutorial's: Determined draws the values once
     lambda c: (c.searcher["name"], c.searcher["max_trials"], c.searcher["max_concurrent_trials"]) == ("random", 1, 1)
     and c.notes[0].startswith("searcher.name: single with searched hyperparameters draws their values once")),
    ("hyperparameters: {lr: {type: log, minval: -4, maxval: -1, base: 10}}\n"
     "searcher: {name: adaptive_asha, metric: accuracy, smaller_is_better: false, time_metric: batches, "
     "max_time: 6400, max_trials: 16, max_rungs: 3, divisor: 4}",
     lambda c: c.searcher["max_length"] == {"batches": 6400} and "time_metric" not in c.searcher),
    ("hyperparameters: {lr: {type: log, minval: -4, maxval: -1, base: 10}}\n"
     "searcher: {name: adaptive_asha, metric: loss, time_metric: samples_seen, max_time: 100000, max_trials: 4}",
     lambda c: (c.searcher["time_metric"], c.searcher["max_time"]) == ("samples_seen", 100000)),
    ("hyperparameters:\n  overwrite_values:\n    fp16: {enabled: true}\n"
     "    pipe_parallel_size: {type: categorical, vals: [1, 2, 4]}\n"
     "searcher: {name: grid, metric: tflops, smaller_is_better: false, max_length: {batches: 100}, "
     "max_concurrent_trials: 4}",
     lambda c: c.searcher["max_concurrent_trials"] == 4),
    ("workspace: team\nproject: vision\nlog_policies: [{name: oom, pattern: '.*OOM.*', action: cancel_retries}]\n"
     "retention_policy: {log_retention_days: 7}\nintegrations: {webhooks: {webhook_name: [w]}}\n"
     "tensorboard_storage: {type: shared_fs, host_path: /tmp}\nsecurity: {kerberos: {config_file: /k}}\n"
     "pbs: {slots_per_node: 4}\nslurm: {sbatch_args: [--time=1:00:00]}\ndata_layer: {type: shared_fs}\n"
     "preemption_timeout: 60\ninternal: null",
     lambda c: [n.split(":")[0] for n in c.notes] == [
         "data_layer", "integrations", "log_policies", "pbs", "preemption_timeout", "project", "retention_policy",
         "security", "slurm", "tensorboard_storage", "workspace"]),
]

REFUSED = [  # (the config's body, the one line)
    ("idle_timeout: 2h", "idle_timeout: a key of Determined's notebook, command and shell configs, not of an "
                         "experiment's; drop it"),
    ("checkpoint_storage: {type: gcs, bucket: b}", "checkpoint_storage.type: gcs: tfdist checkpoints to a shared"),
    ("checkpoint_storage: {type: azure, container: c}", "checkpoint_storage.type: azure: tfdist checkpoints"),
    ("environment: {registry_auth: {username: u, password: p}}", note("environment.registry_auth")),
    ("environment: {add_capabilities: [SYS_ADMIN]}", note("environment.add_capabilities")),
    ("environment: {image: a:1}\nkubernetes: {image: b:1}",
     "environment.image: kubernetes.image names the pods' image too; keep one"),
    ("environment: {environment_variables: [A=1], variables: {B: 2}}",
     "environment.environment_variables: environment.variables names the variables too; keep one"),
    ("environment: {environment_variables: [TF_CONFIG=x]}",
     "environment.environment_variables[0]: TF_CONFIG is set by tfdist for every worker and cannot be overridden"),
    ("environment: {pod_spec: {spec: {hostNetwork: true}}}", "environment.pod_spec.spec.hostNetwork: not allowed"),
    ("environment: {pod_spec: {containers: []}}", "environment.pod_spec.containers: not a key of a Pod"),
    ("resources: {priority: 0}", "resources.priority: must be at least 1, got 0"),
    ("resources: {slots_per_trial: 4, max_slots: 2}", "resources.max_slots: 2 is fewer than the 4 slots of a trial"),
    ("resources: {agent_lable: x}", "resources.agent_lable: unknown key; did you mean 'resources.agent_label'?"),
    ("internal: {a: 1}", "internal: expected null"),
    ("records_per_epoch: -1", "records_per_epoch: must be at least 0, got -1"),
    ("min_validation_period: {steps: 10}", "min_validation_period: expected one of {batches: N}"),
    ("searcher: {name: async_halving, metric: loss, num_rungs: 3, max_trials: 2}", "searcher.name: async_halving is "
                                                                                   "Determined's"),
    ("searcher: {name: custom, metric: loss, unit: batches}", "searcher.name: custom is Determined's"),
    ("searcher: {name: single, metric: x, source_trial_id: 3}", "searcher.source_trial_id: starting from another"),
    ("searcher: {name: adaptive_asha, metric: x, max_trials: 2, time_metric: batches}",
     "searcher.max_time: expected a positive integer"),
    ("searcher: {name: adaptive_asha, metric: x, max_trials: 2, max_length: 5, time_metric: batches, max_time: 5}",
     "searcher.time_metric: give max_length or time_metric with max_time, not both"),
    ("searcher: {name: single, metric: x, stop_once: true}", "searcher.stop_once: not a key of searcher single"),
    ("hyperparameters: {global_batch_size: {per_gpu: 8}, lr: {type: double, minval: 0.1, maxval: 0.2}}\n"
     "searcher: {name: random, metric: x, max_trials: 2}",
     "hyperparameters.global_batch_size: expected an integer, got {'per_gpu': 8} (dict)"),
]


@pytest.mark.parametrize("body,check", ACCEPTED, ids=[str(i) for i in range(len(ACCEPTED))])
def test_every_key_form_of_determineds_examples_is_accepted(body, check):
    config = parse_config(f"name: t\nentrypoint: python3 train.py\n{body}\n", "d.yaml")
    assert check(config), (config.notes, config)
    assert all("\n" not in n and n.split(":")[0] for n in config.notes)
    if "optimizations" not in body:
        assert config.distribution_mode == "auto"  # the mode is tfdist's own decision


@pytest.mark.parametrize("body,message", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_what_tfdist_does_not_do_is_refused_in_one_line(body, message):
    with pytest.raises(ConfigError) as err:
        parse_config(f"entrypoint: python3 train.py\n{body}\n", "d.yaml")
    assert str(err.value).startswith(f"d.yaml: {message}") and "\n" not in str(err.value)


# Determined's schema (schemas/expconf/v0/experiment.json and its sections, both generations).
EXPERIMENT_KEYS = {
    "bind_mounts", "checkpoint_policy", "checkpoint_storage", "data", "data_layer", "debug", "description",
    "entrypoint", "environment", "hyperparameters", "integrations", "internal", "labels", "log_policies",
    "max_restarts", "min_checkpoint_period", "min_validation_period", "name", "optimizations", "pbs",
    "perform_initial_validation", "preemption_timeout", "profiling", "project", "records_per_epoch", "reproducibility",
    "resources", "retention_policy", "scheduling_unit", "searcher", "security", "slurm", "tensorboard_storage",
    "workspace"}
SECTIONS = {
    "environment": {"add_capabilities", "drop_capabilities", "environment_variables", "force_pull_image", "image",
                    "pod_spec", "ports", "proxy_ports", "registry_auth"},
    "resources": {"agent_label", "devices", "is_single_node", "max_slots", "native_parallel", "priority",
                  "resource_pool", "shm_size", "slots", "slots_per_trial", "weight"},
    "optimizations": {"aggregation_frequency", "auto_tune_tensor_fusion", "average_aggregated_gradients",
                      "average_training_metrics", "gradient_compression", "grad_updates_size_file", "mixed_precision",
                      "tensor_fusion_cycle_time", "tensor_fusion_threshold"},
    "searcher": {"name", "metric", "smaller_is_better", "max_length", "time_metric", "max_time", "max_trials",
                 "max_concurrent_trials", "max_rungs", "divisor", "mode", "bracket_rungs", "stop_once",
                 "source_trial_id", "source_checkpoint_uuid"},
}


def test_the_table_has_every_key_of_determineds_schema_once():
    assert set(determined_keys.top_keys()) - {"reproducibility.experiment_seed"} >= EXPERIMENT_KEYS - {
        "reproducibility"} and "reproducibility.experiment_seed" in determined_keys.ROWS
    for section, names in SECTIONS.items():
        assert set(determined_keys.section_keys(section)) == names, section
    assert len(determined_keys.ROWS) == len(determined_keys.TABLE)
    assert {r.fate for r in determined_keys.TABLE} == {"used", "partly", "noted", "refused"}
    table = determined_keys.markdown()
    assert table.count("\n") == len(determined_keys.TABLE) + 2 and "| `resources.priority` | used |" in table


@pytest.mark.parametrize("key", sorted(EXPERIMENT_KEYS))
def test_each_top_level_key_alone_is_accepted_or_one_line(key):
    value = {"checkpoint_policy": "all", "debug": True, "description": "d", "labels": ["x"], "project": "p",
             "workspace": "w", "perform_initial_validation": True, "preemption_timeout": 5, "records_per_epoch": 9,
             "scheduling_unit": 5, "min_checkpoint_period": {"epochs": 1}, "min_validation_period": {"batches": 5},
             "bind_mounts": [{"host_path": "/a", "container_path": "/b"}], "log_policies": [{"pattern": "x"}],
             "searcher": {"name": "single", "metric": "m"}, "name": "n", "entrypoint": "python3 t.py",
             "max_restarts": 1, "internal": None}.get(key, {})
    try:
        config = parse_config(json.dumps({"entrypoint": "python3 t.py", key: value}), "d.yaml")
    except ConfigError as e:
        assert "\n" not in str(e) and str(e).startswith("d.yaml: ")
        return
    assert all("\n" not in n for n in config.notes)


# ---------------------------------------------------------------- what the script and tfdist read of it

def test_the_script_gets_its_data_and_determineds_view_of_the_config():
    config = parse_config(CIFAR + "resources: {slots_per_trial: 2, priority: 30}\nmin_validation_period: {epochs: 1}")
    trial = _trial(config, 3, {"learning_rate": 0.001, "dropout": 0.3, "global_batch_size": 32,
                               "horizontal_flip": True})
    env = mwms.MWMS.plan(Placement("3-x", (NodePlacement("a", "h", 2, (1, 2)),)), trial.config, [()]).processes[0].env
    assert json.loads(env["TFDIST_USER_DATA"]) == {"url": "https://example.com/cifar.tar.gz"}
    view = json.loads(env["TFDIST_EXPERIMENT_CONFIG"])
    assert view["data"] == {"url": "https://example.com/cifar.tar.gz"} and view["records_per_epoch"] == 50000
    assert view["searcher"]["max_length"] == {"epochs": 32} and view["hyperparameters"]["global_batch_size"] == 32
    assert view["min_validation_period"] == {"epochs": 1} and view["checkpoint_policy"] == "best"
    assert view["resources"] == {"slots_per_trial": 2, "priority": 30} and view["entrypoint"] == "python3 train.py"


def test_by_device_variables_reach_their_kind_of_node_and_never_users():
    from cluster.coordinator.answers import redact
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

    config = parse_config("environment: {environment_variables: {cpu: [A=1, K=cpu], gpu: [A=1, K=gpu]}}")
    assert determined_view.device_variables(config, gpu=False) == {"K": "cpu"}
    gpu = mwms.MWMS.plan(Placement("j", (NodePlacement("a", "h", 1, (1,), gpu_node=True),)), config, [(0,)])
    assert (gpu.processes[0].env["A"], gpu.processes[0].env["K"]) == ("1", "gpu")
    spec = jobspec.job_spec(dataclasses.replace(config, entrypoint=("python3", "t.py")))
    answer = redact(pb.Job(spec=jobspec.to_pb(spec)))
    devices = jobspec.map_from_pb(answer.spec.config.determined)["environment"]["environment_variables"]
    assert devices == {"cpu": {"K": "(hidden)"}, "gpu": {"K": "(hidden)"}}


def test_data_and_the_view_are_bounded_in_one_line():
    with pytest.raises(ConfigError, match=r"^<config>: data: hold more than 32,768 characters \(they reach every "):
        parse_config(json.dumps({"data": {"blob": "x" * 40_000}}))
    each_at_its_bound = {"hyperparameters": {"h": "y" * 65_000}, "data": {"d": "z" * 32_000},
                         "description": "w" * 16_000, "checkpoint_storage": "/" + "c" * 4_000,
                         "environment": {"image": {"cpu": "i" * 4_000, "gpu": "j" * 4_000}},
                         "entrypoint": "python3 " + "a" * 4_000}
    with pytest.raises(ConfigError, match=r"^<config>: the config: hyperparameters, data and Determined's keys "
                                          r"together are 13[0-9],[0-9]{3} characters as JSON; the limit is 126,976 "):
        parse_config(json.dumps(each_at_its_bound))


def _rows(*rows):
    return [MetricRow(0, step, name, value, 1) for step, name, value in rows]


def test_a_trials_length_from_records_per_epoch_or_a_metric_of_its_own():
    config = parse_config(CIFAR)
    job = type("J", (), {"spec": _trial(config, 1, {"learning_rate": 0.01, "dropout": 0.3, "global_batch_size": 50,
                                                    "horizontal_flip": False})})
    searcher = searcher_lib.parse(config.searcher)
    assert reports(searcher, _rows((2000, "val_error", 0.4)), job) == [(0.4, 2)]  # 2000 x 50 / 50000
    assert reports(searcher, _rows((2000, "val_error", 0.4), (2000, "epoch", 3)), job) == [(0.4, 3)]  # reported wins
    timed = searcher_lib.parse({"name": "adaptive_asha", "metric": "loss", "time_metric": "samples", "max_time": 90,
                                "max_trials": 2})
    rows = _rows((5, "samples", 40), (5, "loss", 0.5), (6, "loss", 0.4), (7, "samples", float("nan")), (7, "loss", 1))
    assert reports(timed, rows, job) == [(0.5, 40)]
    assert reports(timed, _rows((6, "loss", 0.4)), job, lambda: _rows((6, "samples", 55))) == [(0.4, 55)]


def test_the_kubernetes_image_of_a_pair_is_the_one_for_the_nodes():
    on = [Allocation("j", "n1", 0, 2, "h", (1,), gpus=(0, 1))]
    off = [Allocation("j", "n1", 0, 2, "h", (1,))]
    pair = {"image": {"cpu": "c:1", "gpu": "g:1"}}
    assert (pod_image(pair, on, ""), pod_image(pair, off, ""), pod_image({"image": "one:1"}, on, "d:1")) == \
        ("g:1", "c:1", "one:1")
    assert (pod_image({"image": {"gpu": "g:1"}}, off, "d:1"), pod_image({}, off, "")) == ("d:1", "")


# ---------------------------------------------------------------- through the real CLI

def test_the_cli_refuses_a_determined_config_in_one_line(tmp_path, marker):
    (tmp_path / "s3.yaml").write_text("entrypoint: python3 -c pass\ncheckpoint_storage: {type: s3, bucket: b}\n")
    result = run_cli(["launch", "--config", "s3.yaml"], marker, timeout=60, cwd=str(tmp_path),
                     XDG_STATE_HOME=str(tmp_path / "state"))
    assert result.returncode == 125 and "Traceback" not in result.stdout + result.stderr
    assert result.stderr == ("tfdist: error: s3.yaml: checkpoint_storage.type: s3: tfdist checkpoints to a shared "
                             "filesystem: set type shared_fs with host_path (a directory every node mounts), or type "
                             "directory\n")


def test_the_cli_runs_a_search_of_the_batch_size_and_says_its_notes(tmp_path, marker):
    (tmp_path / "search.yaml").write_text(
        "name: batch_search\ndata: {rows: 10}\nmin_validation_period: {batches: 10}\n"
        "hyperparameters: {global_batch_size: {type: int, minval: 5, maxval: 30}}\n"
        "searcher: {name: random, metric: val_loss, max_trials: 2, max_length: 10}\n"
        "entrypoint: python3 -c \"import os; print(os.environ['TFDIST_GLOBAL_BATCH_SIZE'])\"\n")
    result = run_cli(["launch", "--config", "search.yaml"], marker, timeout=120, cwd=str(tmp_path),
                     XDG_STATE_HOME=str(tmp_path / "state"), TFDIST_RUNTIME_DIR=str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr and "COMPLETED" in result.stdout + result.stderr
    assert result.stderr.startswith(f"tfdist: config: {note('min_validation_period')}\n")


def test_the_docs_show_the_table_as_the_code_has_it():
    with open(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "docs", "determined.md")) as f:
        assert determined_keys.markdown() in f.read()  # docs/determined.md: render it again from the module


@pytest.mark.parametrize("entrypoint,command,mode", [
    # Every entrypoint form of Determined's published example configs (both generations): launcher in, command out.
    (">-\n  python3 -m determined.launch.tensorflow --\n  python3 train.py", "python3 train.py", "mwms"),
    ("python3 -m determined.launch.torch_distributed python3 train.py", "python3 train.py", "torch"),
    (">-\n  python3 -m determined.launch.torch_distributed\n  python3 finetune.py --config c.yaml",
     "python3 finetune.py --config c.yaml", "torch"),
    ("python3 -m determined.launch.deepspeed python3 script.py", "python3 script.py", "torch"),
    ("python3 -m determined.launch.horovod --autohorovod -- python3 train.py", "python3 train.py", "horovod"),
    ("python3 4_distributed.py launcher", "python3 4_distributed.py launcher", "mwms"),  # no such script here
    ("'  python3 model_def_metrics.py '", "python3 model_def_metrics.py", "mwms"),
])
def test_every_entrypoint_form_of_determineds_examples(entrypoint, command, mode):
    config = parse_config(f"name: t\nentrypoint: {entrypoint}\n", "d.yaml")
    assert " ".join(config.entrypoint) == command and jobspec.job_spec(config).config.distribution_mode == mode


@pytest.mark.parametrize("entrypoint", ["python3 -m determined.launch.horovod --autohorovod --trial model_def:IrisTrial",
                                        "python3 -m determined.launch.torch_distributed --trial model_def:MNistTrial",
                                        "model_def:CIFARTrial"])
def test_a_trial_class_entrypoint_is_one_line(entrypoint):
    with pytest.raises(ConfigError) as refused:
        parse_config(f"name: t\nentrypoint: {entrypoint}\n", "d.yaml")
    assert "\n" not in str(refused.value) and "Trial class API" in str(refused.value)


def test_the_tensorflow_launcher_says_tf_keras_is_keras_3_unless_the_config_chose():
    from cluster.shared.determined_launchers import KERAS_3_NOTE

    entrypoint = "entrypoint: python3 -m determined.launch.tensorflow -- python3 train.py\n"
    assert KERAS_3_NOTE in parse_config(entrypoint, "d.yaml").notes
    chosen = parse_config(entrypoint + "environment: {environment_variables: [TF_USE_LEGACY_KERAS=1]}\n", "d.yaml")
    assert KERAS_3_NOTE not in chosen.notes and "\n" not in KERAS_3_NOTE
