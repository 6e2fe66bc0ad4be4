"""Config validation: every bad config gets one exact, fixable message."""

import pytest

from cluster.shared.config import ConfigError, ExperimentConfig, load_config, parse_config, with_overrides

GOOD = """
name: digits
entrypoint: python train.py --epochs 3
resources:
  slots_per_trial: 4
distribution:
  mode: mwms
hyperparameters:
  global_batch_size: 128
  learning_rate: 0.01
  layers: [64, 32]
environment:
  variables:
    - TF_CPP_MIN_LOG_LEVEL=2
    - MY_FLAG=a=b
max_restarts: 3
"""


def test_good_config_parses_into_the_dataclass():
    cfg = parse_config(GOOD, "c.yaml")
    assert cfg == ExperimentConfig(
        name="digits",
        entrypoint=("python", "train.py", "--epochs", "3"),
        slots_per_trial=4,
        distribution_mode="mwms",
        hyperparameters={"global_batch_size": 128, "learning_rate": 0.01, "layers": [64, 32]},
        environment_variables={"TF_CPP_MIN_LOG_LEVEL": "2", "MY_FLAG": "a=b"},
        max_restarts=3,
    )
    assert cfg.global_batch_size == 128


def test_defaults_and_list_entrypoint_and_env_mapping():
    cfg = parse_config("entrypoint: [python, t.py, 3]\nenvironment: {variables: {A: 1, B: true}}")
    assert cfg.entrypoint == ("python", "t.py", "3")
    assert cfg.slots_per_trial == 1 and cfg.distribution_mode == "auto" and cfg.max_restarts == 0 and cfg.checkpoint_storage == ""
    assert cfg.environment_variables == {"A": "1", "B": "true"}
    assert parse_config("") == ExperimentConfig()


BAD = [
    ("resources: {slot_per_trial: 2}",
     "c.yaml: resources.slot_per_trial: unknown key; did you mean 'resources.slots_per_trial'?"),
    ("hyperparameter: {global_batch_size: 2}",
     "c.yaml: hyperparameter: unknown key; did you mean 'hyperparameters'?"),
    ("optimization: {gradient_compression: fp16}",
     "c.yaml: optimization: unknown key; did you mean 'optimizations'?"),
    ("optimizations: {gradient_compresion: fp16}",
     "c.yaml: optimizations.gradient_compresion: unknown key; did you mean 'optimizations.gradient_compression'?"),
    ("optimizations: {gradient_compression: int8}",
     "c.yaml: optimizations.gradient_compression: unknown value 'int8'; expected one of none, fp16"),
    ("optimizations: {auto_tune_tensor_fusion: 1}",
     "c.yaml: optimizations.auto_tune_tensor_fusion: expected true or false, got 1 (int)"),
    ("distribution: {mode: mwms}\noptimizations: {gradient_compression: fp16}",
     "c.yaml: distribution.mode: optimizations.gradient_compression=fp16 is implemented through Horovod, but the "
     "mode is mwms; set distribution.mode: horovod (or auto), or drop the option"),
    ("distribution: {num_ps: 2}",
     "c.yaml: distribution.mode: distribution.num_ps and distribution.evaluator apply to parameter-server training "
     "only, but the mode is auto; set distribution.mode: ps"),
    ("distribution: {mode: ps, num_ps: 0}",
     "c.yaml: distribution.num_ps: must be at least 1, got 0"),
    ("distribution: {mode: ps, evaluator: yes please}",
     "c.yaml: distribution.evaluator: expected true or false, got 'yes please' (str)"),
    ("resources: {slots_per_trial: two}",
     "c.yaml: resources.slots_per_trial: expected an integer, got 'two' (str)"),
    ("resources: {slots_per_trial: 0}",
     "c.yaml: resources.slots_per_trial: must be at least 1, got 0"),
    ("resources: {slots_per_trial: true}",
     "c.yaml: resources.slots_per_trial: expected an integer, got True (bool)"),
    ("resources: {slots_per_trial: 2.5}",
     "c.yaml: resources.slots_per_trial: expected an integer, got 2.5 (float)"),
    ("resources: 4",
     "c.yaml: resources: expected a mapping, got 4 (int)"),
    ("max_restarts: -1",
     "c.yaml: max_restarts: must be at least 0, got -1"),
    ("distribution: {mode: mwm}",
     "c.yaml: distribution.mode: unknown value 'mwm'; expected one of auto, mwms, ps, horovod, jax, torch, mirrored, central_storage, one_device, per_node; did you mean 'mwms'?"),
    ("distribution: {mode: 3}",
     "c.yaml: distribution.mode: expected one of auto, mwms, ps, horovod, jax, torch, mirrored, central_storage, one_device, per_node, got 3 (int)"),
    ("hyperparameters: {global_batch_size: 0}",
     "c.yaml: hyperparameters.global_batch_size: must be at least 1, got 0"),
    ("hyperparameters: {global_batch_size: '64'}",
     "c.yaml: hyperparameters.global_batch_size: expected an integer, got '64' (str)"),
    ("hyperparameters: [1, 2]",
     "c.yaml: hyperparameters: expected a mapping, got [1, 2] (list)"),
    ("entrypoint: ''",
     "c.yaml: entrypoint: is empty; give a command such as 'python train.py'"),
    ("entrypoint: {script: t.py}",
     "c.yaml: entrypoint: expected a string or a list of strings, got {'script': 't.py'} (dict)"),
    ("entrypoint: [python, {a: 1}]",
     "c.yaml: entrypoint[1]: expected a string, got {'a': 1} (dict)"),
    ("entrypoint: \"python 'unclosed\"",
     "c.yaml: entrypoint: cannot split \"python 'unclosed\" into arguments: No closing quotation"),
    ("environment: {variables: [NOEQUALS]}",
     "c.yaml: environment.variables[0]: expected a 'NAME=VALUE' string, got 'NOEQUALS' (str)"),
    ("environment: {variables: {TF_CONFIG: x}}",
     "c.yaml: environment.variables.TF_CONFIG: TF_CONFIG is set by tfdist for every worker and cannot be overridden"),
    ("environment: {variables: ['TFDIST_RANK=3']}",
     "c.yaml: environment.variables[0]: TFDIST_RANK is set by tfdist for every worker and cannot be overridden"),
    ("environment: {variables: {1BAD: x}}",
     "c.yaml: environment.variables.1BAD: '1BAD' is not a valid environment variable name "
     "(letters, digits and '_', not starting with a digit)"),
    ("environment: {variables: {A: [1]}}",
     "c.yaml: environment.variables.A: expected a string or number, got [1] (list)"),
    ("environment: {imag: tensorflow}",
     "c.yaml: environment.imag: unknown key; did you mean 'environment.image'?"),
    ("name: ''", "c.yaml: name: expected a non-empty string, got '' (str); or leave it out (the job is named after "
                 "its command)"),
    ("checkpoint_storage: {type: s3, bucket: x}",
     "c.yaml: checkpoint_storage.type: s3: tfdist checkpoints to a shared filesystem: set type shared_fs with "
     "host_path (a directory every node mounts), or type directory"),
    ("checkpoint_storage: {type: nfs, host_path: /x}",
     "c.yaml: checkpoint_storage.type: unknown value 'nfs' (str); expected one of shared_fs, directory"),
    ("checkpoint_storage: {type: shared_fs}",
     "c.yaml: checkpoint_storage.host_path: expected a directory every node shares, got null"),
    ("checkpoint_storage: {host_path: /x, storage_path: ../up}",
     "c.yaml: checkpoint_storage.storage_path: expected a relative path inside host_path, got '../up' (str)"),
    ("checkpoint_storage: {host_path: /x, save_best: true}",
     "c.yaml: checkpoint_storage.save_best: unknown key; did you mean 'checkpoint_storage.save_trial_best'?"),
    ("kubernetes: {imag: tfdist:1}", "c.yaml: kubernetes.imag: unknown key; did you mean 'kubernetes.image'?"),
    ("kubernetes: {image: ''}", "c.yaml: kubernetes.image: is empty, got '' (str)"),
    ("kubernetes: {pod_spec: [a]}", "c.yaml: kubernetes.pod_spec: expected a pod spec (a mapping), got ['a'] (list)"),
    ("kubernetes: {pod_spec: {containers: {name: x}}}",
     "c.yaml: kubernetes.pod_spec.containers: expected a list of containers, got {'name': 'x'} (dict); name the one "
     "tfdist runs the workers in `tfdist-worker`"),
    ("- a\n- b", "c.yaml: the config: expected a mapping, got ['a', 'b'] (list)"),
    ("resources:\n  slots_per_trial: 2\n bad: [", "c.yaml:3:2: invalid YAML: expected <block end>, but found '<block mapping start>'"),
    ("a: b: c", "c.yaml:1:5: invalid YAML: mapping values are not allowed here"),
]


