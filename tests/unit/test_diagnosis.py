"""`tfdist diagnose`: the verdict as a pure function of what the variants measured, the worker's step clock,
and the runner's pure parts (a variant's config, timings read back from metric rows)."""

import dataclasses

import pytest
from hypothesis import given, strategies as st

from cluster.client import diagnose_run
from cluster.shared import diagnose_variant, diagnosis
from cluster.shared.config import check_config, config_from_dict
from cluster.shared.config_values import ConfigError
from cluster.shared.diagnosis import RankTiming, VariantRun
from cluster.shared.modes import auto, planner
from tfdist import diagnose as worker_side, envvars
from tfdist.compat import keras_diagnose


def _run(name, *medians, nodes=("a1", "a2"), batch=64, params=250_000, link=None, applied=True):
    timings = tuple(RankTiming(r, nodes[r % len(nodes)], (m,) * 9, applied=applied, batch=batch, params=params,
                               link=link) for r, m in enumerate(medians))
    return VariantRun(name, f"{name}-job", tuple(nodes), len(medians), timings)


def test_a_slow_all_reduce_is_communication_bound_with_its_bandwidth():
    link = {"interface": "eth0", "nominal_bits_per_s": 10_000_000_000}
    found = diagnosis.diagnose("mwms", [_run("baseline", 0.50, 0.50, link=link), _run("no_communication", 0.05, 0.05),
                                        _run("synthetic_input", 0.49, 0.50)])
    assert found.verdict == diagnosis.COMMUNICATION
    assert found.shares[diagnosis.COMMUNICATION] == pytest.approx(0.9)
    assert found.straggler is None
    assert found.bandwidth.allreduce_bytes_per_step == 1_000_000  # 2(n-1)/n x 250k params x 4 bytes
    assert found.bandwidth.measured_bytes_per_s == pytest.approx(1_000_000 / 0.45)
    assert found.bandwidth.nominal_bits_per_s == 10_000_000_000 and found.bandwidth.link == "eth0 on a1"
    assert "aggregation_frequency" in " ".join(found.fixes)
    assert found.summary.startswith("communication-bound: a step takes 500 ms")


def test_a_slow_input_pipeline_is_input_bound():
    found = diagnosis.diagnose("mwms", [_run("baseline", 0.30, 0.30), _run("no_communication", 0.28, 0.29),
                                        _run("synthetic_input", 0.05, 0.05)])
    assert found.verdict == diagnosis.INPUT
    assert "prefetch" in found.fixes[0]


def test_one_rank_slow_on_its_own_is_named_with_its_node():
    found = diagnosis.diagnose("horovod", [_run("baseline", 0.21, 0.21), _run("no_communication", 0.10, 0.20),
                                           _run("synthetic_input", 0.21, 0.21)])
    assert found.verdict == diagnosis.STRAGGLER
    assert (found.straggler.rank, found.straggler.node) == (1, "a2")
    assert found.straggler.slower_by == pytest.approx(1.0)
    assert "rank 1 on a2" in found.summary and "rank 1 on a2" in found.fixes[0]


def test_nothing_big_enough_is_compute_bound_and_a_small_skew_names_no_one():
    found = diagnosis.diagnose("mwms", [_run("baseline", 0.20, 0.20), _run("no_communication", 0.17, 0.18),
                                        _run("synthetic_input", 0.19, 0.20)])
    assert found.verdict == diagnosis.COMPUTE and found.straggler is None


def test_ranks_taking_turns_being_slow_is_waiting_not_communication_and_no_ones_fault():
    """Shared CPUs: each rank is slow every other step. Without the all-reduce each rank's median is 150 ms,
    but in step the gang keeps the slower one's 200 ms: a 210 ms baseline is 5% communication, not 29%."""
    turns = (0.1, 0.2) * 5
    apart = VariantRun("no_communication", "j", ("a1", "a2"), 2,
                       (RankTiming(0, "a1", turns), RankTiming(1, "a2", turns[1:] + turns[:1])))
    found = diagnosis.diagnose("mwms", [_run("baseline", 0.21, 0.21), apart])
    assert found.shares[diagnosis.COMMUNICATION] == pytest.approx(0.01 / 0.21)
    assert found.shares[diagnosis.STRAGGLER] == pytest.approx(0.05 / 0.21)
    assert found.straggler is None and found.verdict == diagnosis.COMPUTE


