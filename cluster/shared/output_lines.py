"""What a worker's output line is, for who shows it: a Keras progress bar, known noise, or plain output.

Pure: the agent's failure summary (cluster/agent/gang.py, its last lines skip noise) and the client's view
(cluster/client/progress_view.py: noise hidden unless --verbose, other ranks' bars unless --all-ranks) use the
one table below. Nothing here hides anything from the job's full log (`tfdist logs`): TF_CPP_MIN_LOG_LEVEL is
not touched, so a line judged noise wrongly is still there.

Lines reach here cleaned (`clean`: no ANSI codes, backspaces or other control characters) by the agent
(cluster/agent/worker_output.py), which also splits `\\r` updates of a bar from the bar's final line: those
travel with stream PROGRESS.
"""

from __future__ import annotations

import enum
import functools
import re

PROGRESS = "progress"  # the stream of a transient update (a `\r`-ended bar segment); final lines keep theirs
MAX_LINE_CHARS = 8192  # a longer line keeps its end (the newest update), with the count of cut characters


class Kind(enum.Enum):
    PLAIN = "plain"  # the user's own output: always shown
    BAR = "bar"  # a Keras progress bar or its `Epoch N/M` header: every rank prints the same one
    NOISE = "noise"  # TensorFlow's start-up chatter and known harmless warnings: shown with --verbose


_ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # all but tab; \b is a cursor move, not an erase


def clean(text: str) -> str:
    """The text as a terminal would show it (colour and cursor codes dropped), trailing blanks removed (Keras
    pads a shorter update with spaces)."""
    return _CONTROL.sub("", _ANSI.sub("", text)).rstrip()


def keep_end(text: str, limit: int = MAX_LINE_CHARS, cut: int = 0) -> str:
    """A line longer than `limit` keeps its end: a long line's newest part is what says where it got to.
    `cut`: characters already dropped from its start. The result, note included, fits in `limit`."""
    if cut == 0 and len(text) <= limit:
        return text
    keep = limit - _NOTE_ROOM
    return f"[tfdist: {cut + max(0, len(text) - keep)} characters cut] ..." + text[-keep:]


_NOTE_ROOM = 48  # the longest "[tfdist: N characters cut] ..."


# ---------------------------------------------------------------- Keras's progress bar

# Keras 3 (keras/src/utils/progbar.py): ` 7/32 ━━━━━━━━━━━━ 0s 9ms/step - accuracy: 0.47 - loss: 0.72`, on
# a pipe too (it draws dynamically wherever "posix" is in sys.modules); `verbose=2`: `22/22 - 1s - 39ms/step`.
# tf_keras (tf_keras/src/utils/generic_utils.py): ` 6/32 [====>.......] - ETA: 0s - loss: 1.39 - accuracy: 0.87`.
# An unknown number of steps (the first epoch of an unsized dataset): `     7/Unknown 2s 9ms/step - loss: ...`.
_BAR = re.compile(r"^\s*(\d+)/(\d+|Unknown)(?=\s|$)(.*)$")
_BAR_BODY = re.compile(r"━|\[[=>.]*\]|/step|/sample|ETA:| - \d+m?s\b")
_EPOCH = re.compile(r"^Epoch (\d+)/(\d+)$")


def bar_step(text: str) -> tuple[int, int | None] | None:
    """(step, steps or None when unknown) of a Keras progress bar line; None for anything else."""
    match = _BAR.match(text)
    if not match or not _BAR_BODY.search(match.group(3)):
        return None
    return int(match.group(1)), None if match.group(2) == "Unknown" else int(match.group(2))


# A bar line's own part: the step, the bar, the times, then ` - name: value` as Keras formats values (`.4f`,
# `.4e`). What follows is someone else's: a `print` while the bar's line was open (an epoch-end callback) ends
# up on it, as on a terminal.
_BAR_OWN = re.compile(r"^\s*\d+/(?:\d+|Unknown)(?: ━+| \[[=>.]*\])?"
                      r"(?: - ETA: [\d:]+s?|(?: -)? \d+(?:ms|us|s)/(?:step|sample)|(?: -)? \d+(?::\d\d)+|(?: -)? \d+s)*"
                      r"(?: - [^\s:]+: (?:-?\d+\.\d{4}(?:e[+-]\d+)?|-?nan|-?inf))*")
_METRIC = re.compile(r" - [^\s:]+: -?\d")


def bar_rest(text: str) -> str:
    """What a progress bar line carries after Keras's own part ("" for a bar alone, or for a non-bar; "" too
    where the rest still looks like Keras's metrics: a format this does not know is not someone's print)."""
    if not bar_step(text):
        return ""
    rest = text[_BAR_OWN.match(text).end():]
    return "" if _METRIC.search(rest) else rest


