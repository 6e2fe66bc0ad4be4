"""Reading a hung gang's stacks (cluster/coordinator/stack_reading.py) on real dumps: tests/unit/data/hang_stacks/
holds what the ranks of real hung jobs printed (faulthandler, on the step watchdog's SIGUSR1), as `tfdist logs`
shows it, captured from `tfdist launch --slots 2 --distribution MODE -- tests/integration/workers/
stops_before_collective.py LOOP` (keras_jax.log: workers/hang_in_fit.py under jax), rank 1 stopping in the
script's own code, its input or its generator while rank 0 went on into the collective."""

import pathlib
import re

import pytest

from cluster.coordinator import stack_reading as reading
from cluster.coordinator.stack_reading import Kind
from cluster.shared.model import LogLine

DATA = pathlib.Path(__file__).parent / "data" / "hang_stacks"
SHOWN = re.compile(r"^\[rank=(\d+)( stderr)?\] ?(.*)$")
NODES = {0: "a1", 1: "a2"}
STOP = "stops_before_collective.py:17 in stop_before_the_collective"  # where rank 1 sleeps


def logged(name: str) -> list[LogLine]:
    lines = []
    for text in (DATA / f"{name}.log").read_text().splitlines():
        shown = SHOWN.match(text)
        lines.append(LogLine(int(shown[1]), "stderr" if shown[2] else "stdout", shown[3], 0.0))
    return lines


def said(name: str, steps=None, ranks=(0, 1)) -> reading.Verdict:
    return reading.verdict(reading.dumps(logged(name)), steps or {0: 3, 1: 3}, list(ranks), NODES, 3.0)


# (fixture, rank 1 behind: where, rank 0: what it waits in)
MODES = [
    ("mwms", f"in the user's code at {STOP}",
     "in the collective inside the training step (TensorFlow runs it, from stops_before_collective.py:42)"),
    ("horovod", f"in the user's code at {STOP}",
     "in the collective (Horovod allreduce, from stops_before_collective.py:55)"),
    ("horovod_tape", f"in the user's code at {STOP}",
     "in the collective inside the training step (TensorFlow runs it, from stops_before_collective.py:141)"),
    ("jax", f"in the user's code at {STOP}",
     "in the collective (JAX multihost_utils process_allgather, from stops_before_collective.py:70)"),
    ("keras_jax", "in the user's code at hang_in_fit.py:29 in batch_end",
     "in the collective inside the training step (Keras runs it, from hang_in_fit.py:32)"),
    ("torch", f"in the user's code at {STOP}",
     "in the collective (torch.distributed all_reduce, from stops_before_collective.py:90)"),
    ("ddp", f"in the user's code at {STOP}",
     "in the collective inside the training step (torch autograd runs it, from stops_before_collective.py:88)"),
    ("torch_loader", f"in the input pipeline (torch DataLoader), in the user's code at {STOP}",
     "in the collective (torch.distributed all_reduce, from stops_before_collective.py:186)"),
    ("mwms_generator", f"in the input pipeline (tf.data, on a thread of its own), in the user's code at {STOP}",
     "in the collective inside the training step (TensorFlow runs it, from stops_before_collective.py:118)"),
    ("horovod_generator", f"in the input pipeline (tf.data, on a thread of its own), in the user's code at {STOP}",
     "in the collective (Horovod allreduce, from stops_before_collective.py:138)"),
]


@pytest.mark.parametrize("name, behind, waits", MODES, ids=[m[0] for m in MODES])
def test_the_rank_that_stopped_before_the_collective_is_named_in_every_mode(name, behind, waits):
    """Both ranks reported step 3 (rank 0 finished it too, then waited in step 4's collective): the stacks
    set rank 1 apart, whichever rank the watchdog's clock saw silent first."""
    verdict = said(name)
    assert verdict.said == (f"from the stacks, rank 1 (node a2) is behind at step 3 (the others at step 3 too), "
                            f"{behind}; rank 0 waits {waits}")
    assert verdict.rank == 1