def test_a_rank_slower_by_a_sliver_of_the_step_is_not_named():
    """Without the all-reduce a step is a few ms, and rank 1's 20 against rank 0's 6 is noise beside a 500 ms
    baseline: no straggler is named for it."""
    found = diagnosis.diagnose("mwms", [_run("baseline", 0.5, 0.5), _run("no_communication", 0.006, 0.020)])
    assert found.straggler is None and found.verdict == diagnosis.COMMUNICATION


def test_scaling_efficiency_compares_throughput_per_node():
    found = diagnosis.diagnose("mwms", [_run("baseline", 0.20, 0.20, batch=128),
                                        _run("one_node", 0.15, nodes=("a1",), batch=64)])
    assert found.scaling_efficiency == pytest.approx((128 / 0.20) / (2 * 64 / 0.15))
    assert found.shares == {diagnosis.COMMUNICATION: None, diagnosis.INPUT: None, diagnosis.STRAGGLER: None}


def test_a_variant_that_could_not_be_applied_is_not_read_as_a_measurement():
    found = diagnosis.diagnose("mwms", [_run("baseline", 0.5, 0.5), _run("no_communication", 0.05, 0.05, applied=False)])
    assert found.shares[diagnosis.COMMUNICATION] is None and found.verdict == diagnosis.UNDETERMINED


def test_without_a_measured_baseline_there_is_no_verdict():
    with pytest.raises(Exception, match="baseline was not measured: job 3 ended FAILED"):
        diagnosis.diagnose("mwms", [VariantRun("baseline", skipped="job 3 ended FAILED")])


times = st.floats(min_value=1e-4, max_value=10.0)


@given(base=st.lists(times, min_size=2, max_size=4), apart=st.lists(times, min_size=2, max_size=4),
       fed=st.lists(times, min_size=2, max_size=4))
def test_shares_are_fractions_and_the_verdict_is_one_of_four(base, apart, fed):
    found = diagnosis.diagnose("mwms", [_run("baseline", *base), _run("no_communication", *apart),
                                        _run("synthetic_input", *fed)])
    assert found.verdict in (diagnosis.COMMUNICATION, diagnosis.INPUT, diagnosis.STRAGGLER, diagnosis.COMPUTE)
    assert all(0.0 <= v <= 1.0 for v in found.shares.values())
    assert found.fixes and found.summary
    document = diagnosis.to_json(found)
    assert document["schema"] == "tfdist.diagnose/1" and document["verdict"] == found.verdict


# ---------------------------------------------------------------- the worker's step clock

def test_the_clock_times_steps_after_warmup_and_ignores_repeated_steps_and_gaps():
    clock = worker_side.Timing(worker_side.Plan("baseline", warmup=2, steps=3))
    ends = [(1, 0.0), (2, 1.0), (2, 1.5), (3, 3.0), (4, 4.0), (5, 6.0)]
    done = [clock.step_done(step, at) for step, at in ends]
    assert done == [False, False, False, False, False, True]
    assert clock.times() == [2.0, 1.0, 2.0]  # steps 3, 4, 5: after two warm-up ones (a repeated step is none)
    clock = worker_side.Timing(worker_side.Plan("baseline", warmup=0, steps=2))
    clock.step_done(1, 0.0)  # the first step's start is not known (tracing, too): never timed, even at warmup 0
    clock.step_done(2, 1.0)
    clock.interrupted()  # a validation ran: the next step's interval holds it
    clock.step_done(3, 9.0)
    assert [clock.step_done(4, 10.5)] == [True] and clock.times() == [1.0, 1.5]
    clock = worker_side.Timing(worker_side.Plan("baseline", warmup=0, steps=1), per_report=4)
    clock.step_done(1, 0.0), clock.step_done(2, 2.0)
    assert clock.times() == [0.5]  # a report of 4 steps (steps_per_execution): 0.5 s a step