def epoch_of(text: str) -> str | None:
    """`3/12` of Keras's `Epoch 3/12` header line; None for anything else."""
    match = _EPOCH.match(text.strip())
    return f"{match.group(1)}/{match.group(2)}" if match else None


# ---------------------------------------------------------------- noise: a table of patterns, each with its source

_TF_LOG = r"(?:[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] )[\w/.+-]+:\d+\] "
NOISE: tuple[tuple[str, str], ...] = (
    # TensorFlow's C++ logging at INFO (absl's `I0000 00:00:1795486018.648067 20652 file.cc:227] ...`, or the
    # older `2024-01-01 12:00:00.123456: I tensorflow/core/...cc:42] ...`): start-up facts such as
    # cpu_feature_guard.cc's instruction sets, port.cc's `oneDNN custom operations are on`, grpc_server_lib's
    # `Started server`, coordination_service.cc's `Example stragglers:` while ranks join, local_rendezvous.cc's
    # `End of sequence` at every epoch's end. Warnings and errors stay shown unless listed below.
    (r"^(?:I\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: I )[\w/.+-]+:\d+\] ",
     "TensorFlow C++ INFO logging"),
    # absl's line before its logging is initialized, printed once per process by TF's C++ runtime.
    (r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$", "absl start-up"),
    # The second line of cpu_feature_guard.cc's message (the first is an INFO line above).
    (r"^To enable (?:the following instructions: .*|them) in other operations, rebuild TensorFlow with the "
     r"appropriate compiler flags\.$",
     "cpu_feature_guard.cc"),
    # oneDNN's notice when logged at WARNING (some builds), and the same notice from the Python side.
    (_TF_LOG + r"oneDNN custom operations are on\.", "port.cc oneDNN notice"),
    # GPU builds on a node without CUDA, or registering a plugin twice (cuda_dnn.cc, cuda_fft.cc, cuda_blas.cc,
    # cudart_stub.cc, TF-TRT): printed by every process at import, harmless.
    (_TF_LOG + r"(?:Unable to register cu(?:DNN|FFT|BLAS) factory|Could not find cuda drivers|"
               r"TF-TRT Warning: Could not find TensorRT|could not open file to read NUMA node)", "CUDA plugin"),
    # Grappler's loop optimizer and tf.data's auto-sharding fallback (auto_shard.cc: DATA sharding of an
    # in-memory dataset, as the examples ask for anyway).
    (_TF_LOG + r"(?:Skipping loop optimization for Merge node|AUTO sharding policy will apply DATA sharding)",
     "Grappler / tf.data auto_shard.cc"),
    # The end of an epoch's iterator, logged at W by some versions (local_rendezvous.cc), and its node line.
    (_TF_LOG + r"Local rendezvous is aborting with status: OUT_OF_RANGE: End of sequence", "local_rendezvous.cc"),
    (r"^\s*\[\[\{\{node (?:IteratorGetNext|MultiDeviceIteratorGetNextFromShard)\}\}\]\]$", "local_rendezvous.cc"),
    # Keras 3 (trainers/epoch_iterator.py) on every rank, for a tf.data dataset that is already shuffled.
    (r"UserWarning: `shuffle=True` was passed, but will be ignored since the data `x` was provided as a "
     r"tf\.data\.Dataset", "keras epoch_iterator.py"),
)


@functools.cache
def _noise() -> re.Pattern[str]:
    """NOISE as one pattern, compiled at the first line a worker prints (4 ms: not on a launch's start)."""
    return re.compile("|".join(f"(?:{pattern})" for pattern, _ in NOISE))


def kind(text: str, after_noise: bool = False) -> Kind:
    """What a final (cleaned) line is. `after_noise`: the stream's previous line was noise; an indented line
    then continues it (the source line Python's warnings print under a warning)."""
    return _kind(text, after_noise, bool(_noise().search(text)))


def _kind(text: str, after_noise: bool, noisy: bool) -> Kind:
    if noisy or (after_noise and text[:1] in (" ", "\t")):
        return Kind.NOISE
    if bar_step(text) or epoch_of(text):
        return Kind.BAR
    return Kind.PLAIN


class NoiseFilter:
    """`kind` over one stream's lines in order: remembers whether the previous line matched the table (one
    indented line continues it; the line after that is judged on its own)."""

    def __init__(self) -> None:
        self._after_noise = False

    def kind(self, text: str) -> Kind:
        noisy = bool(_noise().search(text))  # once per line: every worker line of every job passes here
        found = _kind(text, self._after_noise, noisy)
        self._after_noise = noisy
        return found
