"""Local runs (issue 18, Must 3, 4 and the slots warning of 10): where a local launch keeps its job, which
runs a listing shows and which a new launch removes, what a bare `python` means, and when slots exceed the
cores. Pure rules on values; the run dirs on real (temporary) directories with real locks."""

import argparse
import fcntl
import os

import pytest

from cluster.client import job_selection, local_commands, local_run_calls, local_runs
from cluster.client.launch import slots_warning
from cluster.shared.commands import other_venv_warning, with_launcher_python
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist.errors import UnsafePathError, UserError


def test_the_state_dir_is_xdg_state_home_when_absolute_else_local_state_in_home():
    assert local_runs.state_home({"XDG_STATE_HOME": "/s"}, "/home/u") == "/s/tfdist"
    assert local_runs.state_home({"XDG_STATE_HOME": "rel"}, "/home/u") == "/home/u/.local/state/tfdist"
    assert local_runs.state_home({}, "/home/u") == "/home/u/.local/state/tfdist"


def test_run_numbers_and_job_references():
    assert local_runs.run_numbers(["3", "10", "1", "07", "0", "x", "job.pb", "-2"]) == [1, 3, 10]
    assert [local_runs.number_of(r) for r in ("7", "7-1a2b", "x-7", "0", "")] == [7, 7, None, None, None]


def test_a_new_launch_removes_only_ended_runs_older_than_the_newest_kept():
    runs = [(1, "SUCCEEDED"), (2, "PAUSED"), (3, None), (4, "FAILED"), (5, "CANCELED"), (6, "RUNNING"),
            (7, "SUCCEEDED")]
    assert local_runs.to_prune(runs, keep=2) == [1, 4, 5]  # 2 paused, 3 held or unknown, 6 active: kept
    assert local_runs.to_prune(runs, keep=7) == []


def test_a_stored_job_its_launch_left_running_says_so_and_a_settled_one_is_as_stored():
    running = pb.Job(id="4-ab12", state="RUNNING", message="")
    shown = local_run_calls.orphaned(running)
    assert shown.state == "RUNNING" and "launch ended without recording" in shown.message
    assert "`tfdist cancel 4-ab12`" in shown.message and running.message == ""  # a copy
    paused = pb.Job(id="5-ab12", state="PAUSED", message="paused at step 8")
    assert local_run_calls.orphaned(paused) is paused


def _job(number, state):
    return pb.Job(id=f"{number}-abcd", state=state)


def test_the_merged_listing_selects_as_a_coordinator_does_oldest_first():
    jobs = [_job(n, "SUCCEEDED") for n in range(30, 0, -1)] + [_job(31, "RUNNING"), _job(2, "PAUSED")]
    jobs = [j for j in jobs if j.id != "2-abcd" or j.state == "PAUSED"]
    shown, left_out = job_selection.select(jobs, (), None, False)
    assert [j.id for j in shown] == ["2-abcd"] + [f"{n}-abcd" for n in range(11, 32)]  # active + newest 20 finished
    assert left_out == 9  # finished 1, 3..10
    shown, left_out = job_selection.select(jobs, ("SUCCEEDED",), 3, False)
    assert [j.id for j in shown] == ["28-abcd", "29-abcd", "30-abcd"] and left_out == 26
    shown, left_out = job_selection.select(jobs, (), None, True)
    assert len(shown) == 31 and left_out == 0


def test_a_bare_python_means_the_launchers_python():
    me = "/opt/venv/bin/python"
    assert with_launcher_python(["python", "train.py", "--x"], me) == [me, "train.py", "--x"]
    assert with_launcher_python(["python3", "-m", "m"], me) == [me, "-m", "m"]
    for kept in (["python3.11", "t.py"], ["/usr/bin/python", "t.py"], ["train.py"], ["bash", "python"], []):
        assert with_launcher_python(kept, me) == kept


def test_an_activated_venv_that_is_not_the_launchers_is_named_in_a_warning(tmp_path):
    launcher = str(tmp_path / "a" / "bin" / "python")
    assert other_venv_warning(["python", "t.py"], launcher, str(tmp_path / "a")) is None  # the same venv
    assert other_venv_warning(["python", "t.py"], launcher, None) is None  # none activated
    assert other_venv_warning(["./run.sh"], launcher, str(tmp_path / "b")) is None  # no bare python
    line = other_venv_warning(["python3", "t.py"], launcher, str(tmp_path / "b"))
    assert launcher in line and str(tmp_path / "b" / "bin" / "python3") in line


def test_slots_above_the_cores_are_one_warning_naming_both():
    assert slots_warning(2, 2) is None and slots_warning(1, 8) is None
    line = slots_warning(16, 2)
    assert "--slots 16" in line and "2 CPU cores" in line and "--slots 2 or fewer" in line
    assert "\n" not in line


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "tfdist" / "local"