@pytest.mark.parametrize("env, expected", [
    ({}, None),
    ({envvars.DIAGNOSE_VARIANT: "sideways"}, None),
    ({envvars.DIAGNOSE_VARIANT: "synthetic_input", envvars.DIAGNOSE_STEPS: "7", envvars.DIAGNOSE_WARMUP: "1"},
     worker_side.Plan("synthetic_input", 1, 7)),
    ({envvars.DIAGNOSE_VARIANT: "baseline", envvars.DIAGNOSE_STEPS: "999", envvars.DIAGNOSE_WARMUP: "1"}, None),
])
def test_the_worker_reads_its_variant_from_the_environment(env, expected):
    assert worker_side.plan_from_env(env) == expected


# ---------------------------------------------------------------- the runner's pure parts

def test_a_variant_is_the_same_job_told_its_variant_and_one_node_keeps_the_per_replica_batch():
    config = check_config(config_from_dict({"name": "mnist", "entrypoint": "python train.py",
                                            "resources": {"slots_per_trial": 4}, "max_restarts": 3,
                                            "hyperparameters": {"global_batch_size": 256, "lr": 0.1}}))
    settings = diagnose_run.Settings(steps=12, warmup=2)
    made = check_config(diagnose_run.variant_config(config, "one_node", settings, slots=2))
    assert made.name == "mnist (diagnose: one_node)" and made.max_restarts == 0 and made.slots_per_trial == 2
    assert made.hyperparameters == {"global_batch_size": 128, "lr": 0.1}
    assert made.diagnose == {"variant": "one_node", "steps": 12, "warmup": 2, "run": ""}
    assert made.entrypoint == config.entrypoint and made.environment_variables == config.environment_variables
    plan = planner("mwms").plan  # the workers are told: TFDIST_DIAGNOSE_* in every process's environment
    assert plan and diagnose_variant.worker_env(made.diagnose)[envvars.DIAGNOSE_VARIANT] == "one_node"
    assert auto.decide(made).mode == auto.decide(config).mode


@pytest.mark.parametrize("value, message", [
    ({"variant": "sideways", "steps": 1, "warmup": 0}, "diagnose.variant"),
    ({"variant": "baseline", "steps": 0, "warmup": 0}, "diagnose.steps"),
    ({"variant": "baseline", "steps": 990, "warmup": 10}, "diagnose.warmup"),
    ({"variant": "baseline", "steps": 5, "warmup": 1, "extra": 1}, "diagnose"),
])
def test_a_bad_variant_on_the_wire_is_refused(value, message):
    config = config_from_dict({"entrypoint": "python train.py"})
    with pytest.raises(ConfigError, match=message):
        check_config(dataclasses.replace(config, diagnose=value))


@dataclasses.dataclass
class Row:
    rank: int
    step: int
    name: str
    value: float


def test_timings_are_read_back_from_the_rows_each_rank_sent_last():
    step, fact = worker_side.STEP_RECORD, worker_side.RECORD
    rows = [Row(0, 1, step, 0.2), Row(0, 0, step, 0.1), Row(0, 30, fact + "node_rank", 1), Row(0, 30, fact + "applied", 1),
            Row(0, 30, fact + "batch", 64), Row(0, 30, fact + "link_bits_per_s", 1e10),
            Row(1, 0, step, 0.3)]  # rank 1's facts have not arrived: not read yet
    [rank0] = diagnose_run.timings_from_rows(rows, {0: "a1", 1: "a2"}, {0: "no TensorFlow"})
    assert (rank0.rank, rank0.node, rank0.times, rank0.batch, rank0.params) == (0, "a2", (0.1, 0.2), 64, None)
    assert rank0.link == {"interface": "", "nominal_bits_per_s": 10_000_000_000} and rank0.applied


