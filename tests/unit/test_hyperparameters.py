"""Determined configs port (issue 18, Must 7): typed hyperparameters, `searcher:`, `--hparam NAME=VALUE` and
a job's default name. Pure logic through the config loader; two real `tfdist launch` refusals at the end."""

import pytest

from cluster.shared.config import ConfigError, ExperimentConfig, config_from_dict, parse_config, with_overrides
from cluster.shared.hyperparameters import parse_override
from cluster.shared.job_name import job_name
from cluster.shared.jobspec import from_pb, job_spec, to_pb
from tests.conftest import run_cli


def hparams(text: str, *overrides: str) -> dict:
    return dict(parse_config(text, "c.yaml", hparams=overrides).hyperparameters)


def test_const_becomes_its_value_in_groups_and_lists_and_plain_values_stay():
    text = """hyperparameters:
  global_batch_size: {type: const, val: 64}
  lr: 0.01
  layers: [64, {type: const, val: 32}]
  optimizer: {name: {type: const, val: adam}, betas: [0.9, 0.99]}
  model: {type: const, val: {type: resnet, depth: 50}}
  empty: {}
"""
    assert hparams(text) == {"global_batch_size": 64, "lr": 0.01, "layers": [64, 32],
                             "optimizer": {"name": "adam", "betas": [0.9, 0.99]},
                             "model": {"type": "resnet", "depth": 50}, "empty": {}}


def test_exponents_are_floats_as_in_determined():
    """YAML 1.2 (Determined's parser) reads 1e-4 as a number; PyYAML's 1.1 rules made it the text '1e-4'."""
    config = parse_config("hyperparameters: {lr: 1e-4, wd: -2E+2, tag: 1e, n: 12}\nwatchdog: {step_timeout: 6e2}\n")
    assert config.hyperparameters == {"lr": 0.0001, "wd": -200.0, "tag": "1e", "n": 12}
    assert config.step_timeout == 600.0
    with pytest.raises(ConfigError, match="type double needs a searcher that searches.*val: 0.005"):
        parse_config("hyperparameters: {lr: {type: double, minval: 1e-5, maxval: 1e-2}}")


def test_a_const_global_batch_size_is_checked_like_a_plain_one():
    with pytest.raises(ConfigError, match=r"^c.yaml: hyperparameters.global_batch_size: must be at least 1, got 0$"):
        hparams("hyperparameters: {global_batch_size: {type: const, val: 0}}")


SEARCHED = [  # Measured 8: these reached the workers as dicts and failed inside TensorFlow
    ("lr: {type: log, base: 10, minval: -4, maxval: -1}",
     "hyperparameters.lr: type log needs a searcher that searches (e.g. searcher: {name: "
     "random, metric: val_loss, max_trials: 8}); or give one value with {type: const, val: 0.01} or --hparam lr=0.01"),
    ("units: {type: int, minval: 8, maxval: 65, count: 4}",
     "hyperparameters.units: type int needs a searcher that searches (e.g. searcher: {name: "
     "random, metric: val_loss, max_trials: 8}); or give one value with {type: const, val: 36} or --hparam units=36"),
    ("opt: {dropout: {type: double, minval: 0.2, maxval: 0.5}}",
     "hyperparameters.opt.dropout: type double needs a searcher that searches (e.g. searcher: {name: "
     "random, metric: val_loss, max_trials: 8}); or give one value with {type: const, val: 0.35} or --hparam opt.dropout=0.35"),
    ("act: {type: categorical, vals: [relu, true]}",
     "hyperparameters.act: type categorical needs a searcher that searches (e.g. searcher: {name: "
     "random, metric: val_loss, max_trials: 8}); or give one value with {type: const, val: relu} or --hparam act=relu"),
    ("sizes: [1, {type: categorical, vals: [false]}]",  # inside a list --hparam replaces the list: not offered
     "hyperparameters.sizes[1]: type categorical needs a searcher that searches (e.g. searcher: {name: "
     "random, metric: val_loss, max_trials: 8}); or give one value with {type: const, val: false}"),
    ("lr: {type: log, base: 2, minval: 0.2, maxval: 0.4}",  # no whole power inside: the middle one
     "hyperparameters.lr: type log needs a searcher that searches (e.g. searcher: {name: "
     "random, metric: val_loss, max_trials: 8}); or give one value with {type: const, val: 1.23} or --hparam lr=1.23"),
]

