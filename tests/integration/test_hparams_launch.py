"""A Determined-style config through a real local `tfdist launch`: a `const` reaches the workers as its value,
`--hparam` gives a searched (`log`) hyperparameter its value, and without that flag the `single` searcher draws
it once, as Determined's does, and says so. The workers train nothing (tests/integration/workers/show_hparams.py)."""

import json
import os

import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.timeout(180)]
SCRIPT = os.path.join(REPO, "tests", "integration", "workers", "show_hparams.py")
CONFIG = """\
searcher: {name: single, metric: val_loss, max_length: {epochs: 1}}
hyperparameters:
  global_batch_size: {type: const, val: 32}
  learning_rate: {type: log, base: 10, minval: -4, maxval: -1}
  optimizer:
    name: {type: categorical, vals: [adam, sgd]}
    momentum: 0.9
"""


def test_const_and_hparam_reach_the_workers(tmp_path, marker):
    (tmp_path / "exp.yaml").write_text(CONFIG)
    result = run_cli(["launch", "--config", "exp.yaml", "--slots", "2", "--hparam", "learning_rate=0.001",
                      "--hparam", "optimizer.name=sgd", "--", "python", SCRIPT], marker, timeout=120, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    got = {line.split(" hparams ")[0]: json.loads(line.split(" hparams ")[1])
           for line in result.stdout.splitlines() if " hparams " in line}
    expected = {"epochs": 3, "global_batch_size": 32, "learning_rate": 0.001,
                "optimizer": {"name": "sgd", "momentum": 0.9}}
    assert got == {"[rank=0] rank 0": expected, "[rank=1] rank 1": expected}, result.stdout


def test_a_searched_hyperparameter_without_a_value_is_drawn_once_as_determined_does(tmp_path, marker):
    (tmp_path / "exp.yaml").write_text(CONFIG)
    mine = {"XDG_STATE_HOME": str(tmp_path / "state"), "TFDIST_COORDINATOR": ""}
    result = run_cli(["launch", "--config", "exp.yaml", "--slots", "2", "--", "python", SCRIPT], marker,
                     timeout=120, cwd=str(tmp_path), **mine)
    assert result.returncode == 0, result.stderr
    assert "tfdist: config: searcher.name: single with searched hyperparameters draws their values once, as " \
           "Determined does" in result.stderr and "1 of 1 trials made" in result.stdout
    (trial,) = json.loads(run_cli(["experiment", "e1", "--json"], marker, cwd=str(tmp_path), **mine).stdout)["trials"]
    logs = run_cli(["logs", trial["job_id"]], marker, cwd=str(tmp_path), **mine).stdout
    got = [json.loads(line.split(" hparams ")[1]) for line in logs.splitlines() if " hparams " in line]
    assert len(got) == 2 and got[0] == got[1], logs  # one trial: both ranks got the same draw
    assert 1e-4 <= got[0]["learning_rate"] <= 0.1 and got[0]["optimizer"]["name"] in ("adam", "sgd")