def test_parameter_server_jobs_wait_for_the_chief_alone():
    assert diagnose_run.expected_ranks("ps", 5) == 1 and diagnose_run.expected_ranks("mwms", 5) == 5


# ---------------------------------------------------------------- synthetic input for Keras fit

def _shapes(dataset):
    import tensorflow as tf

    return [tuple(s.shape) for s in tf.nest.flatten(dataset.element_spec)]


def test_fit_input_of_every_kind_becomes_its_first_batch_repeated():
    import numpy as np
    import tensorflow as tf

    x, y = np.arange(200, dtype="float32").reshape(100, 2), np.arange(100, dtype="float32")
    made, why = keras_diagnose.first_batch_repeated(tf.data.Dataset.from_tensor_slices((x, y)).batch(16))
    assert why == "" and _shapes(made) == [(16, 2), (16,)]
    first = list(made.take(3).as_numpy_iterator())
    assert all((a[0] == x[:16]).all() and (a[1] == y[:16]).all() for a in first)  # the same batch, repeated
    made, _ = keras_diagnose.first_batch_repeated(x, y, 10)  # numpy arrays with fit's batch_size
    assert _shapes(made) == [(10, 2), (10,)]
    made, _ = keras_diagnose.first_batch_repeated(x, y)  # Keras's default batch
    assert _shapes(made) == [(32, 2), (32,)]
    made, _ = keras_diagnose.first_batch_repeated(((x[i:i + 8], y[i:i + 8]) for i in range(0, 100, 8)))
    assert _shapes(made) == [(8, 2), (8,)]

    class Batches:  # a keras.utils.PyDataset's protocol
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return x[i * 25:(i + 1) * 25], y[i * 25:(i + 1) * 25]

    made, _ = keras_diagnose.first_batch_repeated(Batches())
    assert _shapes(made) == [(25, 2), (25,)]
    made, why = keras_diagnose.first_batch_repeated(object())
    assert made is None and why.startswith("fit's input is a builtins.object: tfdist takes the first batch of")


def test_the_replaced_input_takes_the_place_of_x_y_and_batch_size():
    with_input = keras_diagnose._with_input
    assert with_input(("x", "y", 32, 3), {"verbose": 0}, "D") == (("D", None, None, 3), {"verbose": 0})
    assert with_input(("x",), {"y": "y", "batch_size": 8, "epochs": 2}, "D") == \
        ((), {"x": "D", "y": None, "batch_size": None, "epochs": 2})


def test_numpy_input_keeps_its_weights_and_drops_what_keras_refuses_beside_a_dataset():
    import numpy as np

    x, y, w = np.ones((50, 2), "float32"), np.zeros(50, "float32"), np.full(50, 2.0, "float32")
    made, _ = keras_diagnose.first_batch_repeated(x, y, 8, w)
    assert _shapes(made) == [(8, 2), (8,), (8,)]
    assert keras_diagnose._with_input(("x", "y"), {"sample_weight": w, "validation_split": 0.2, "epochs": 1}, "D") == \
        ((), {"x": "D", "y": None, "batch_size": None, "epochs": 1})


def test_the_all_reduce_cut_is_tfdists_own_on_a_second_fit_and_refused_for_several_steps_an_execution(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setenv(envvars.DISTRIBUTION, "mwms")
    again = SimpleNamespace(optimizer=SimpleNamespace(_tfdist_aggregation=worker_side.CUT_AGGREGATION),
                            steps_per_execution=1)
    assert keras_diagnose.cut_communication(again) == (True, "")
    several = SimpleNamespace(optimizer=SimpleNamespace(), steps_per_execution=8)
    applied, why = keras_diagnose.cut_communication(several)
    assert not applied and why.startswith("steps_per_execution is 8")