BAD = SEARCHED + [
    ("lr: {type: log, base: 10, minval: -1, maxval: -4}",
     "hyperparameters.lr: minval (-1) must be less than maxval (-4); swap them, or give one value with "
     "{type: const, val: ...}"),
    ("n: {type: int, minval: 3, maxval: 3}",
     "hyperparameters.n: minval (3) must be less than maxval (3); swap them, or give one value with "
     "{type: const, val: ...}"),
    ("n: {type: int, minval: 1.5, maxval: 3}", "hyperparameters.n.minval: expected an integer, got 1.5"),
    ("x: {type: double, minval: 0, maxval: .inf}", "hyperparameters.x.maxval: expected a finite number, got inf"),
    ("x: {type: double, minval: '0', maxval: 1}", "hyperparameters.x.minval: expected a finite number, got '0' (str)"),
    ("lr: {type: log, base: 1, minval: -4, maxval: -1}",
     "hyperparameters.lr.base: must be a number > 0 other than 1 (the values are base ** minval .. base ** maxval), "
     "got 1; e.g. base: 10"),
    ("lr: {type: log, base: -2, minval: -4, maxval: -1}",
     "hyperparameters.lr.base: must be a number > 0 other than 1 (the values are base ** minval .. base ** maxval), "
     "got -2; e.g. base: 10"),
    ("lr: {type: log, minval: -4, maxval: -1}",
     "hyperparameters.lr: type log needs 'base' ({type: log, base: 10, minval: -4, maxval: -1})"),
    ("n: {type: int, minval: 1, maxval: 9, count: 0}",
     "hyperparameters.n.count: must be a positive integer (how many values a grid search takes) or left out, got 0"),
    ("n: {type: int, minval: 1, maxval: 9, count: true}",
     "hyperparameters.n.count: must be a positive integer (how many values a grid search takes) or left out, "
     "got True (bool)"),
    ("c: {type: categorical, vals: []}",
     "hyperparameters.c.vals: must be a non-empty list of the values to choose from, got [] (list); "
     "e.g. vals: [adam, sgd]"),
    ("c: {type: categorical, vals: adam}",
     "hyperparameters.c.vals: must be a non-empty list of the values to choose from, got 'adam' (str); "
     "e.g. vals: [adam, sgd]"),
    ("c: {type: const}", "hyperparameters.c: type const needs 'val' ({type: const, val: 0.001})"),
    ("c: {type: const, value: 1}",
     "hyperparameters.c.value: unknown key for type const; did you mean 'val'? type const takes val"),
    ("n: {type: int, min: 1, maxval: 9}",
     "hyperparameters.n.min: unknown key for type int; did you mean 'minval'? type int takes minval, maxval, count"),
    ("model: {type: resnet, depth: 50}",
     "hyperparameters.model.type: unknown hyperparameter type 'resnet' (str); expected one of const, int, double, "
     "log, categorical (a value that is a mapping with a 'type' key of its own: write {type: const, val: {...}})"),
    ("lr: {type: lgo, base: 10, minval: -4, maxval: -1}",
     "hyperparameters.lr.type: unknown hyperparameter type 'lgo' (str); did you mean log? expected one of const, "
     "int, double, log, categorical (a value that is a mapping with a 'type' key of its own: write "
     "{type: const, val: {...}})"),
]


