"""The client's view of a job's lines (cluster/client/progress_view.py): the quiet view of `tfdist launch`, on a
pipe and on a terminal, its --verbose and --all-ranks, and the full log of `tfdist logs`."""

import io
from types import SimpleNamespace

from cluster.client.progress_view import FULL, QUIET, Renderer, View, ViewOptions, Write
from cluster.shared.output_lines import PROGRESS

NOISE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
FINAL = ("22/22 ━━━━━━━━━━━━━━━━━━━━ 1s 39ms/step - accuracy: 0.9205 - loss: 0.2691 - val_accuracy: 0.9100 - "
         "val_loss: 0.3000")


def L(rank, stream, text, time=0.0):
    return SimpleNamespace(rank=rank, stream=stream, text=text, time=time)


def update(step, time, rank=0):
    return L(rank, PROGRESS, f"{step:2d}/22 {'━' * 20} 0s 20ms/step - accuracy: 0.5 - loss: 1.2", time)


JOB = [  # what two ranks of a Keras fit ship, in order
    L(0, "stderr", NOISE), L(1, "stderr", NOISE),
    L(0, "stdout", "Epoch 1/12"), L(1, "stdout", "Epoch 1/12"),
    update(1, 10.0), update(1, 10.0, rank=1), update(11, 11.0), update(21, 12.0), update(22, 16.0),
    L(0, "stdout", FINAL), L(1, "stdout", FINAL),
    L(1, "stderr", "Traceback (most recent call last):"), L(-1, "stderr", "tfdist: job 1-ab: restarting (run 2)"),
]


def shown(view, lines=JOB):
    return [w for line in lines for w in view.line(line)]


def test_the_quiet_view_on_a_pipe_shows_the_chiefs_progress_now_and_then_and_hides_noise_and_duplicates():
    assert shown(View(QUIET, tty=False, pipe_every=5.0)) == [
        Write("stdout", "[rank=0] Epoch 1/12"),
        Write("stdout", "[rank=0] Epoch 1/12 · 1/22 ────────── 0s 20ms/step - accuracy: 0.5 - loss: 1.2"),
        Write("stdout", "[rank=0] Epoch 1/12 · 22/22 ━━━━━━━━━━ 0s 20ms/step - accuracy: 0.5 - loss: 1.2 · "
                        "0.2 steps/s"),  # 5 s after the first; 11 -> 21 -> 22 steps in 5 s
        Write("stdout", f"[rank=0] {FINAL}"),
        Write("stderr", "[rank=1] Traceback (most recent call last):"),  # a rank's own output is always shown
        Write("stderr", "tfdist: job 1-ab: restarting (run 2)"),
    ]


def test_verbose_shows_the_noise_and_all_ranks_every_ranks_bars():
    verbose = shown(View(ViewOptions(verbose=True)))
    assert Write("stderr", f"[rank=0] {NOISE}") in verbose and Write("stderr", f"[rank=1] {NOISE}") in verbose
    assert not any(w.text.startswith("[rank=1] Epoch") for w in verbose)
    every = shown(View(ViewOptions(all_ranks=True)))
    assert Write("stdout", f"[rank=1] {FINAL}") in every and Write("stdout", "[rank=1] Epoch 1/12") in every
    assert any(w.text.startswith("[rank=1] Epoch 1/12 · 1/22") for w in every)
    assert not any(NOISE in w.text for w in every)
    glued = L(1, "stdout", "22/22 ━━━━━━━━━━━━━━━━━━━━ 0s 20ms/step - loss: 1.2000rank 1 saved its shard")
    assert View(QUIET).line(glued) == [Write("stdout", "[rank=1] rank 1 saved its shard")]  # its own print stays


def test_the_full_log_is_every_line_on_stdout_with_the_stream_marked_and_no_progress_updates():
    assert shown(View(FULL)) == [
        Write("stdout", f"[rank=0 stderr] {NOISE}"), Write("stdout", f"[rank=1 stderr] {NOISE}"),
        Write("stdout", "[rank=0] Epoch 1/12"), Write("stdout", "[rank=1] Epoch 1/12"),
        Write("stdout", f"[rank=0] {FINAL}"), Write("stdout", f"[rank=1] {FINAL}"),
        Write("stdout", "[rank=1 stderr] Traceback (most recent call last):"),
        Write("stdout", "tfdist: job 1-ab: restarting (run 2)"),
    ]


