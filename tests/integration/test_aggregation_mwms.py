"""optimizations.aggregation_frequency under MultiWorkerMirroredStrategy: k steps of local accumulation
and one all-reduce train exactly what one step of a k-times larger batch trains, with k-fold fewer
collective steps (the accumulating step's compiled graph holds no collective op at all)."""

import json
import os

import numpy as np
import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
WORKER = os.path.join(REPO, "tests", "integration", "workers", "aggregation_mwms.py")


def run(tmp_path, marker, k, global_batch):
    out = tmp_path / f"k{k}"
    out.mkdir()
    (out / "c.yaml").write_text(f"optimizations: {{aggregation_frequency: {k}}}\nresources: {{slots_per_trial: 2}}\n"
                                f"hyperparameters: {{global_batch_size: {global_batch}}}\n"
                                f"environment: {{variables: {{OUT: {out}}}}}\n")
    result = run_cli(["launch", "--config", str(out / "c.yaml"), "--", WORKER], marker, timeout=200)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "distribution mwms (auto: MultiWorkerMirroredStrategy" in result.stderr
    return result, [json.loads((out / f"result-rank{r}.json").read_text()) for r in (0, 1)]


def test_k_steps_accumulated_equal_one_step_of_a_k_times_larger_batch(tmp_path, marker):
    result, aggregated = run(tmp_path, marker, 4, 16)
    _, large = run(tmp_path, marker, 1, 64)
    assert "effective batch 4 x 16 = 64 examples per update" in result.stderr
    # 512 examples, 2 epochs: 64 steps of 16 -> 16 updates; 16 steps of 64 -> 16 updates.
    assert [r["updates"] for r in aggregated] == [16, 16] and large[0]["updates"] == 16
    # The accumulating step's graph holds no collective; the update's: the gradients' one (in the optimizer's
    # scope) and the mean of the logged loss. Without aggregation every step holds both.
    collectives = aggregated[0]["collectives"]
    assert collectives["accumulate"] == [] and "CollectiveReduceV2:sgd/CollectiveReduceV2" in collectives["update"]
    for rank in (0, 1):
        for a, b in zip(aggregated[rank]["weights"], large[0]["weights"]):
            np.testing.assert_allclose(np.array(a), np.array(b), rtol=0, atol=2e-6)
