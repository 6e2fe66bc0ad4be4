"""`tfdist launch --slurm`: the pure parts (argv, script, scontrol's records, exit codes) and the follower's
logic against scripted answers of Slurm's commands (tests/slurm runs it against a real slurmctld)."""

import io
import os
import signal
import subprocess

import pytest

from cluster.client import slurm_submit as ss
from cluster.client.cli import main
from tfdist.errors import UnavailableError, UserError


def test_split_argv_takes_everything_between_slurm_and_the_double_dash():
    argv = ["launch", "--config", "e.yaml", "--slurm", "-N", "2", "--gres=gpu:1", "--", "python", "t.py", "--slurm"]
    assert ss.split_argv(argv) == (["launch", "--config", "e.yaml", "--", "python", "t.py", "--slurm"],
                                   ["-N", "2", "--gres=gpu:1"])
    assert ss.split_argv(["launch", "--", "python", "--slurm"]) == (["launch", "--", "python", "--slurm"], None)
    assert ss.split_argv(["launch", "--slurm"]) == (["launch"], [])


@pytest.mark.parametrize("options, word", [(["--nodes=2", "train.py"], "'train.py' is not an sbatch option"),
                                           (["--exclusive", "--detach"], "--detach is tfdist's option"),
                                           (["--config=x.yaml"], "--config is tfdist's option"),
                                           (["-N", "2", "--wrap=python t.py"], "--wrap would replace")])
def test_misplaced_words_among_sbatch_options_are_refused(options, word):
    with pytest.raises(UserError, match=word):
        ss.check_options(options)
    ss.check_options(["-N", "2", "--time", "10", "--exclusive", "-p", "gpu"])  # values of options pass


def test_default_options_ask_for_the_slots_only_when_nothing_sizes_the_allocation():
    assert "--ntasks=4" in ss.default_options([], name="j", slots=4)
    for sizing in (["-N", "2"], ["--nodes=2"], ["-n4"], ["--gres=gpu:2"], ["--ntasks-per-node", "2"]):
        assert not any(o.startswith("--ntasks=") for o in ss.default_options(sizing, name="j", slots=4)), sizing
    assert not any(o.startswith("--ntasks=") for o in ss.default_options([], name="j", slots=None))
    assert f"--comment={ss.MARK}" in ss.default_options([], name="j", slots=None)


def test_the_batch_script_runs_the_same_launch_quoted():
    script = ss.batch_script(["--job-name=a b"], workdir="/home/u/my dir", python="/venv/bin/python",
                             launch_argv=["launch", "--", "python", "train.py", "--lr", "$HOME;rm"])
    assert script.splitlines() == [
        "#!/bin/bash", "#SBATCH '--job-name=a b'", "# written by tfdist launch --slurm: the same launch, inside the "
        "allocation", "cd '/home/u/my dir'",
        "exec /venv/bin/python -m cluster.client.cli launch -- python train.py --lr '$HOME;rm'"]


def test_scontrol_records_and_exit_codes():
    line = ("JobId=17 JobName=my job UserId=u(1) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) "
            "Restarts=1 ExitCode=5:0 NodeList=node[1-2] StdOut=/home/u/tfdist-17.out Comment=tfdist")
    record = ss.parse_record(line)
    assert record["JobName"] == "my job" and record["NodeList"] == "node[1-2]" and record["Comment"] == "tfdist"
    job = ss.SlurmJob.from_record(record)
    assert (job.id, job.output, job.restarts, job.ended, ss.exit_code(job)) == ("17", "/home/u/tfdist-17.out", 1,
                                                                               True, 5)
    codes = {state: ss.exit_code(ss.SlurmJob("1", "", state, "", code, "", "", 0)) for state, code in
             [("COMPLETED", "0:0"), ("CANCELLED", "0:15"), ("TIMEOUT", "0:15"), ("NODE_FAIL", "0:0"),
              ("OUT_OF_MEMORY", "0:9")]}
    assert codes == {"COMPLETED": 0, "CANCELLED": 130, "TIMEOUT": 124, "NODE_FAIL": 1, "OUT_OF_MEMORY": 137}


