"""Worker output as a terminal shows it: the agent's splitter (cluster/agent/worker_output.py) over the bytes a
real Keras 3 and tf_keras fit write to a pipe (tests/unit/data/*_fit_stdout.bin, captured once from a 2-epoch fit
with validation_data), the noise table (cluster/shared/output_lines.py), and the gang's reader with real
processes."""

import pathlib
import sys
import textwrap
import time

import pytest

from cluster.agent.gang import Gang, WorkerLaunch
from cluster.agent.outbox import cut_line
from cluster.agent.worker_output import Piece, Splitter
from cluster.shared.output_lines import (MAX_LINE_CHARS, PROGRESS, Kind, NoiseFilter, bar_rest, bar_step, clean,
                                         epoch_of, kind)
from tests.conftest import cli_env

DATA = pathlib.Path(__file__).parent / "data"


def split(data: bytes, chunk: int = 0, every: float = 0.0) -> list[Piece]:
    """Pieces of `data` fed in chunks of `chunk` bytes (all at once: 0), the clock a second on per chunk."""
    splitter, pieces = Splitter(progress_every=every), []
    chunks = [data[i:i + chunk] for i in range(0, len(data), chunk)] if chunk else [data]
    for now, part in enumerate(chunks):
        pieces += splitter.feed(part, float(now))
    return pieces + splitter.end(float(len(chunks)))


@pytest.mark.parametrize("fixture, final_bar", [
    ("keras3_fit_stdout.bin", r"8/8 ━{20} \d+s \d+ms/step - accuracy: 0\.\d{4} - loss: 0\.\d{4} - "
                              r"val_accuracy: 0\.\d{4} - val_loss: 0\.\d{4}$"),
    ("tf_keras_fit_stdout.bin", r"8/8 \[={30}\] - \d+s \d+ms/step - loss: 0\.\d{4} - accuracy: 0\.\d{4} - "
                                r"val_loss: 0\.\d{4} - val_accuracy: 0\.\d{4}$"),
])
def test_each_epochs_final_line_is_its_last_update_and_the_updates_are_progress(fixture, final_bar):
    import re

    data = (DATA / fixture).read_bytes()
    assert data.count(b"\r") > 10 and data.count(b"\n") == 4  # one line per epoch header and per epoch's bar
    for chunk in (0, 7):  # all at once; 7 bytes at a time, cutting `━` (3 bytes in UTF-8) and the codes apart
        pieces = split(data, chunk)
        finals = [p.text for p in pieces if not p.progress]
        assert finals[0] == "Epoch 1/2" and finals[2] == "Epoch 2/2" and len(finals) == 4, finals
        for line in (finals[1], finals[3]):
            assert re.match(final_bar, line), line
            assert "\x1b" not in line and "\b" not in line and kind(line) is Kind.BAR
        updates = [p.text for p in pieces if p.progress]  # all at once: the final line supersedes every one
        assert (updates and all(bar_step(u) and "val_loss" not in u for u in updates)) if chunk else not updates


def test_updates_are_handed_on_at_most_once_per_interval_and_the_newest_is_kept():
    splitter = Splitter(progress_every=1.0)
    assert splitter.feed(b"\r 1/9 [=>...] - loss: 0.9", 0.0) == []  # not ended by \r yet
    assert splitter.feed(b"\r 2/9", 0.1) == [Piece(" 1/9 [=>...] - loss: 0.9", progress=True)]
    assert splitter.feed(b"\r 3/9\r 4/9\r", 0.5) == [] and splitter.next_due(0.5) == pytest.approx(0.6)
    assert splitter.feed(b"", 1.1) == [Piece(" 4/9", progress=True)]  # due: the newest, not 2/9
    assert splitter.next_due(1.1) is None
    assert splitter.feed(b" 9/9 - val_loss: 0.5\n", 1.2) == [Piece(" 9/9 - val_loss: 0.5")]


def test_an_epoch_longer_than_the_line_cap_keeps_its_final_values():
    """Measured 1: read by `\\n` and cut at 8,192 characters, a 70-step epoch stopped at step 45."""
    bar = "\x1b[1m{0:3d}/700\x1b[0m \x1b[32m━━━━━━━━━━\x1b[0m \x1b[1m1s\x1b[0m 9ms/step - loss: {1:.4f}"
    updates = "".join("\b" * 60 + "\r" + bar.format(step, 2 - step / 700) for step in range(1, 701))
    data = f"Epoch 1/1\n{updates} - val_loss: 0.9876\n".encode()
    assert len(data) > 10 * MAX_LINE_CHARS
    finals = [p.text for p in split(data) if not p.progress]
    assert finals == ["Epoch 1/1", "700/700 ━━━━━━━━━━ 1s 9ms/step - loss: 1.0000 - val_loss: 0.9876"]


def test_line_ends_and_long_lines():
    assert split(b"a\r\nb\n\nc") == [Piece("a"), Piece("b"), Piece(""), Piece("c")]  # CRLF, blank, no newline
    assert split(b"step 5\rstep 6\r", chunk=7) == [Piece("step 5", True), Piece("step 6", True), Piece("step 6")]
    long = [p.text for p in split(b"x" + b"y" * 20000 + b"\n")]
    assert long == ["[tfdist: 11857 characters cut] ..." + "y" * (MAX_LINE_CHARS - 48)]
    assert cut_line(long[0]) == long[0] and len(long[0]) <= MAX_LINE_CHARS  # the outbox's cap does not cut again
    huge = [p.text for p in split(b"z" * 200_000 + b" the end\n", chunk=4096)]
    assert huge[0].startswith("[tfdist: 191864 characters cut] ...zzz") and huge[0].endswith("z the end")
    assert [p.text for p in split("caf\u00e9 \u2501\n".encode(), chunk=1)] == ["caf\u00e9 \u2501"]


