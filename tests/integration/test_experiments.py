"""Experiments on a cluster: Determined's searcher config as written, each trial a gang job on real agents, seen
in the CLI, its JSON and the dashboard; and a coordinator killed with -9 in the middle of a search. In a local
launch: tests/integration/test_experiments_local.py."""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import REPO, LocalCluster, cli_env
from tests.unit.test_json_output import valid

pytestmark = [pytest.mark.timeout(300)]
TRIAL = os.path.join(REPO, "tests", "integration", "workers", "search_trial.py")


def write_config(tmp_path, searcher, slots=1, mode="mwms", entrypoint=TRIAL, slow=0.1, **extra):
    config = {"name": "search", "entrypoint": f"{sys.executable} {entrypoint}", "searcher": searcher,
              "resources": {"slots_per_trial": slots}, "distribution": {"mode": mode},
              "hyperparameters": {"learning_rate": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
                                  "global_batch_size": 8},
              "checkpoint_storage": str(tmp_path / "checkpoints"), "reproducibility": {"experiment_seed": 3},
              "environment": {"variables": [f"OUT={tmp_path}", f"SLOW={slow}"]}, **extra}
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def trained_steps(tmp_path, job_id):
    """(attempt, step) of every step the trial's chief trained, in order."""
    path = tmp_path / f"steps-{job_id}"
    return [tuple(map(int, line.split())) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_determined_random_search_runs_its_trials_as_gangs_on_a_cluster(tmp_path, local_cluster, marker):
    # Measured 1: `searcher: random` with a `log` learning rate was refused; now its trials are 2-process MWMS
    # gangs on whole nodes, at most max_concurrent_trials at once.
    cluster = local_cluster()
    for name in ("n1", "n2"):
        cluster.start_agent(name, "--slots", "2")
    cluster.wait_agents("n1", "n2")
    searcher = {"name": "random", "metric": "val_loss", "max_trials": 3, "max_concurrent_trials": 2,
                "max_length": {"batches": 3}}
    result = cluster.cli("launch", "--config", write_config(tmp_path, searcher, slots=2), timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert " COMPLETED: best: trial " in result.stdout and "3 of 3 trials made, 3 ended" in result.stdout

    shown = valid(cluster.json("experiment", "e1"), "tfdist experiment ID --json")  # as docs/json.md says
    trials = shown["trials"]
    assert [t["trial"] for t in trials] == [1, 2, 3] and {t["state"] for t in trials} == {"SUCCEEDED"}
    rates = [t["hyperparameters"]["learning_rate"] for t in trials]
    assert all(1e-4 <= r <= 0.1 for r in rates) and len(set(rates)) == 3
    best = min(trials, key=lambda t: t["best"])
    assert shown["state"] == "COMPLETED" and shown["best_trial"]["trial"] == best["trial"]
    assert shown["best_trial"]["checkpoint"]["step"] == 2  # where its weights are (saved every 2 steps)
    for trial in trials:
        job = cluster.job(trial["job_id"])
        assert len(job["placement"]) == 1 and job["placement"][0]["slots"] == 2  # a whole node each
        assert sorted(e["rank"] for e in job["exits"]) == [0, 1]
    listed = valid(cluster.json("experiments"), "tfdist experiments --json")["experiments"]
    assert [(e["id"], e["state"], e["trials_made"]) for e in listed] == [(shown["id"], "COMPLETED", 3)]
    refused = cluster.cli("resume", "e1")
    assert refused.returncode != 0 and "already ended (COMPLETED)" in refused.stderr
    see_in_a_browser(tmp_path, cluster, marker, shown)


def see_in_a_browser(tmp_path, cluster, marker, shown):
    """The dashboard's experiment pages in headless Chromium: the list, the trials table, one curve a trial."""
    from tests.integration.test_dashboard import Browser, read_line, shoot

    dashboard = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "dashboard", "--port", "0",
                                  "--credentials", admin_credential(tmp_path, cluster)],
                                 env=cli_env(marker, **cluster.env), stdout=subprocess.PIPE,
                                 stderr=open(tmp_path / "dashboard.log", "w"))
    browser = None
    try:
        read_line(dashboard, "tfdist dashboard's banner")
        login = read_line(dashboard, "tfdist dashboard's login link").split("log in with ")[1].strip()
        base = login.split("/login")[0]
        browser = Browser(tmp_path / "profile", tmp_path / "chromedriver.log", marker)
        browser.driver.get(login)
        browser.driver.get(f"{base}/experiments")
        browser.wait(lambda d: browser.find(f'#experiments tr[data-experiment="{shown["id"]}"] .badge'),
                     "the experiments page to list the experiment")
        assert "COMPLETED" in browser.text(f'#experiments tr[data-experiment="{shown["id"]}"]')
        browser.driver.get(f"{base}/experiments/{shown['id']}")
        browser.wait(lambda d: len(browser.find("#trials tbody tr")) == 3, "the trials table's three rows")
        best = browser.text(f'#trials tr[data-trial="{shown["best_trial"]["trial"]}"]')
        assert "★" in best and "SUCCEEDED" in best and "learning_rate=" in best, best
        browser.wait(lambda d: len([p for p in browser.attributes('#charts figure[data-metric="val_loss"] path.series',
                                                                  "d") if p.count("L") >= 2]) == 3,
                     "one val_loss curve a trial, each with its points")
        assert browser.attributes("#charts path.series", "data-series") == [f"trial {n}" for n in range(1, 4)]
        shoot(browser, tmp_path, "experiment")
    finally:
        if browser is not None:
            browser.close()
        dashboard.send_signal(signal.SIGTERM)
        dashboard.wait(timeout=10)