class Slurm:
    """Scripted answers of scontrol/sbatch/scancel, and what was asked."""

    def __init__(self, states, output):
        self.states, self.output, self.calls = list(states), output, []

    def __call__(self, command, stdin=None):
        self.calls.append(command)
        if command[0] == "scontrol":
            state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
            if callable(state):
                state = state()
            if state == "DOWN":
                return subprocess.CompletedProcess(command, 1, "", "slurm_load_jobs error: Unable to contact slurm "
                                                                   "controller (connect failure)\n")
            return subprocess.CompletedProcess(command, 0, f"JobId=7 JobName=j JobState={state} Reason=None "
                                                           f"ExitCode=0:0 StdOut={self.output} NodeList=n1\n", "")
        return subprocess.CompletedProcess(command, 0, "", "")


def test_the_follower_copies_whole_lines_and_exits_with_the_jobs_code(tmp_path):
    output = tmp_path / "tfdist-7.out"

    def write(text, state):
        def step():
            with open(output, "a") as f:
                f.write(text)
            return state
        return step

    slurm = Slurm(["PENDING", write("[rank=0] a\n[rank=1] part", "RUNNING"), write("ial\n", "RUNNING"),
                   write("tail without newline", "COMPLETED")], str(output))
    out, err = io.StringIO(), io.StringIO()
    assert ss.follow("7", out=out, err=err, runner=slurm, poll=0) == 0
    assert out.getvalue() == "[rank=0] a\n[rank=1] partial\ntail without newline\n"
    assert err.getvalue().splitlines() == ["tfdist: Slurm job 7 pending in Slurm's queue",
                                           "tfdist: Slurm job 7 running on n1", "tfdist: Slurm job 7 completed"]


def test_ctrl_c_cancels_the_slurm_job_and_follows_it_to_its_end(tmp_path):
    def interrupt():
        os.kill(os.getpid(), signal.SIGINT)
        return "RUNNING"

    slurm = Slurm(["RUNNING", interrupt, "RUNNING", "CANCELLED"], str(tmp_path / "none.out"))
    err, before = io.StringIO(), signal.getsignal(signal.SIGINT)
    assert ss.follow("7", out=io.StringIO(), err=err, runner=slurm, poll=0) == 130
    assert ["scancel", "7"] in slurm.calls
    assert "tfdist: SIGINT: canceling Slurm job 7 (scancel; again to stop waiting)" in err.getvalue()
    assert signal.getsignal(signal.SIGINT) is before  # restored (SIG_IGN under a background `make`)


def test_a_controller_that_stops_answering_ends_the_follower_with_one_line(tmp_path):
    slurm = Slurm(["RUNNING", "DOWN"], str(tmp_path / "none.out"))
    with pytest.raises(UnavailableError, match=r"slurmctld did not answer for 0s .*Unable to contact slurm "
                                               r"controller.* `tfdist logs -f 7` follows it again"):
        ss.follow("7", out=io.StringIO(), err=io.StringIO(), runner=slurm, poll=0, patience=0)


def test_sbatch_refusals_are_one_line(monkeypatch):
    def refuse(command, stdin=None):
        return subprocess.CompletedProcess(command, 1, "", "allocation failure: Requested node configuration is "
                                                           "not available\n")

    with pytest.raises(ss.SbatchError) as e:
        ss.submit("#!/bin/bash\n", ["--nodes=9"], refuse)
    assert str(e.value).startswith("tfdist launch --slurm: sbatch refused the job: Requested node configuration is "
                                   "not available (sbatch options: --nodes=9);")


def test_cli_refuses_coordinator_with_slurm(capsys, tmp_path, monkeypatch):
    (tmp_path / "t.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert main(["launch", "--coordinator", "h:1", "--slurm", "-N", "2", "--", "python", "t.py"]) == 125
    assert capsys.readouterr().err == ("tfdist launch: --slurm submits to Slurm, --coordinator to a tfdist coordinator;"
                                       " give one\n")
