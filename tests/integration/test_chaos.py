"""A short chaos run in `make test`: the coordinator is killed with -9 eight times while jobs run.
The long run (>= 100 kills) is `make chaos` (benchmarks/chaos.py)."""

import pytest

from tests.chaos import ChaosRun

pytestmark = [pytest.mark.timeout(420)]


def test_kill_9_at_random_moments_loses_and_duplicates_nothing(tmp_path, marker):
    run = ChaosRun(str(tmp_path), marker, kills=8, jobs=9, seed=7)
    try:
        result = run.run()
    finally:
        run.close()
    print(result)
    assert result["kills"] == 8 and result["jobs"] == 9
    assert result["problems"] == []
