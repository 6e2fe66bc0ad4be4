"""`tfdist dashboard` in a real browser: Debian's headless Chromium, driven by its chromedriver through
Selenium, loads the dashboard of a real coordinator and agent while a real TensorFlow job trains and reports
metrics, with a second job (another user's) queued behind it. The browser sees the jobs table with the
queued job's waiting reason, the cluster's node, the running job's live logs and a metric curve (an SVG
path), and the owner's cancel button stops the job; a fresh browser profile (no cookie) sees only the login
page and /api/jobs answers it 401. Screenshots of each page go to the test's tmp dir (and to
$TFDIST_KEEP_SCREENSHOTS when set: docs/images/ was made that way)."""

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.conftest import FAKES, REPO, cli_env, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SLEEPER = os.path.join(REPO, "tests", "multihost", "sleeper.py")
BOUND = 90  # seconds any one wait may take on a loaded machine (the whole test takes well under a minute)

JOB = """\
import itertools, time
import numpy as np
import tfdist
from tfdist.callbacks import MetricsReporter

ctx = tfdist.init()
import tensorflow as tf  # noqa: E402

x = np.random.RandomState(0).rand(64, 4).astype("float32")
y = x.sum(1, keepdims=True)


class Say(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {epoch + 1} loss {logs['loss']:.4f}", flush=True)


with ctx.strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
reporter = MetricsReporter(every_n_batches=2, tensorboard=True)
model.fit(x, y, batch_size=8, epochs=4, verbose=0, callbacks=[reporter, Say()])
print("training done; serving until canceled", flush=True)
for tick in itertools.count():
    print(f"tick {tick}", flush=True)
    time.sleep(1)
"""


def read_line(proc: subprocess.Popen, what: str, timeout: float = BOUND) -> str:
    """One line of the process's stdout, waiting at most `timeout` (select: readline alone could hang)."""
    deadline = time.monotonic() + timeout
    buffered = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            byte = os.read(proc.stdout.fileno(), 1)
            if not byte:
                break
            buffered += byte
            if byte == b"\n":
                return buffered.decode()
        elif proc.poll() is not None:
            break
    raise AssertionError(f"{what}: no line in {timeout} s (exit code {proc.poll()}; got {buffered!r})")


class Browser:
    """Headless Chromium through chromedriver, in a process group of its own that `close` kills whole."""

    def __init__(self, profile, log, marker):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in ("--headless=new", "--no-sandbox", f"--user-data-dir={profile}", "--window-size=1366,768",
                     "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--metrics-recording-only", "--password-store=basic"):
            options.add_argument(flag)
        self.service = Service(CHROMEDRIVER, log_output=str(log), env=cli_env(marker),
                               popen_kw={"start_new_session": True})
        try:
            self.driver = webdriver.Chrome(service=self.service, options=options)
        except BaseException:
            self.kill()
            raise
        self.driver.set_page_load_timeout(BOUND)

    def wait(self, condition, message, timeout=BOUND):
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait

        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.2).until(lambda d: condition(d))
        except TimeoutException:
            raise AssertionError(f"timed out waiting for {message} ({timeout} s; page {self.driver.current_url}: "
                                 f"{self.text('main')[:1500]!r})") from None

    def find(self, css):
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css) -> str:
        """The rendered text of the first element `css` selects, read in one step (the page redraws as it polls:
        an element found first and read after could be gone)."""
        return self.driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", css)

    def attributes(self, css, name) -> list[str]:
        return self.driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map((e) => e.getAttribute(arguments[1]));", css, name)

    def click(self, css, what):
        """Clicks the element `css` selects once it is there (again if a redraw replaced it in between)."""
        from selenium.common.exceptions import StaleElementReferenceException

        def clicked(_):
            try:
                found = self.find(css)
                if found:
                    found[0].click()
                return bool(found)
            except StaleElementReferenceException:
                return False

        self.wait(clicked, what)

    def kill(self):
        process = getattr(self.service, "process", None)
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # chromedriver and every Chromium process it started
            except ProcessLookupError:
                pass
            process.wait(timeout=10)

    def close(self):
        try:
            self.driver.quit()
        finally:
            self.kill()