def admin_credential(tmp_path, cluster):
    from cluster.shared.credentials import Authority

    path = str(tmp_path / "admin.json")
    Authority.load(os.path.join(cluster.state_dir, "credentials")).issue("admin", "root", cluster.address).save(path)
    return path


def state_of(cluster, experiment_id):
    """The experiment's state, or None while the coordinator (just restarted) does not answer yet."""
    answer = cluster.cli("experiment", experiment_id, "--json")
    return json.loads(answer.stdout)["state"] if answer.returncode == 0 else None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(360)
def test_kill_9_of_the_coordinator_mid_search_loses_no_trial_and_trains_no_step_twice(tmp_path, marker):
    listen = f"127.0.0.1:{_free_port()}"
    cluster = LocalCluster(tmp_path, marker, listen=listen)
    try:
        cluster.start_agent("n1", "--slots", "2")
        cluster.wait_agents("n1")
        searcher = {"name": "adaptive_asha", "metric": "val_loss", "max_trials": 4, "max_length": {"batches": 8},
                    "max_rungs": 3, "divisor": 2, "mode": "aggressive", "max_concurrent_trials": 2}
        # 0.5 s a step: a trial that loses its first rung (2 batches) has 3 s to pause before its end (8), kills
        # included; at 0.25 s one sometimes trained to its end first, and then no trial reached the top rung.
        submitted = cluster.cli("launch", "--detach", "--config", write_config(tmp_path, searcher, slow=0.5))
        assert submitted.returncode == 0, submitted.stderr
        experiment_id = submitted.stdout.strip()
        chance = random.Random(5)
        kills = 0
        for _ in range(4):
            time.sleep(chance.uniform(1.0, 3.0))  # a random moment of the search, not a wait on a condition
            cluster.coordinator.kill()
            cluster.coordinator.wait()
            kills += 1
            cluster.start_coordinator(listen)
        cluster.wait_for(lambda: state_of(cluster, experiment_id) in ("COMPLETED", "FAILED", "CANCELED"),
                         "the experiment to end after the kills", timeout=240)
        shown = cluster.json("experiment", experiment_id)
        trials = shown["trials"]
        assert shown["state"] == "COMPLETED" and kills == 4, shown
        assert [t["trial"] for t in trials] == list(range(1, 5)), trials
        jobs = [t["job_id"] for t in trials]
        ended = {j: (cluster.job(j)["state"], cluster.job(j)["outcome"]) for j in jobs}
        assert len(set(jobs)) == 4 and all(state in ("SUCCEEDED", "CANCELED") for state, _ in ended.values()), ended
        listed = [j for j in cluster.json("jobs", "--all")["jobs"] if j["name"].startswith("search.t")]
        assert sorted(j["id"] for j in listed) == sorted(jobs)  # no trial made twice
        for job_id in jobs:
            steps = [step for _, step in trained_steps(tmp_path, job_id)]
            assert steps == sorted(set(steps)) and steps[:1] == [1], (job_id, steps)  # each step once, in order
        winners = [t for t in trials if t["rung"] == 2]
        summary = [(t["trial"], t["state"], t["rung"], t.get("why"), trained_steps(tmp_path, t["job_id"])[-1:])
                   for t in trials]
        assert winners and all(max(s for _, s in trained_steps(tmp_path, t["job_id"])) == 8 for t in winners), summary
    finally:
        cluster.close()