@pytest.mark.parametrize("entry,message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_each_bad_hyperparameter_is_one_line_naming_its_path(entry, message):
    with pytest.raises(ConfigError) as err:
        parse_config(f"hyperparameters:\n  {entry}\n", "c.yaml")
    assert str(err.value) == "c.yaml: " + message


@pytest.mark.parametrize("entry,message", SEARCHED[:4], ids=[str(i) for i in range(4)])
def test_the_suggested_hparam_flag_gives_the_value(entry, message):
    flag = message.split("--hparam ")[1]
    name, value = parse_override(flag)
    got = hparams(f"hyperparameters:\n  {entry}\n", flag)
    for key in name.split("."):
        got = got[key]
    assert got == value


SEARCHERS = [
    ("searcher: {name: pbt, metric: val_loss}",
     "searcher.name: pbt is Determined's; tfdist runs single, grid, random, adaptive_asha, tpe (adaptive_asha for "
     "early stopping)"),
    ("searcher: {name: adaptive_asha, metric: val_loss}", "searcher.max_length: adaptive_asha needs the longest a "
     "trial trains"),
    ("searcher: {metric: val_loss}",
     "searcher.name: missing; expected one of single, grid, random, adaptive_asha, tpe"),
    ("searcher: {name: singel}",
     "searcher.name: unknown searcher 'singel' (str); did you mean single? expected one of single, grid, random"),
    ("searcher: single", "searcher: expected a mapping such as {name: random, metric: val_loss, max_trials: 8}, got "
     "'single' (str)"),
    ("searcher: {name: single, max_trial: 3}", "searcher.max_trial: not a key of searcher single; it takes "
     "name, metric, smaller_is_better, max_length, source_trial_id, source_checkpoint_uuid"),
    ("searcher: {name: single, metrik: loss}", "searcher.metrik: not a key of searcher single; did you mean "
     "'searcher.metric'?"),
    ("searcher: {name: single, metric: 3}", "searcher.metric: expected a metric's name such as val_loss, got 3"),
    ("searcher: {name: single, smaller_is_better: 'yes'}",
     "searcher.smaller_is_better: expected true or false, got 'yes' (str)"),
    ("searcher: {name: single, max_length: {batches: 0}}", "searcher.max_length: expected a positive integer or "
     "one of {batches: N}, {records: N}, {epochs: N}, got {'batches': 0} (dict)"),
    ("searcher: {name: single, max_length: {steps: 10}}", "searcher.max_length: expected a positive integer"),
    ("searcher: {name: single, source_trial_id: 7}", "searcher.source_trial_id: starting from another trial's "
     "checkpoint is Determined's; tfdist continues its own jobs with `tfdist resume ID`"),
]


@pytest.mark.parametrize("text,message", SEARCHERS, ids=[str(i) for i in range(len(SEARCHERS))])
def test_searcher_single_or_one_line(text, message):
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.yaml")
    assert str(err.value).startswith("c.yaml: " + message) and "\n" not in str(err.value)


def test_searcher_single_is_accepted_with_determined_keys():
    for searcher in ("{name: single, metric: val_loss, smaller_is_better: false, max_length: {epochs: 5}}",
                     "{name: single, metric: val_loss, max_length: 1000, source_trial_id: null}", "null"):
        assert parse_config(f"searcher: {searcher}\nhyperparameters: {{lr: 0.1}}").hyperparameters == {"lr": 0.1}


@pytest.mark.parametrize("flag,value", [
    ("lr=0.001", 0.001), ("n=32", 32), ("on=true", True), ("off=False", False), ("x=null", None), ("s=adam", "adam"),
    ("e=", ""), ("sp= ", " "), ("l=[64, 32]", [64, 32]), ("m={a: 1}", {"a": 1}), ("d=2024-01-01", "2024-01-01"),
    ("t=a: b", "a: b"), ("q='1'", "1"), ("eq=a=b", "a=b"), ("big=1e-3", 0.001), ("h=0x10", 16),
])
def test_hparam_values_are_read_as_yaml(flag, value):
    assert parse_override(flag) == (flag.split("=")[0], value)


@pytest.mark.parametrize("flag,message", [
    ("lr", "--hparam 'lr': expected NAME=VALUE, e.g. --hparam learning_rate=0.001"),
    ("=1", "--hparam '=1': expected NAME=VALUE, e.g. --hparam learning_rate=0.001"),
    ("l=[1,", "--hparam l=[1,: VALUE is not a valid YAML list or mapping (expected the node content, but found "
              "'<stream end>'); quote the whole flag, e.g. --hparam 'sizes=[64, 32]'"),
])
def test_a_bad_hparam_flag_is_one_line(flag, message):
    with pytest.raises(ConfigError) as err:
        config_from_dict({}, hparams=[flag])
    assert str(err.value) == message


TYPED = "hyperparameters:\n  lr: {type: log, base: 10, minval: -4, maxval: -1}\n  opt: {name: adam, mom: 0.9}\n"


def test_hparam_overrides_names_the_config_has():
    assert hparams(TYPED, "lr=0.001", "opt.name=sgd", "lr=0.002") == {"lr": 0.002, "opt": {"name": "sgd", "mom": 0.9}}
    assert hparams(TYPED, "lr=0.1", "global_batch_size=64")["global_batch_size"] == 64  # tfdist's own: always
    assert hparams("hyperparameters: {a.b: 1}", "a.b=2") == {"a.b": 2}  # a dotted key of its own
    config = parse_config("hyperparameters: {lr: 0.1, opt: {name: adam}}")
    assert config.hyperparameters == {"lr": 0.1, "opt": {"name": "adam"}}


@pytest.mark.parametrize("flag,message", [
    ("lrr=0.1", "--hparam lrr=0.1: the config has no hyperparameter lrr; did you mean lr? it has: lr, opt.name, "
                "opt.mom (add it to the config's hyperparameters to set it from the command line)"),
    ("opt.nmae=sgd", "--hparam opt.nmae=sgd: the config has no hyperparameter opt.nmae; did you mean opt.name? it "
                     "has: lr, opt.name, opt.mom (add it to the config's hyperparameters to set it from the command "
                     "line)"),
    ("lr.x=1", "--hparam lr.x=1: the config has no hyperparameter lr.x; did you mean lr? it has: lr, opt.name, "
               "opt.mom (add it to the config's hyperparameters to set it from the command line)"),
    ("opt=sgd", "--hparam opt=sgd: opt is a group of hyperparameters (mom, name); set one of them: "
                "--hparam opt.NAME=VALUE"),
])
def test_hparam_refuses_names_the_config_lacks(flag, message):
    with pytest.raises(ConfigError) as err:
        parse_config(TYPED, "c.yaml", hparams=[flag])
    assert str(err.value) == "c.yaml: " + message


def test_hparam_adds_any_name_where_the_config_has_none():
    assert config_from_dict({}, hparams=["lr=0.1", "opt.name=sgd", "opt.mom=0.9"]).hyperparameters == \
        {"lr": 0.1, "opt": {"name": "sgd", "mom": 0.9}}
    with pytest.raises(ConfigError, match=r"^--hparam a.b=2: a is a value, not a group of hyperparameters"):
        config_from_dict({}, hparams=["a=1", "a.b=2"])


@pytest.mark.parametrize("command,name", [
    (["python", "examples/digits/train.py", "--save", "x"], "train"),
    (["/usr/bin/python3.11", "-u", "-W", "ignore", "-X", "dev", "t.py"], "t"),
    (["python", "-m", "pkg.mod", "--flag"], "pkg.mod"),
    (["python3", "-mpkg.mod"], "pkg.mod"),
    (["python", "-c", "print(1)"], "python"),
    (["python"], "python"),
    (["env", "-u", "X", "A=1", "python", "-Wignore", "./sub/run.py"], "run"),
    (["train.py", "--epochs", "3"], "train"),
    (["./run.sh", "a"], "run.sh"),
    (["torchrun"], "torchrun"),
    (["\x1b[31m"], "[31m"),
    (["\x07"], "job"),
    ([], "job"),
])
def test_job_name_is_what_runs(command, name):
    assert job_name(command) == name


def test_a_job_without_name_is_named_after_its_command():
    unnamed = parse_config("entrypoint: python examples/digits/train.py\n")
    assert unnamed.name == "train" and not unnamed.name_given
    assert with_overrides(unnamed, entrypoint=["python", "-m", "pkg.mod"]).name == "pkg.mod"  # `--` renames it
    assert with_overrides(unnamed).name == "train"
    named = parse_config("name: digits\nentrypoint: python examples/digits/train.py\n")
    assert with_overrides(named, entrypoint=["python", "other.py"]).name == "digits"
    assert with_overrides(ExperimentConfig(), entrypoint=["python", "t.py"]).name == "t"
    submitted = job_spec(ExperimentConfig(entrypoint=("python", "t.py")))  # built without the loader: named too
    assert submitted.name == "t" and from_pb(to_pb(submitted)).name == "t"
    wire = to_pb(submitted)
    wire.config.name = ""  # a client that sends no name: the coordinator's check names the job
    assert from_pb(wire).name == "t"


@pytest.mark.parametrize("config,args,line", [
    ("searcher: {name: grid, metric: loss}\nhyperparameters: {lr: {type: double, minval: 0.1, maxval: 1}}\n", [],
     "tfdist: error: c.yaml: hyperparameters.lr: a grid search needs `count` for type double"),
    ("hyperparameters: {lr: 0.1}\n", ["--hparam", "lrr=1"],
     "tfdist: error: c.yaml: --hparam lrr=1: the config has no hyperparameter lrr; did you mean lr?"),
])
def test_launch_refuses_in_one_line_with_125(tmp_path, marker, config, args, line):
    (tmp_path / "c.yaml").write_text(config)
    result = run_cli(["launch", "--config", "c.yaml", *args, "--", "python", "-c", "pass"], marker, timeout=60,
                     cwd=str(tmp_path))
    assert result.returncode == 125 and result.stdout == ""
    assert result.stderr.startswith(line) and result.stderr.count("\n") == 1, result.stderr