NOISE = [  # as TensorFlow 2.21 and Keras 3.15 print them (measured on this machine, issue 18) and elsewhere
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795486018.648067   20652 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use "
    "available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the appropriate "
    "compiler flags.",
    "I0000 00:00:1732034445.100100   12345 port.cc:153] oneDNN custom operations are on. You may see slightly "
    "different numerical results due to floating-point round-off errors from different computation orders.",
    "I0000 00:00:1732034450.2   12345 coordination_service.cc:505] Waiting for 1/2 tasks to connect. "
    "Example stragglers:",
    "2024-03-01 10:00:00.123456: I tensorflow/core/framework/local_rendezvous.cc:404] Local rendezvous is aborting "
    "with status: OUT_OF_RANGE: End of sequence",
    "E0000 00:00:1732034445.1   12345 cuda_dnn.cc:8310] Unable to register cuDNN factory: Attempting to register "
    "factory for plugin cuDNN when one has already been registered",
    "W0000 00:00:1732034445.1   12345 auto_shard.cc:553] AUTO sharding policy will apply DATA sharding policy as "
    "it failed to apply FILE sharding policy",
    "/venv/lib/python3.11/site-packages/keras/src/trainers/epoch_iterator.py:74: UserWarning: `shuffle=True` was "
    "passed, but will be ignored since the data `x` was provided as a tf.data.Dataset.",
]
PLAIN = [
    "Traceback (most recent call last):",
    "E0000 00:00:1732034445.1   12345 collective_ops.cc:99] Collective ops is aborted by: Connection reset by peer",
    "W0000 00:00:1732034445.1   12345 coordination_service_agent.cc:1] tasks are unhealthy (stopped heartbeats)",
    "3/10 files converted",  # a fraction is not a progress bar
    "final test accuracy: 0.9833",
    "  File \"train.py\", line 3, in <module>",
]
BARS = ["22/22 - 1s - 39ms/step - accuracy: 0.5234 - loss: 1.8807", "Epoch 12/12",
        " 6/32 [====>.........] - ETA: 0s - loss: 1.3949", "      7/Unknown 2s 9ms/step - loss: 0.71"]


def test_the_noise_table_hides_start_up_chatter_and_keeps_errors_and_output():
    assert [kind(t) for t in NOISE] == [Kind.NOISE] * len(NOISE)
    assert [kind(t) for t in PLAIN] == [Kind.PLAIN] * len(PLAIN)
    assert [kind(t) for t in BARS] == [Kind.BAR] * len(BARS)
    assert epoch_of("Epoch 3/12") == "3/12" and bar_step(BARS[3]) == (7, None)
    assert [bar_rest(t) for t in BARS] == [""] * len(BARS)  # a bar alone carries nothing else
    glued = "32/32 ━━━━━━━━━━━━━━━━━━━━ 0s 49ms/step - accuracy: 0.5430 - loss: 0.6526epoch 1: saved ckpt-1"
    assert bar_rest(glued) == "epoch 1: saved ckpt-1"  # printed while the bar's line was open
    assert bar_rest(" 6/32 [====>.........] - ETA: 1:02 - loss: 1.3949done") == "done"
    stream = NoiseFilter()  # the source line Python's warnings print under a warning goes with it
    assert [stream.kind(t) for t in (NOISE[-1], "  self.data_adapter = get_data_adapter(", "  indented own")] == \
        [Kind.NOISE, Kind.NOISE, Kind.PLAIN]
    assert clean("\x1b[1m7/32\x1b[0m \x1b]0;title\x07ok\b\b  ") == "7/32 ok"


def test_the_gang_hands_on_updates_as_progress_and_keeps_noise_out_of_the_last_lines(marker):
    code = textwrap.dedent("""
        import sys, time
        print('WARNING: All log messages before absl::InitializeLog() is called are written to STDERR',
              file=sys.stderr, flush=True)
        print('Epoch 1/1', flush=True)
        for step in range(1, 5):
            sys.stdout.write('\\b' * 20 + '\\r' + f'{step}/4 [====] - loss: 0.5')
            sys.stdout.flush()
            time.sleep(0.3)
        print(' - val_loss: 0.4', flush=True)
        print('To enable the following instructions: AVX2, in other operations, rebuild TensorFlow with the '
              'appropriate compiler flags.', file=sys.stderr, flush=True)
        sys.exit(3)
    """)
    handed = []  # (when, stream, text)
    gang = Gang([WorkerLaunch(0, [sys.executable, "-c", code], env=cli_env(marker))],
                lambda rank, stream, text: handed.append((time.monotonic(), stream, text)))
    gang.start()
    result = gang.run()
    lines = [(stream, text) for _, stream, text in handed]
    assert ("stdout", "4/4 [====] - loss: 0.5 - val_loss: 0.4") in lines and ("stdout", "Epoch 1/1") in lines
    updates = [(at, text) for at, stream, text in handed if stream == PROGRESS]
    assert updates and updates[0][1] == "1/4 [====] - loss: 0.5", updates  # handed on while it ran
    assert all(b[0] - a[0] >= 0.95 for a, b in zip(updates, updates[1:])), updates  # at most one a second
    assert len([text for stream, text in lines if stream == "stderr"]) == 2  # noise is in the log
    assert result.failure.last_lines == ("Epoch 1/1", "4/4 [====] - loss: 0.5 - val_loss: 0.4")
