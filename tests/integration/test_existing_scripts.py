"""An existing MultiWorkerMirroredStrategy script that never imports tfdist trains with Keras 3 `fit`
under `tfdist launch`: the fix reaches it through the worker's Python start-up (sitecustomize)."""

import os

import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
TUTORIAL = os.path.join(REPO, "tests", "integration", "workers", "tutorial_mwms.py")


def test_the_tutorial_script_trains_unchanged(marker):
    result = run_cli(["launch", "--slots", "2", "--", TUTORIAL], marker)
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in (0, 1):
        assert f"[rank={rank}] task {rank} replicas 2 loss" in result.stdout
        assert "iterations 12" in result.stdout


def test_the_opt_out_leaves_keras_as_upstream_has_it(marker):
    result = run_cli(["launch", "--slots", "2", "--", TUTORIAL], marker, TFDIST_KERAS_PATCH="0")
    assert result.returncode != 0  # keras-team/keras#20585: this test flags when upstream fixes it
    assert "PerReplica" in result.stdout + result.stderr or "Invalid reduction dimension" in result.stdout + \
        result.stderr