def test_each_threads_frames_are_read_innermost_first_the_main_thread_last():
    stacks = reading.dumps(logged("torch_loader"))
    assert sorted(stacks) == [0, 1] and [len(threads) for threads in stacks.values()] == [2, 2]
    main = stacks[1][-1]
    assert main[0] == reading.Frame("/work/main/tests/integration/workers/stops_before_collective.py", "17",
                                    "stop_before_the_collective")
    assert main[2].path.endswith("torch/utils/data/_utils/fetch.py") and main[2].function == "<listcomp>"
    assert stacks[1][0][0].function == "wait"  # tfdist's progress flusher, idle in threading


@pytest.mark.parametrize("name, rank, kind", [
    ("mwms", 0, Kind.STEP), ("mwms", 1, Kind.USER), ("horovod", 0, Kind.COLLECTIVE), ("jax", 0, Kind.COLLECTIVE),
    ("torch", 0, Kind.COLLECTIVE), ("ddp", 0, Kind.STEP), ("keras_jax", 0, Kind.STEP), ("torch_loader", 1, Kind.INPUT),
    ("mwms_generator", 1, Kind.INPUT), ("mwms_generator", 0, Kind.STEP), ("horovod_generator", 1, Kind.INPUT)])
def test_what_each_rank_is_in(name, rank, kind):
    assert reading.read(reading.dumps(logged(name))[rank]).kind is kind


def test_the_main_thread_in_the_iterator_alone_says_input_where_no_thread_runs_user_code():
    main_only = reading.dumps(logged("horovod_generator"))[1][-1:]
    found = reading.read(main_only)
    assert found.kind is Kind.INPUT and found.says() == \
        "in the input pipeline (tf.data __next__, from stops_before_collective.py:137)"


def test_steps_name_the_rank_behind_where_the_stacks_cannot():
    """Every rank inside the compiled step (the stacks alike): the lowest step is behind."""
    both_waiting = [line for line in logged("mwms_generator") if line.rank == 0]
    stacks = reading.dumps(both_waiting)
    stacks[1] = stacks[0]
    verdict = reading.verdict(stacks, {0: 13, 1: 12}, [0, 1], NODES, 3.0)
    assert verdict.rank == 1 and verdict.said.startswith(
        "from the stacks, rank 1 (node a2) is behind at step 12 (the others at step 13), inside the training step "
        "(TensorFlow runs it, from stops_before_collective.py:118); rank 0 waits in the collective inside")


def test_every_rank_in_the_collective_at_one_step_names_nobody_and_says_where_to_look():
    stacks = reading.dumps([line for line in logged("torch") if line.rank == 0])
    stacks[1] = stacks[0]
    verdict = reading.verdict(stacks, {0: 3, 1: 3}, [0, 1], NODES, 3.0)
    assert verdict.rank is None
    assert verdict.said == ("from the stacks, every rank waits in the collective (torch.distributed all_reduce, from "
                            "stops_before_collective.py:90); none is behind another in its Python stack: look for a "
                            "collective the ranks called in a different order, or for the network between the nodes")


def test_stacks_that_never_came_are_said_not_guessed():
    rank0 = [line for line in logged("torch") if line.rank == 0]
    verdict = reading.verdict(reading.dumps(rank0), {0: 3, 1: 3}, [0, 1], NODES, 3.0)
    assert verdict.said == ("from the stacks, rank 0 waits in the collective (torch.distributed all_reduce, from "
                            "stops_before_collective.py:90); no stacks arrived from rank 1 within 3s")
    assert verdict.rank is None
    behind = reading.verdict(reading.dumps(rank0), {0: 3, 1: 2}, [0, 1], NODES, 3.0)
    assert behind.said.startswith("from the stacks, rank 1 (node a2) is behind at step 2 (the others at step 3), "
                                  "and no stacks arrived from it within 3s; rank 0 waits in the collective")
    nothing = reading.verdict({}, {0: 3, 1: 3}, [0, 1], NODES, 3.0)
    assert nothing.said == "no stacks arrived from any rank within 3s, so where it is is not known"


