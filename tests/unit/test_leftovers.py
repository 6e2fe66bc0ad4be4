"""A dead agent's leftovers: its recorded process groups are killed, but only processes of that job, and
never those of an agent still running."""

import json
import os
import subprocess
import sys

from cluster.agent.leftovers import GroupsFile, dead_agents_groups, kill_leftovers, process_alive
from tfdist import envvars


def _sleeper(job_id):
    env = {**os.environ, envvars.JOB_ID: job_id}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env, start_new_session=True)


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_groups_file_is_written_and_removed_when_nothing_runs(tmp_path):
    groups = GroupsFile("a/b", str(tmp_path), pid=123)
    groups.save({"j": [5, 6]})
    assert os.path.basename(groups.path) == "a_b.123.groups.json"
    assert json.loads(open(groups.path).read()) == {"j": [5, 6]}
    groups.save({})
    assert not os.path.exists(groups.path)


def test_a_dead_agents_workers_of_that_job_are_killed_and_others_left(tmp_path):
    mine, other_job, alive_agents = _sleeper("j1"), _sleeper("j2"), _sleeper("j3")
    try:
        dead = _dead_pid()
        GroupsFile("n1", str(tmp_path), pid=dead).save({"j1": [mine.pid], "j9": [other_job.pid]})
        GroupsFile("n1", str(tmp_path), pid=os.getpid()).save({"j3": [alive_agents.pid]})  # a running agent
        GroupsFile("n2", str(tmp_path), pid=dead).save({"j2": [other_job.pid]})  # another agent's name
        assert not process_alive(dead)
        assert kill_leftovers(str(tmp_path), "n1") == [mine.pid]
        assert mine.wait(timeout=10) == -9
        assert other_job.poll() is None and alive_agents.poll() is None
        assert sorted(os.listdir(tmp_path)) == [f"n1.{os.getpid()}.groups.json", f"n2.{dead}.groups.json"]
    finally:
        for proc in (mine, other_job, alive_agents):
            proc.kill()
            proc.wait()


def test_unreadable_files_are_dropped(tmp_path):
    dead = _dead_pid()
    (tmp_path / f"n1.{dead}.groups.json").write_text("[not, json")
    (tmp_path / "n1.notapid.groups.json").write_text("{}")
    assert dead_agents_groups(str(tmp_path), "n1") == {}
    assert os.listdir(tmp_path) == ["n1.notapid.groups.json"]
