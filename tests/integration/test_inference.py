"""Distributed batch inference (examples/inference): the predictions gathered on the chief from 3 ranks
are the single-process predictions, every example exactly once."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO, cli_env, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
EXAMPLE = os.path.join(REPO, "examples", "inference", "predict.py")


def test_sharded_predictions_gathered_on_the_chief_equal_one_process(tmp_path, marker):
    alone = subprocess.run([sys.executable, EXAMPLE, "--out", str(tmp_path / "one.json")], cwd=REPO,
                           env=cli_env(marker), capture_output=True, text=True, timeout=240)
    assert alone.returncode == 0, alone.stderr[-3000:]
    result = run_cli(["launch", "--slots", "3", "--", EXAMPLE, "--out", str(tmp_path / "three.json")], marker)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[rank=0] predicted 1797 examples on 3 ranks" in result.stdout
    one, three = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("one", "three"))
    assert one["examples"] == three["examples"] == 1797
    assert one["classes"] == three["classes"]
    np.testing.assert_allclose(one["probabilities"], three["probabilities"], atol=1e-5)
