"""The engine contract suite's scenarios, written once against a `Driver` (how a test submits, reads and cancels
a job), so that the same scenarios run against every engine whatever reaches it: the local, agents and minimal
engines through a coordinator in the test's process (tests/integration/test_engine_contract.py), the
Kubernetes engine through the shipped coordinator's pod and the `tfdist` CLI, its workers in real containers on
the real node (tests/kubernetes/test_real_node.py), and on a KWOK node, where nothing runs in a pod, the one
scenario that needs no worker (`placed_then_canceled`, tests/kubernetes/test_engine_contract_kwok.py).

Every scenario uses a gang of 2 ranks on one node of 2 slots."""

from __future__ import annotations

import time
from typing import Callable, Protocol, Sequence

from tests.conftest import wait_for
from tests.specs import flat_spec

PRINTS = "import os; print('rank', os.environ['TFDIST_RANK'], 'of', os.environ['TFDIST_SIZE'], flush=True)"
SLEEPS = "import time; print('up', flush=True); time.sleep(600)"
RANK_1_FAILS = ("import os, sys, time\nprint('up', flush=True)\n"
                "if os.environ['TFDIST_RANK'] == '1': sys.exit(3)\ntime.sleep(600)")
HOLDING = ("STARTING", "RUNNING")


class Driver(Protocol):
    patience: float  # seconds a gang may take to start (a pod's image pulled and started is slower)

    def submit(self, script: str) -> str:
        """A job of 2 ranks, each running the Python source `script`: its id."""

    def state(self, job_id: str) -> str: ...

    def outcome(self, job_id: str) -> str:
        """Why the job ended, as its users read it."""

    def lines(self, job_id: str) -> list[str]:
        """The workers' lines, sorted, without tfdist's own."""

    def exits(self, job_id: str) -> list[tuple[int, int]]:
        """(rank, exit code) of the current run, sorted."""

    def placed(self, job_id: str) -> bool:
        """The job holds its node(s)."""

    def cancel(self, job_id: str) -> str:
        """The job's state after the cancel."""

    def free(self) -> bool:
        """No job holds the engine's node(s), and nothing of any job is left where the engine runs them."""


def placed_gang_runs_and_its_ranks_output_and_exits_come_back(driver: Driver) -> None:
    job_id = driver.submit(PRINTS)
    wait_for(lambda: driver.state(job_id) == "SUCCEEDED", "the job to succeed", timeout=driver.patience,
             alive=lambda: driver.state(job_id) in (*HOLDING, "QUEUED", "SUCCEEDED"), logs=lambda: driver.outcome(job_id))
    wait_for(lambda: driver.lines(job_id) == ["rank 0 of 2", "rank 1 of 2"], "both ranks' lines", timeout=60,
             logs=lambda: str(driver.lines(job_id)))
    assert driver.exits(job_id) == [(0, 0), (1, 0)]
    wait_for(driver.free, "the node let go of the job", timeout=120)


def failed_rank_fails_the_gang_naming_it_and_the_others_stop(driver: Driver) -> None:
    job_id = driver.submit(RANK_1_FAILS)
    wait_for(lambda: driver.state(job_id) == "FAILED", "the job to fail", timeout=driver.patience,
             logs=lambda: driver.outcome(job_id))
    outcome = driver.outcome(job_id)
    assert "rank 1" in outcome and "code 3" in outcome, outcome
    wait_for(driver.free, "the node let go of the job (rank 0 stopped)", timeout=120)


def canceled_gang_s_workers_stop_and_its_node_is_free(driver: Driver) -> None:
    job_id = driver.submit(SLEEPS)
    wait_for(lambda: driver.lines(job_id) == ["up", "up"], "both workers up", timeout=driver.patience,
             logs=lambda: driver.outcome(job_id))
    assert driver.cancel(job_id) == "CANCELED"
    wait_for(driver.free, "the node let go of the canceled job (its workers stopped)", timeout=120)
    assert driver.state(job_id) == "CANCELED"


def placed_then_canceled(driver: Driver) -> None:
    """The scenario every engine passes, whatever runs its workers (a KWOK node runs none): a job is placed,
    canceled as soon as it is, ends CANCELED, and its nodes are free again with nothing of it left."""
    job_id = driver.submit(SLEEPS)
    wait_for(lambda: driver.placed(job_id), "the job placed", timeout=driver.patience,
             logs=lambda: driver.outcome(job_id))
    assert driver.cancel(job_id) == "CANCELED"
    wait_for(driver.free, "its nodes free, nothing of it left", timeout=120)
    assert driver.state(job_id) == "CANCELED"


class InProcess:
    """A driver over a coordinator core in the test's process (real SQLite; the engine's nodes real or KWOK's).
    `python`: the workers' interpreter where they run; `gone()`: nothing of a job left outside the core."""

    def __init__(self, core, python: Sequence[str], slots: int = 2, working_dir: str = "", patience: float = 120.0,
                 gone: Callable[[], bool] = lambda: True):
        self.core, self.python, self.slots, self.working_dir = core, tuple(python), slots, working_dir
        self.patience, self.gone = patience, gone

    def submit(self, script: str) -> str:
        spec = flat_spec((*self.python, "-c", script), slots=self.slots, working_dir=self.working_dir)
        return self.core.submit(spec, now=time.time())[0]

    def state(self, job_id: str) -> str:
        return self.core.store.job(job_id).state.value

    def outcome(self, job_id: str) -> str:
        job = self.core.store.job(job_id)
        return f"{job.state.value}: {job.message}"

    def lines(self, job_id: str) -> list[str]:
        return sorted(line.text for line in self.core.store.logs(job_id) if line.rank >= 0 and not line.text.startswith("tfdist"))

    def exits(self, job_id: str) -> list[tuple[int, int]]:
        return sorted((e.rank, e.exit_code) for e in self.core.lifecycle.exits(job_id))

    def placed(self, job_id: str) -> bool:
        return self.state(job_id) in HOLDING and bool(self.core.allocs.of_job(job_id))

    def cancel(self, job_id: str) -> str:
        return self.core.cancel(job_id, time.time())

    def free(self) -> bool:
        return not self.core.allocs.all() and self.gone()


SCENARIOS = (placed_gang_runs_and_its_ranks_output_and_exits_come_back,
             failed_rank_fails_the_gang_naming_it_and_the_others_stop,
             canceled_gang_s_workers_stop_and_its_node_is_free, placed_then_canceled)
