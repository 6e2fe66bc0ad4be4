"""The dashboard's diagnose view on a real run: a real coordinator and agent, `tfdist diagnose` run by the CLI
against them, each variant a real job whose workers (a stand-in for a training script, without TensorFlow:
each rank's pace is set per variant, rank 1 slow on its own) send their timing as tfdist's worker side does,
through the agent's metric shipping into the coordinator's SQLite. The dashboard's API, over HTTP behind its
login, gives the same verdict as the CLI's --json, with the chart's numbers; while the last variant waits, it
shows what was measured so far; headless Chromium draws the run's page (the bars, the straggler's bar
marked, the verdict, the fixes), the list of runs and the link on a variant's job page."""

import http.client
import json
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import cli_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
BOUND = 60  # seconds any one wait may take on a loaded machine

WORKER = """\
import os, pathlib, sys, time
from tfdist import diagnose

plan = diagnose.plan_from_env()
rank = int(os.environ["TFDIST_RANK"])
# Seconds a step takes per rank: the gang waits for rank 1, which is slow on its own (a straggler).
PACE = {"baseline": (0.06, 0.06), "no_communication": (0.02, 0.05), "synthetic_input": (0.055, 0.055)}
if plan.variant == "synthetic_input":  # the test looks at the run half-measured, then lets this one finish
    while not pathlib.Path(sys.argv[1]).exists():
        time.sleep(0.1)
timing = diagnose.Timing(plan)
timing.applied, timing.why, timing.batch, timing.params = True, "", 64, 10000  # what `fit` would have shown
timing.keras_fit = True
end = 0.0
for step in range(plan.warmup + plan.steps + 1):
    end += PACE[plan.variant][rank]
    timing.step_done(step, end)
diagnose.send(timing)
time.sleep(120)  # until the runner cancels the variant, as it does a training job
"""


def ask(port, path, cookie=""):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path, headers={"Host": f"127.0.0.1:{port}", "Cookie": cookie})
        answer = connection.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read().decode()
    finally:
        connection.close()