def test_a_rank_that_never_reported_a_step_is_behind_the_others():
    verdict = said("horovod", steps={0: 3})
    assert verdict.said.startswith("from the stacks, rank 1 (node a2) is behind before its first step (the others "
                                   "at step 3), in the user's code at ")


def test_a_big_gang_says_each_place_once():
    """Ranks in the same place are one clause, the list cut short."""
    stacks = reading.dumps(logged("horovod"))
    waiting, stopped = stacks[0], stacks[1]
    many = {r: waiting for r in range(12)} | {12: stopped}
    nodes = {r: f"a{r // 4}" for r in range(13)}
    verdict = reading.verdict(many, {r: 3 for r in range(13)}, list(range(13)), nodes, 3.0)
    assert verdict.rank == 12
    assert verdict.said == (f"from the stacks, rank 12 (node a3) is behind at step 3 (the others at step 3 too), in "
                            f"the user's code at {STOP}; ranks 0, 1, 2, 3, 4, 5, 6, 7 and 4 more wait in the "
                            "collective (Horovod allreduce, from stops_before_collective.py:55)")


def test_one_rank_alone_is_said_where_it_stopped():
    rank1 = [line for line in logged("jax") if line.rank == 1]
    verdict = reading.verdict(reading.dumps(rank1), {1: 3}, [1], NODES, 3.0)
    assert verdict.said == f"from its stack, rank 1 (node a2) stopped at step 3, in the user's code at {STOP}"


def test_a_second_dump_of_a_rank_replaces_its_first_and_other_output_is_passed():
    """faulthandler names each thread by its id: an id seen again is the same process dumping again."""
    lines = logged("horovod")
    rank1 = [line for line in lines if line.rank == 1]
    noise = [LogLine(1, "stdout", '  File "/job/not_a_frame.py", line 1 in printed', 0.0),
             LogLine(1, "stderr", "Traceback (most recent call last):", 0.0),
             LogLine(1, "stderr", '  File "/job/train.py", line 9, in main', 0.0)]  # a traceback's frame: a comma
    ids = iter(re.findall(r"0x[0-9a-f]+", "".join(line.text for line in rank1)))
    moved_on = [LogLine(1, line.stream, re.sub(r"0x[0-9a-f]+", lambda _: next(ids), line.text), 0.0)
                for line in lines if line.rank == 0]  # the same threads, later: rank 0's frames, rank 1's ids
    stacks = reading.dumps(rank1 + noise + moved_on)
    assert len(stacks[1]) == 2 and reading.read(stacks[1]).kind is Kind.COLLECTIVE
    assert reading.read(reading.dumps(rank1 + noise)[1]).says() == f"in the user's code at {STOP}"


@pytest.mark.parametrize("path, kind", [
    ("/usr/lib/python3.11/threading.py", None), ("<frozen runpy>", None),
    ("/opt/venv/lib/python3.12/site-packages/horovod/torch/mpi_ops.py", Kind.COLLECTIVE),
    ("/opt/venv/lib/python3.12/site-packages/tensorflow/python/distribute/cross_device_ops.py", Kind.COLLECTIVE),
    ("/opt/venv/lib/python3.12/site-packages/tensorflow/python/distribute/input_lib.py", Kind.INPUT),
    ("/opt/venv/lib/python3.12/site-packages/keras/src/trainers/data_adapters/py_dataset_adapter.py", Kind.INPUT),
    ("C:\\Python311\\Lib\\site-packages\\torch\\utils\\data\\dataloader.py", Kind.INPUT),
    ("/home/me/project/train.py", "user")])
def test_frames_by_their_file(path, kind):
    frame = reading.Frame(path, "1", "f")
    if kind is None:
        assert frame.skipped
    elif kind == "user":
        assert not frame.skipped and not frame.library and reading.mark(frame) is None
    else:
        assert reading.mark(frame)[0] is kind