def test_on_a_terminal_the_progress_is_a_status_line_until_the_epochs_final_line():
    view = View(QUIET, tty=True)
    assert shown(view, JOB[:8]) == [Write("stdout", "[rank=0] Epoch 1/12")]  # no update is a line
    assert view.status() == ["[rank=0] Epoch 1/12 · 21/22 ━━━━━━━━━─ 0s 20ms/step - accuracy: 0.5 - loss: 1.2 · "
                             "10.0 steps/s"]  # Keras's bar, 10 wide: its two colours are gone
    shown(view, JOB[8:10])
    assert view.status() == []  # the final line says it all
    assert View(ViewOptions(all_ranks=True), tty=True).status() == []
    every = View(ViewOptions(all_ranks=True), tty=True)
    shown(every, JOB[:6])
    assert [s[:20] for s in every.status()] == ["[rank=0] Epoch 1/12 ", "[rank=1] Epoch 1/12 "]


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_renderer_takes_the_status_away_before_any_line_and_draws_it_again_after():
    out, err = Terminal(), io.StringIO()
    renderer = Renderer.of(QUIET, out, err)
    renderer.lines(JOB[2:5])  # the header, then the first update
    status = "[rank=0] Epoch 1/12 · 1/22 ────────── 0s 20ms/step - accuracy: 0.5 - loss: 1.2"
    assert out.getvalue() == "[rank=0] Epoch 1/12\n" + status
    renderer.note("tfdist: lost the coordinator")
    assert out.getvalue().endswith(status + "\r\x1b[J" + status) and err.getvalue() == "tfdist: lost the coordinator\n"
    renderer.lines([JOB[9]])
    assert out.getvalue().endswith(status + "\r\x1b[J" + f"[rank=0] {FINAL}\n")
    renderer.close()
    piped = io.StringIO()
    Renderer.of(QUIET, piped, io.StringIO()).lines(JOB[2:5])
    assert "\x1b" not in piped.getvalue() and piped.getvalue().count("\n") == 2


def test_a_terminal_gets_as_many_status_lines_as_fit(monkeypatch):
    monkeypatch.setenv("LINES", "6")
    monkeypatch.setenv("COLUMNS", "40")
    out = Terminal()
    Renderer.of(ViewOptions(all_ranks=True), out, io.StringIO()).lines([update(3, 1.0, rank=r) for r in range(40)])
    assert out.getvalue().split("\n") == [f"[rank={r}] 3/22 ━───────── 0s 20ms/step …" for r in range(3)] + [
        "(and 37 more ranks' progress)"]  # 6 rows less 2, each cut to 39 columns: a wrapped line breaks the redraw


def test_logs_follow_says_why_a_queued_job_waits_and_ends_with_it(tmp_path, marker):
    """Measured 10: `tfdist logs -f` on a queued job printed nothing."""
    import subprocess
    import sys

    from tests.conftest import LocalCluster, cli_env

    cluster = LocalCluster(tmp_path, marker)
    try:
        cluster.start_agent("n1", "--slots", "1")
        cluster.wait_agents("n1")
        busy = cluster.cli("launch", "--detach", "--slots", "1", "--", sys.executable, "-c", "import time; "
                           "time.sleep(120)").stdout.strip()  # holds the node: the next job queues
        submitted = cluster.cli("launch", "--detach", "--slots", "1", "--", sys.executable, "-c", "pass")
        job_id = submitted.stdout.strip()
        assert submitted.returncode == 0 and job_id and busy, submitted.stderr
        with open(tmp_path / "follow.err", "w+") as err:
            follower = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "logs", "-f", job_id],
                                        env=cli_env(marker, **cluster.env), stdout=subprocess.PIPE, stderr=err,
                                        text=True)
            try:
                cluster.wait_for(lambda: f"tfdist: job {job_id} queued: " in (tmp_path / "follow.err").read_text(),
                                 "the follower to say why the job waits")
                assert cluster.cli("cancel", job_id).returncode == 0
                assert follower.wait(timeout=30) == 0  # the job ended: so does its follower
            finally:
                follower.kill()
                follower.communicate(timeout=10)
        said = (tmp_path / "follow.err").read_text().splitlines()
        assert len(said) == 1 and "waiting for" in said[0], said  # said once, not at every poll
        assert cluster.cli("cancel", busy).returncode == 0
    finally:
        cluster.close()