@pytest.mark.parametrize("text,message", BAD, ids=[b[1].split(":")[1].strip() + str(i) for i, b in enumerate(BAD)])
def test_bad_config_gets_exact_message(text, message):
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.yaml")
    assert str(err.value) == message
    assert "\n" not in str(err.value)


def test_checkpoint_storage_in_determined_form_or_as_a_path():
    assert parse_config("checkpoint_storage: {type: shared_fs, host_path: /mnt/ckpt, storage_path: team/a}"
                        ).checkpoint_storage == "/mnt/ckpt/team/a"
    assert parse_config("checkpoint_storage: /mnt/ckpt/").checkpoint_storage == "/mnt/ckpt/"


def test_unreadable_file(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(str(tmp_path / "missing.yaml"))
    assert str(err.value) == f"{tmp_path / 'missing.yaml'}: cannot read config file: No such file or directory"


def test_overrides_are_validated_like_the_file():
    cfg = parse_config(GOOD)
    assert with_overrides(cfg, slots=2).slots_per_trial == 2
    assert with_overrides(cfg, entrypoint=["python", "x.py"]).entrypoint == ("python", "x.py")
    with pytest.raises(ConfigError, match=r"^--slots: must be at least 1, got 0$"):
        with_overrides(cfg, slots=0)
    with pytest.raises(ConfigError, match=r"^--distribution: unknown value 'ring'; expected one of auto, mwms, ps, horovod, jax, torch, mirrored, central_storage, one_device, per_node$"):
        with_overrides(cfg, distribution="ring")


@pytest.mark.parametrize("text, message", [
    # each value's own check comes before the rules between values (a wrong type never reaches a comparison)
    ("distribution: {mode: ps, num_ps: 2}\noptimizations: {aggregation_frequency: '2'}\n",
     "optimizations.aggregation_frequency: expected an integer, got '2' (str)"),
    ("distribution: {mode: ps, num_ps: 2}\noptimizations: {aggregation_frequency: null}\n",
     "optimizations.aggregation_frequency: expected an integer, got null"),
    ("distribution: {mode: foo, num_ps: 2}\n", "distribution.mode: unknown value 'foo'"),
    ("distribution: {mode: mwms, num_ps: 1}\n", "distribution.num_ps and distribution.evaluator apply to parameter-server"),
])
def test_values_are_checked_before_the_rules_between_them(text, message):
    with pytest.raises(ConfigError) as err:
        parse_config("entrypoint: python t.py\n" + text)
    assert message in str(err.value)