def test_runs_are_private_numbered_dirs_in_the_users_state(state):
    first, second = local_runs.new_run(), local_runs.new_run()
    assert (first.number, second.number) == (1, 2) and first.path == str(state / "1")
    for path in (state.parent, state, state / "1"):
        assert os.stat(path).st_mode & 0o777 == 0o700
    os.mkdir(state / "3", 0o700)  # another launch took 3 between the listing and the mkdir
    assert local_runs.new_run().number == 4
    assert [r.number for r in local_runs.all_runs()] == [1, 2, 3, 4]
    assert local_runs.find("2-beef").path == second.path and local_runs.find("9") is None


def test_a_runs_dir_open_to_others_or_a_symlink_is_refused(state, tmp_path):
    local_runs.new_run()
    os.chmod(state, 0o755)
    with pytest.raises(UnsafePathError, match="open to other users"):
        local_runs.all_runs()
    os.rename(state, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", state)
    with pytest.raises(UnsafePathError, match="symlink"):
        local_runs.new_run()


def test_the_record_round_trips_and_a_held_store_names_its_holder(state):
    run = local_runs.new_run()
    assert run.recorded() is None and run.holder() is None
    run.record([pb.Job(id="1-abcd", state="PAUSED", message="paused at step 8")])
    assert run.recorded().message == "paused at step 8" and [j.id for j in run.recorded_jobs()] == ["1-abcd"]
    fd = os.open(os.path.join(run.path, local_runs.LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, b'{"pid": %d, "host": "h"}\n' % os.getpid())
        assert run.holder() is None  # the file alone holds nothing: its holder exited
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert run.holder() == os.getpid()
    finally:
        os.close(fd)
    assert run.holder() is None


def test_a_new_launch_prunes_ended_runs_beyond_the_newest_kept(state, monkeypatch):
    states = ["SUCCEEDED", "PAUSED", None, "FAILED"]
    for number, job_state in enumerate(states, start=1):
        run = local_runs.new_run()
        if job_state:
            run.record([pb.Job(id=f"{number}-abcd", state=job_state)])
    assert [r.number for r in local_runs.all_runs()] == [1, 2, 3, 4]
    monkeypatch.setattr(local_runs, "KEEP_RUNS", 2)
    assert local_runs.new_run().number == 5
    assert [r.number for r in local_runs.all_runs()] == [2, 3, 4, 5]  # 1 ended; 2 paused, 3 unknown: kept


def test_doctor_checks_the_state_dirs_local_runs_live_in(state):
    from cluster.client import doctor

    local_runs.new_run()
    os.chmod(state.parent, 0o755)
    found = {d.what: d for d in doctor.probe_dirs()}
    assert found["state dir"].path == str(state.parent) and "open to other users" in found["state dir"].problem
    assert found["local runs"].path == str(state) and found["local runs"].problem == ""


def test_a_run_holds_the_numbers_it_reserved_and_the_next_numbers_after_every_one(state):
    """A search's run reserves a number per trial it may make: its trials are found in it by id or number,
    listed from its record, and the next run numbers after them."""
    search, single = local_runs.new_run(jobs=3), local_runs.new_run()
    assert (search.number, search.last, single.number, single.last) == (1, 3, 4, 4)
    assert [(r.number, r.last) for r in local_runs.all_runs()] == [(1, 3), (4, 4)]
    assert [local_runs.find(ref).number for ref in ("1", "2-beef", "3", "4-abcd")] == [1, 1, 1, 4]
    assert local_runs.find("5") is None
    trials = [pb.Job(id=f"{n}-ab12", state="PAUSED" if n == 2 else "SUCCEEDED",
                     spec=pb.JobSpec(experiment_id="e1-ff", trial=n)) for n in (1, 2, 3)]
    search.record(trials)
    assert local_run_calls.jobs_of(search) == trials and local_run_calls.job_in(search, "2").id == "2-ab12"
    assert local_run_calls.job_in(search, "2-ffff") is None and search.recorded().id == "3-ab12"
    with pytest.raises(UserError, match=r"^job 2-ab12 is trial 2 of experiment e1-ff, whose launch ended: its "
                                        r"trials ran only inside that launch"):
        local_commands.resume(None, argparse.Namespace(job_id="2"))  # the experiment's, not a job of its own


def test_runs_made_before_numbers_were_reserved_are_found_by_the_ids_their_records_name(state):
    """A search's run made before runs reserved numbers (no numbers.json) numbered its trials into later runs'
    numbers: it holds its recorded trials' numbers, a full id is found in the run whose record names it, and a
    new run numbers after them all. Its job.pb (the last trial only) is no listing of its jobs."""
    old = [local_runs.new_run() for _ in range(3)]
    for run in old:
        os.unlink(os.path.join(run.path, local_runs.NUMBERS))
    old[0].record_experiments([pb.Experiment(id="e1-ff", trials=[pb.Trial(number=n, job_id=f"{n}-ab12")
                                                                  for n in (1, 2, 3)])])
    with open(os.path.join(old[0].path, local_runs.RECORD), "wb") as f:
        f.write(pb.Job(id="3-ab12", state="SUCCEEDED", spec=pb.JobSpec(experiment_id="e1-ff")).SerializeToString())
    old[1].record([pb.Job(id="2-cd34", state="SUCCEEDED")])
    assert [(r.number, r.last) for r in local_runs.all_runs()] == [(1, 3), (2, 2), (3, 3)]
    assert old[0].recorded_jobs() is None and old[0].recorded().id == "3-ab12"
    assert local_runs.find("2-ab12").number == 1 and local_runs.find("2-cd34").number == 2
    assert local_runs.find("2").number == 2  # a number alone: the run numbered so, as before
    assert local_runs.new_run().number == 4


def test_concurrent_launches_reserve_apart(state):
    """Launches from several terminals at once: each takes its numbers under the runs dir's lock, after every
    reservation written before it."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        runs = list(pool.map(lambda jobs: local_runs.new_run(jobs=jobs), [3, 1, 2, 5, 1, 4, 2, 1]))
    held = sorted(n for run in runs for n in range(run.number, run.last + 1))
    assert held == list(range(1, 20))


def test_a_reader_waits_for_a_run_its_launch_is_starting_instead_of_taking_its_store(state, monkeypatch):
    """A launch reserves its run, then opens its store. `tfdist metrics 1` asked between the two opened the store
    itself, taking the run's lock first, and the launch then failed: "state dir .../local/1 is in use by the
    coordinator pid N" (tests/integration/test_determined.py in fresh-clone runs)."""
    import threading

    from cluster.coordinator.server import CoordinatorServer
    from cluster.shared.auth import publish_local, unpublish_local, user_name

    run = local_runs.new_run()
    looks, started = [], local_runs.LocalRun.started
    monkeypatch.setattr(local_runs.LocalRun, "started", lambda self: looks.append(1) or started(self))
    answers = []

    def reader():
        with local_run_calls.connect(run) as connection:
            answers.append(connection.live)

    thread = threading.Thread(target=reader)
    thread.start()
    for _ in range(10_000):  # bounded: the reader has looked twice and waits
        if len(looks) >= 2 or answers:
            break
        threading.Event().wait(0.001)
    launch = CoordinatorServer(run.path, "127.0.0.1:0")  # the launch's store: not taken by the reader
    published = publish_local(launch.issue("admin", user_name()), launch.port)
    try:
        launch.start()
        thread.join(30)
        assert answers == [True]  # it asked the launch's own coordinator
    finally:
        unpublish_local(published)
        launch.stop(0.2)


def test_a_run_whose_launch_is_alive_but_opens_no_store_is_said_in_one_line(state, monkeypatch):
    from tfdist.errors import UnavailableError

    monkeypatch.setattr(local_run_calls, "BUSY_WAIT", 0.3)
    run = local_runs.new_run()  # this process is its launch: alive
    with pytest.raises(UnavailableError, match="local run 1 has not started: its launch opened no state"):
        with local_run_calls.connect(run):
            pass


def test_a_run_whose_launch_died_before_it_opened_its_store_holds_no_job_and_goes(state, monkeypatch):
    """A launch killed between reserving its run and opening its store left a run that made every `tfdist jobs`
    wait and then fail, and that nothing ever removed (review of issue 49's change)."""
    import json
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    run = local_runs.new_run()
    numbers = os.path.join(run.path, local_runs.NUMBERS)
    said = json.loads(open(numbers).read())
    os.unlink(numbers)
    local_runs.write_private(numbers, json.dumps({**said, "launcher": int(dead.stdout)}).encode())
    run = local_runs.all_runs()[0]
    assert run.abandoned() and local_run_calls.jobs_of(run) == []  # at once: nothing waits for it
    with pytest.raises(local_run_calls.NotStartedError, match="local run 1 holds no job"):
        with local_run_calls.connect(run):
            pass
    monkeypatch.setattr(local_runs, "KEEP_RUNS", 1)
    local_runs.new_run()  # run 2: this process is its launch, alive
    local_runs.new_run()  # a launch prunes the runs beyond the newest kept: the dead launch's goes, as an ended one
    assert [r.number for r in local_runs.all_runs()] == [2, 3]


def test_a_look_at_who_holds_a_run_never_makes_its_launch_fail(state, monkeypatch):
    """LocalRun.holder takes the run's lock shared for a moment; a launch taking it exclusive at that moment was
    refused ("state dir ... is in use") without a second try (review of issue 49's change)."""
    import threading

    from cluster.coordinator.store import state_file

    run = local_runs.new_run()
    fd = os.open(os.path.join(run.path, local_runs.LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)  # a look in progress
    refused, real, taken = threading.Event(), fcntl.flock, []

    def flock(f, how):
        try:
            return real(f, how)
        except BlockingIOError:
            refused.set()
            raise
    monkeypatch.setattr(fcntl, "flock", flock)
    launch = threading.Thread(target=lambda: taken.append(state_file.StateDirLock(run.path)))
    launch.start()
    try:
        assert refused.wait(10)  # the launch met the look
    finally:
        os.close(fd)  # the look ends
    launch.join(10)
    assert taken, "the launch's lock was refused"
    taken[0].release()
