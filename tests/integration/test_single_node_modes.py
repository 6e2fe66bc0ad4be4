"""Single-node strategies chosen in the config: one process drives every slot, on CPU through
logical devices (Keras 3 fit, real TensorFlow)."""

import os

import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
WORKER = os.path.join(REPO, "tests", "integration", "workers", "single_node.py")


@pytest.mark.parametrize("mode,slots,strategy", [
    ("mirrored", 2, "MirroredStrategy"),
    ("central_storage", 2, "CentralStorageStrategy"),
    ("one_device", 1, "OneDeviceStrategy"),
])
def test_one_process_drives_every_slot(marker, mode, slots, strategy):
    result = run_cli(["launch", "--slots", str(slots), "--distribution", mode, "--", WORKER], marker)
    assert result.returncode == 0, result.stderr[-3000:]
    per_replica = 32 // slots
    iterations = 3 * -(-256 // (per_replica * slots))  # 3 epochs of ceil(256 / global batch) steps
    assert (f"[rank=0] strategy={strategy} replicas={slots} size=1 per_replica={per_replica} "
            f"iterations={iterations} loss_fell=True") in result.stdout
    assert "[rank=1]" not in result.stdout


def test_one_device_with_more_slots_is_refused(marker):
    result = run_cli(["launch", "--slots", "2", "--distribution", "one_device", "--", WORKER], marker, timeout=60)
    assert result.returncode == 125
    assert result.stderr == ("tfdist: error: --slots/--distribution: distribution mode one_device drives exactly one "
                             "device, got 2 slots; use mode mirrored (one node) or mwms (several nodes) for more\n")