def until(look, what, timeout=BOUND):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = look()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_diagnose_run_in_the_dashboard(tmp_path, local_cluster, marker):
    from cluster.client.dashboard import server as http_server
    from cluster.client.dashboard.api import Api
    from cluster.shared.auth import find_credential
    from cluster.shared.rpc import Client

    started = time.monotonic()
    cluster = local_cluster()
    cluster.start_agent("n1", "--slots", "2")
    (tmp_path / "w.py").write_text(WORKER)
    gate_file = tmp_path / "go"
    cluster.wait_agents("n1")
    address, credential = find_credential(cluster.address, None)
    client = Client(address, credential, timeout=5.0)
    server, gate = http_server.serve(Api(client, credential.principal), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    port = server.server_address[1]
    diagnose = subprocess.Popen(
        [sys.executable, "-m", "cluster.client.cli", "diagnose", "--coordinator", cluster.address, "--slots", "2",
         "--steps", "5", "--warmup", "2", "--json", "--", "python", str(tmp_path / "w.py"), str(gate_file)],
        cwd=str(tmp_path), env=cli_env(marker), stdout=subprocess.PIPE, stderr=open(tmp_path / "diagnose.log", "w"),
        text=True)
    browser = None
    try:
        assert ask(port, "/api/diagnoses")[0] == 401  # behind the login, as the rest of the dashboard
        status, headers, _ = ask(port, f"/login?token={gate.token}")
        assert status == 303
        cookie = headers["Set-Cookie"].split(";")[0]

        def listed():
            status, _, body = ask(port, "/api/diagnoses", cookie)
            assert status == 200, body
            return json.loads(body)["diagnoses"]

        # Half-way: baseline and no_communication measured, synthetic_input's job waiting for the gate file.
        def half_way():
            runs = listed()
            pending = runs and [v for v in runs[0]["variants"] if v["pending"] and v["job"]]
            return runs[0] if pending and pending[0]["name"] == "synthetic_input" else None

        so_far = until(half_way, "the dashboard to show the run with synthetic_input still measuring")
        run = so_far["run"]
        assert so_far["state"] == "RUNNING" and not so_far["final"] and so_far["verdict"] == "straggler"
        assert so_far["summary"].startswith("straggler-bound: a step takes 60 ms"), so_far["summary"]
        assert so_far["shares"]["input"] is None
        assert so_far["chart"]["step_time"][-1] == {"variant": "synthetic_input", "job": so_far["variants"][-1]["job"],
                                                    "seconds": None, "note": "running: 0 rank(s) timed so far"}
        # The page of the run half-way (headless Chromium, as the dashboard's own browser test drives it): the
        # bars measured so far, the pending variant said, the verdict so far.
        from tests.integration.test_dashboard import Browser, shoot

        browser = Browser(tmp_path / "profile", tmp_path / "chromedriver.log", marker)
        browser.driver.get(f"http://127.0.0.1:{port}/login?token={gate.token}")
        browser.driver.get(f"http://127.0.0.1:{port}/diagnoses/{run}")
        browser.wait(lambda d: len(browser.find("#variant-chart rect.bar")) == 2, "the step-time bars measured so far")
        assert browser.driver.execute_script(  # SVG text has no innerText
            'return document.querySelector(\'#variant-chart text[data-bar="synthetic_input"]\').textContent;'
        ) == "running: 0 rank(s) timed so far"
        assert browser.text("#diagnose-summary").strip().startswith("so far: straggler-bound")
        shoot(browser, tmp_path, "diagnose-running")

        gate_file.write_text("go")
        out, _ = diagnose.communicate(timeout=BOUND)
        assert diagnose.returncode == 0, (tmp_path / "diagnose.log").read_text()
        cli = json.loads(out)

        # The run's own answer (once the dashboard's shared reads, a second old at most, see the ended jobs):
        # the CLI's verdict, word for word, and the chart's numbers.
        def final():
            status, _, body = ask(port, f"/api/diagnoses/{run}", cookie)
            assert status == 200, body
            return json.loads(body) if json.loads(body)["final"] else None

        shown = until(final, f"diagnose {run} to be final in the dashboard")
        assert shown["final"] and shown["state"] == "ENDED" and shown["name"] == "w"
        for key in ("verdict", "summary", "fixes", "shares", "straggler", "bandwidth", "mode", "nodes", "ranks"):
            assert shown[key] == cli[key], key
        assert shown["verdict"] == "straggler" and shown["straggler"] == {"rank": 1, "node": "n1",
                                                                          "slower_by": pytest.approx(1.5)}
        ran = [v for v in cli["variants"] if v["job"]]  # the CLI also lists one_node, skipped: one node
        assert [{k: v[k] for k in ran[0]} for v in shown["variants"]] == ran
        assert [(b["variant"], b["seconds"]) for b in shown["chart"]["step_time"]] == [
            ("baseline", pytest.approx(0.06)), ("no_communication", pytest.approx(0.05)),
            ("synthetic_input", pytest.approx(0.055))]
        assert [(r["rank"], r["node"], r["seconds"], r["straggler"]) for r in shown["chart"]["rank_step_time"]] == [
            (0, "n1", pytest.approx(0.02), False), (1, "n1", pytest.approx(0.05), True)]
        assert ask(port, "/api/diagnoses/no-such-run", cookie)[0] == 404

        # The page, polling while the run went on, now draws every variant.
        browser.wait(lambda d: len(browser.find("#variant-chart rect.bar")) == 3, "the step-time bars of 3 variants")
        assert browser.attributes("#rank-chart rect.bar.straggler", "data-bar") == ["rank-1"]
        assert len(browser.find("#rank-chart rect.bar")) == 2
        assert browser.text("#diagnose-summary").strip() == cli["summary"]
        assert browser.text(".verdict .badge") == "straggler"
        assert "rank 1 on n1" in browser.text("#fixes") and len(browser.find("#fixes li")) == len(cli["fixes"])
        straggling = round(cli["shares"]["straggler"] * 100)
        assert browser.text('#shares tr[data-share="straggler"]').split()[-1] == f"{straggling}%"
        shoot(browser, tmp_path, "diagnose")
        baseline = browser.attributes('#variant-chart rect[data-bar="baseline"]', "width")[0]
        apart = browser.attributes('#variant-chart rect[data-bar="no_communication"]', "width")[0]
        assert float(baseline) > float(apart) > 0
        browser.driver.get(f"http://127.0.0.1:{port}/diagnoses")
        browser.wait(lambda d: browser.find(f'#diagnoses tr[data-run="{run}"] .badge'), "the run in the list")
        assert "straggler-bound" in browser.text(f'#diagnoses tr[data-run="{run}"]')
        shoot(browser, tmp_path, "diagnoses")
        browser.driver.get(f"http://127.0.0.1:{port}/jobs/{cli['variants'][0]['job']}")
        browser.wait(lambda d: browser.attributes("#diagnose-link", "href") == [f"/diagnoses/{run}"],
                     "the baseline job's page to link its diagnose")
    finally:
        if browser is not None:
            browser.close()
        if diagnose.poll() is None:
            diagnose.kill()
            diagnose.wait(timeout=10)
        server.shutdown()
        server.server_close()
        client.close()
    print(f"diagnose in the dashboard: {time.monotonic() - started:.1f} s")