def shoot(browser, directory, name):
    path = directory / f"dashboard-{name}.png"
    assert browser.driver.save_screenshot(str(path)), f"no screenshot of {name}"
    keep = os.environ.get("TFDIST_KEEP_SCREENSHOTS")
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copy(path, os.path.join(keep, path.name))


def status_of(url: str) -> tuple[int, dict | str]:
    """The status and JSON document of a GET without cookies (a page, such as the login form: its text)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            status, body = answer.status, answer.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode()


def test_the_dashboard_in_a_real_browser(tmp_path, local_cluster, marker):
    from cluster.shared.credentials import Authority

    started = time.monotonic()
    cluster = local_cluster()
    # TensorFlow's start-up lines, which the page hides until asked: its INFO lines, whatever the test run's level.
    cluster.start_agent("n1", "--slots", "1", env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    authority = Authority.load(os.path.join(cluster.state_dir, "credentials"))
    alice, bob = (authority.issue("user", name).save(str(tmp_path / f"{name}.json")) for name in ("alice", "bob"))
    (tmp_path / "train.py").write_text(JOB)
    cluster.wait_agents("n1")
    launched = run_cli(["launch", "--detach", "--credentials", alice, "--", str(tmp_path / "train.py")], marker,
                       cwd=str(tmp_path), **cluster.env)
    assert launched.returncode == 0, launched.stderr
    training = launched.stdout.strip()
    queued = run_cli(["launch", "--detach", "--credentials", bob, "--", SLEEPER, "600"], marker, **cluster.env)
    assert queued.returncode == 0, queued.stderr
    waiting = queued.stdout.strip()

    dashboard = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "dashboard", "--credentials", alice,
                                  "--port", "0"], env=cli_env(marker, **cluster.env), stdout=subprocess.PIPE,
                                 stderr=open(tmp_path / "dashboard.log", "w"))
    shots = tmp_path / "screenshots"
    shots.mkdir()
    browsers = []
    try:
        banner = read_line(dashboard, "tfdist dashboard's banner")
        assert banner.startswith(f"tfdist dashboard of the coordinator at {cluster.address} (as user alice) on "
                                 "http://127.0.0.1:"), banner
        base = banner.split(" on ")[1].strip().rstrip("/")
        login = read_line(dashboard, "tfdist dashboard's login link").split("log in with ")[1].strip()
        assert login.startswith(f"{base}/login?token=") and len(login) > len(base) + 40

        # Nothing answers without the login: the API says 401, a fresh browser (no cookie) gets the login form.
        assert status_of(f"{base}/api/jobs") == (401, {"error": "log in first: open the login link `tfdist "
                                                                "dashboard` printed"})
        stranger = Browser(tmp_path / "profile-stranger", tmp_path / "chromedriver-stranger.log", marker)
        browsers.append(stranger)
        for path in ("/", f"/jobs/{training}", "/cluster"):
            stranger.driver.get(base + path)
            assert stranger.find("form input#token"), stranger.driver.page_source[:500]
            assert training not in stranger.driver.page_source and "alice" not in stranger.driver.page_source
        shoot(stranger, shots, "login")
        stranger.driver.get(f"{base}/api/jobs")
        assert json.loads(stranger.text("body")) == {"error": "log in first: open the login link `tfdist dashboard` "
                                                              "printed"}
        stranger.driver.get(f"{base}/login?token=not-the-token")
        assert "That token is not this dashboard's" in stranger.text(".problem")
        stranger.close()
        browsers.remove(stranger)

        # The owner's browser: the link logs in (a cookie) and lands on the jobs.
        owner = Browser(tmp_path / "profile-alice", tmp_path / "chromedriver-alice.log", marker)
        browsers.append(owner)
        owner.driver.get(login)
        owner.wait(lambda d: owner.find(f'#active-jobs tr[data-job="{waiting}"] td.reason'),
                   f"the jobs table to list queued job {waiting} with its waiting reason")
        reason = owner.text(f'#active-jobs tr[data-job="{waiting}"] td.reason')
        assert reason and training.split("-")[0] in reason, reason  # it waits for the node job 1 holds
        row = owner.text(f'#active-jobs tr[data-job="{training}"]')
        assert "alice" in row and "train" in row, row
        assert "bob" in owner.text(f'#active-jobs tr[data-job="{waiting}"]')
        assert owner.driver.get_cookies()[0]["httpOnly"] and owner.driver.get_cookies()[0]["sameSite"] == "Strict"

        # The running job's page: its logs follow live, its metrics draw curves.
        owner.driver.get(f"{base}/jobs/{training}")
        owner.wait(lambda d: "epoch 2 loss" in owner.text("#log"), f"job {training}'s log to show its epoch lines")
        owner.wait(lambda d: any(path.count("L") >= 2 for path in owner.attributes(
            '#charts figure[data-metric="loss"] svg path.series', "d")), f"a loss curve with points for job {training}")
        assert "[rank=0] epoch 1 loss" in owner.text("#log")
        owner.wait(lambda d: "training done" in owner.text("#log"), f"job {training} to finish training")
        assert owner.text(".job-head .badge") == "RUNNING"
        assert "n1" in owner.text("#placement"), owner.text("#placement")
        assert f"tfdist tensorboard {training}" in owner.text("#tensorboard")
        assert str(tmp_path / "tfdist-tensorboard" / training) in owner.text("#tensorboard")
        shoot(owner, shots, "job")
        # TensorFlow's start-up chatter, hidden as `tfdist launch` does (which lines it prints depends on the CPU:
        # the instruction sets, oneDNN's notice)
        chatter = ("cpu_feature_guard.cc", "port.cc")
        assert not any(line in owner.text("#log") for line in chatter), owner.text("#log")
        owner.click("#log-noise", "the checkbox that shows TensorFlow's lines")
        owner.wait(lambda d: any(line in owner.text("#log") for line in chatter), "TensorFlow's lines once shown")
        from selenium.webdriver.support.ui import Select

        Select(owner.find("#log-rank")[0]).select_by_value("0")  # rank 0's lines only, from the start
        owner.wait(lambda d: "[rank=0] epoch 1 loss" in owner.text("#log") and "[tfdist]" not in owner.text("#log"),
                   "the logs of rank 0 alone")
        cost = owner.driver.execute_script("""
            const api = performance.getEntriesByType("resource").filter((e) => e.name.includes("/api/"));
            const nav = performance.getEntriesByType("navigation")[0];
            return {load: nav.loadEventEnd, calls: api.length,
                    slowest: Math.max(...api.map((e) => e.duration)),
                    mean: api.reduce((s, e) => s + e.duration, 0) / api.length,
                    bytes: api.reduce((s, e) => s + e.encodedBodySize, 0) / api.length};""")
        print(f"job page: loaded in {cost['load']:.0f} ms; {cost['calls']} API calls, {cost['mean']:.1f} ms and "
              f"{cost['bytes']:.0f} bytes each on average, the slowest {cost['slowest']:.0f} ms")

        # TensorBoard beside it: the dashboard serves the job's event files itself, behind its login.
        board = f"/tensorboard/{training}/"
        assert owner.attributes("#tensorboard-link", "href") == [board]
        assert status_of(f"{base}{board}data/runs")[0] == 401  # no session: no TensorBoard
        owner.driver.get(base + board)
        owner.wait(lambda d: "TensorBoard" in d.title, "TensorBoard's page under the dashboard's login")
        runs = []
        owner.wait(lambda d: runs.extend(owner.driver.execute_async_script(
            "fetch(arguments[0]).then((r) => r.json()).then(arguments[1], () => arguments[1]([]));",
            board + "data/runs")) or runs, "TensorBoard to list the job's run")
        assert runs == ["."]
        tags = owner.driver.execute_async_script(
            "fetch(arguments[0]).then((r) => r.json()).then(arguments[1]);", board + "data/plugin/scalars/tags")
        assert "loss" in tags["."], tags  # what MetricsReporter(tensorboard=True) wrote

        # The queued job is bob's: alice sees why it waits, but neither its logs nor any button.
        owner.driver.get(f"{base}/jobs/{waiting}")
        owner.wait(lambda d: owner.text("#waiting-reason"), f"job {waiting}'s waiting reason")
        assert not owner.find("button.action")
        owner.wait(lambda d: "only the job's owner (bob)" in owner.text("#log"), "the logs to say they are bob's")
        shoot(owner, shots, "queued")

        owner.driver.get(f"{base}/")
        owner.wait(lambda d: owner.find(f'#active-jobs tr[data-job="{training}"] .badge'), "the jobs table again")
        shoot(owner, shots, "jobs")

        # The owner cancels: the button asks, the coordinator cancels, the page says so.
        owner.driver.get(f"{base}/jobs/{training}")
        owner.click('button[data-action="cancel"]', f"the cancel button of job {training}")
        owner.wait(lambda d: _alert(d), "the confirmation dialog").accept()
        owner.wait(lambda d: owner.text("#action-message") == f"job {training}: CANCELED",
                   "the page to say the job was canceled")
        owner.wait(lambda d: owner.text(".job-head .badge") == "CANCELED", "the badge to show CANCELED")
        assert cluster.job(training)["state"] == "CANCELED"
        assert not owner.find("button.action")
        owner.wait(lambda d: cluster.job(waiting)["state"] in ("STARTING", "RUNNING"),
                   f"job {waiting} to be placed on the freed node")

        # The cluster: n1 now runs bob's job; a GPU node (the stand-in nvidia-smi) joins with its two GPUs free.
        cluster.start_agent("g1", env={"PATH": FAKES + os.pathsep + os.environ["PATH"], "TFDIST_FAKE_GPUS": "2"})
        owner.driver.get(f"{base}/cluster")
        owner.wait(lambda d: len(owner.find('#nodes tr[data-node="g1"] .gpu.free')) == 2,
                   "the cluster page to show node g1 with 2 free GPUs")
        node = owner.text('#nodes tr[data-node="n1"]')
        assert "ALIVE" in node and "0 / 1" in node and waiting in node, node
        assert "2 / 2" in owner.text('#nodes tr[data-node="g1"]') and "GPU 1" in owner.text('#nodes tr[data-node="g1"]')
        shoot(owner, shots, "cluster")

        # A job that fails: its page says why, with the failed rank's last lines.
        (tmp_path / "fail.py").write_text("import sys\nprint('loading the data', flush=True)\n"
                                          "sys.exit('boom: no such file data.csv')\n")
        failing = run_cli(["launch", "--detach", "--credentials", alice, "--", str(tmp_path / "fail.py")], marker,
                          cwd=str(tmp_path), **cluster.env)
        assert failing.returncode == 0, failing.stderr
        failed = failing.stdout.strip()
        owner.driver.get(f"{base}/jobs/{failed}")
        owner.wait(lambda d: "boom: no such file data.csv" in owner.text("#failure pre.last-lines"),
                   f"job {failed}'s page to show why it failed")
        assert owner.text(".job-head .badge") == "FAILED"
        assert "rank 0 on g1: exit 1" in owner.text("#failure"), owner.text("#failure")
        shoot(owner, shots, "failed")

        # A coordinator that stops answering is said on the page, which keeps its last view and keeps asking.
        cluster.coordinator.kill()
        cluster.coordinator.wait(timeout=10)
        owner.driver.get(f"{base}/")
        owner.wait(lambda d: f"cannot reach the coordinator at {cluster.address}" in owner.text("#banner"),
                   "the page to say the coordinator does not answer")
    finally:
        for browser in browsers:
            browser.close()
        stopping = time.monotonic()
        dashboard.send_signal(signal.SIGTERM)
        try:
            dashboard.wait(timeout=10)
        except subprocess.TimeoutExpired:
            dashboard.kill()
            dashboard.wait(timeout=10)
    stopped_in = time.monotonic() - stopping
    log = (tmp_path / "dashboard.log").read_text()
    assert dashboard.returncode == 0 and log.endswith("tfdist: dashboard stopped\n"), log
    assert stopped_in < 2.0, f"the dashboard took {stopped_in:.1f} s to stop after SIGTERM"
    assert {p.name for p in shots.iterdir()} == {f"dashboard-{n}.png" for n in ("login", "jobs", "job", "queued",
                                                                               "cluster", "failed")}
    print(f"dashboard test: {time.monotonic() - started:.1f} s, stopped {stopped_in:.2f} s after SIGTERM")


def _alert(driver):
    from selenium.common.exceptions import NoAlertPresentException

    try:
        alert = driver.switch_to.alert
        alert.text  # noqa: B018 (raises while there is none)
        return alert
    except NoAlertPresentException:
        return False
