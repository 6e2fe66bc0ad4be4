"""`tfdist diagnose`: what it costs against doing the same by hand, and what its worker-side clock costs.

1. Wall time of `tfdist diagnose --config examples/digits/config.yaml --json` (on one machine: baseline,
   no_communication and synthetic_input; one_node is skipped, the job being on one node already) against the
   same three variants run by hand, one plain `tfdist launch` of the same config each, cut by the script's own
   `epochs` hyperparameter to 2 epochs (44 steps: the first epoch traces and warms up, the second is the one
   Keras's progress bar times, as diagnose times 20 steps after 5): the script as it is; a copy whose optimizer
   goes through `tfdist.aggregate_gradients` with `optimizations.aggregation_frequency: 1000` (no all-reduce
   in the run); a copy whose `fit` reads its first batch repeated (the same steps per epoch). The two copies
   are the edits a user makes by hand, made here by exact replacements in examples/digits/train.py. Every run
   works in a scratch folder (the script's TensorBoard files and saved model go there): the configs name the
   script by its absolute path. Rounds alternate which goes first; medians. Beside the walls: each variant's
   step time as diagnose measured it, and the ms/step of the by-hand run's last epoch as Keras's progress bar
   prints it (what a user reads; it includes the epoch's validation).
2. The worker-side clock's cost: Keras `fit` steps/s of one short MWMS job (2 workers, the digits model, a
   repeated tf.data input, --steps steps) with the environment of a diagnose baseline variant
   (TFDIST_DIAGNOSE_VARIANT=baseline, with more steps to time than fit runs, so fit ends by itself) against the
   same job without it; and without it but with this script's step callback not async-safe, so Keras runs
   the batch-end callbacks on the training thread, as it does under the clock: what that alone costs.
   Rotating order, medians. Steps/s over the steps after the first 10, from this script's callback. Then the
   clock's per-step hooks called directly in this process, off and on, in CPU time (what no machine load
   disturbs), and the one-off send of its record.

    .venv/bin/python benchmarks/diagnose.py [--repeats 3] [--clock-repeats 7] [--steps 600] [--out PATH]

Prints tables and writes benchmarks/results/diagnose.json. This file is also the part-2 worker (--worker).
"""

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CONFIG = os.path.join(REPO, "examples", "digits", "config.yaml")
SCRIPT = os.path.join(REPO, "examples", "digits", "train.py")
BY_HAND_EPOCHS = 2
CUT_AGGREGATION = 1000  # as diagnose's no_communication (tfdist/diagnose.py CUT_AGGREGATION)
SKIP = 10  # part 2: fit's first steps (tracing, the first all-reduces) left out of steps/s
MAX_TIMED = 999  # warmup + steps a diagnose variant may time (tfdist/diagnose.py MAX_STEPS)
BENCH = re.compile(r"BENCH (\{.*\})")
PROGRESS = re.compile(r"^\[rank=0\] (\d+)/\1 .*? (\d+)ms/step", re.M)  # Keras's last progress line of an epoch

# The by-hand edits of examples/digits/train.py: (the text as it is, the text instead), each found exactly once.
EDITS = {
    "no_communication": [
        ('optimizer=keras.optimizers.Adam(ctx.hparams["learning_rate"])',
         'optimizer=tfdist.aggregate_gradients(keras.optimizers.Adam(ctx.hparams["learning_rate"]))')],
    "synthetic_input": [
        ("train_ds, test_ds = datasets(ctx.effective_global_batch_size)\n",
         "train_ds, test_ds = datasets(ctx.effective_global_batch_size)\n"
         "steps_per_epoch = int(train_ds.cardinality())\n"
         "train_ds = tf.data.Dataset.from_tensors(next(iter(train_ds))).repeat()\n"),
        ("model.fit(train_ds, epochs=", "model.fit(train_ds, steps_per_epoch=steps_per_epoch, epochs=")],
}


# ---------------------------------------------------------------- part 2's worker (inside `tfdist launch`)

def worker(steps: int, sync: bool) -> None:
    import tfdist

    ctx = tfdist.init(default_hparams={"global_batch_size": 64})
    import keras
    import numpy as np
    import tensorflow as tf

    digits = np.loadtxt(os.path.join(REPO, "examples", "data", "digits.csv.gz"), delimiter=",")
    images = (digits[:, :64].reshape(-1, 8, 8) / 16.0).astype("float32")[..., None]
    labels = digits[:, 64].astype("int32")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train = (tf.data.Dataset.from_tensor_slices((images, labels)).repeat().shuffle(2048, seed=1)
             .batch(ctx.effective_global_batch_size, drop_remainder=True).with_options(options))
    with ctx.strategy.scope():
        model = keras.Sequential([
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ])
        model.compile(optimizer=keras.optimizers.Adam(0.003),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    ends: list[float] = []

    class Stamp(keras.callbacks.Callback):
        # Async-safe (unless --sync), as tfdist's own progress hooks are without the clock: Keras may then run
        # fit's batch-end callbacks off the training thread, which the clock turns off (its hooks time each step
        # where it ends), so what that costs is in the measure. Its stamp: each step's logs are ready.
        async_safe = not sync

        def on_train_batch_end(self, batch, logs=None):
            ends.append(time.perf_counter())

    model.fit(train, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[Stamp()])
    timed = sorted(ends)[SKIP:]
    if ctx.is_chief:
        print("BENCH " + json.dumps({"steps": len(ends), "steps_per_s": (len(timed) - 1) / (timed[-1] - timed[0]),
                                     "clock": os.environ.get("TFDIST_DIAGNOSE_VARIANT", "")}), flush=True)


def direct(steps: int, rounds: int) -> dict[str, list[float]]:
    """The clock's own work per step, its hooks called directly in this process as Keras's `fit` calls them on
    each batch (the hold's check at the batch's start, the step's report at its end: tfdist.progress's
    train_batch_done without its progress file, and fit_batch_done), off and on alternating, `steps` steps a
    round: CPU microseconds per step (steps 1 .. steps-1) and of the last step, which completes the timing and
    sends the record (one line per timed step appended to a metrics file). CPU time: the machine's other load
    does not count."""
    from tfdist import diagnose as clock
    from tfdist.compat import keras_diagnose

    class Model:  # what fit_batch_done reads of a Keras model
        trainable_weights = ()
        steps_per_execution = 1

    hold = keras_diagnose.HoldHooks()
    saved = dict(os.environ)
    found = {"off_us": [], "on_us": [], "send_us": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(rounds):
                for on in ((False, True) if i % 2 == 0 else (True, False)):
                    os.environ.update(TFDIST_METRICS_FILE=os.path.join(tmp, "metrics"))
                    for name in ("VARIANT", "WARMUP", "STEPS", "INTERFACE"):
                        os.environ.pop(f"TFDIST_DIAGNOSE_{name}", None)
                    if on:  # all timed at the last step: 5 warmup steps, then one interval a step
                        os.environ.update(TFDIST_DIAGNOSE_VARIANT="baseline", TFDIST_DIAGNOSE_WARMUP="5",
                                          TFDIST_DIAGNOSE_STEPS=str(steps - 5), TFDIST_DIAGNOSE_INTERFACE="lo")
                    clock._timing, clock._checked = None, False  # as a new process starts
                    model = Model()
                    hold.on_train_begin()
                    start = time.process_time()
                    for step in range(1, steps):
                        hold.on_train_batch_begin(step - 1)
                        clock.step_reported(step)
                        keras_diagnose.fit_batch_done(model)
                    middle = time.process_time()
                    hold.on_train_batch_begin(steps - 1)
                    done = clock.step_reported(steps)
                    keras_diagnose.fit_batch_done(model)
                    end = time.process_time()
                    if on and not (done and clock._timing.sent):
                        raise SystemExit("the clock did not complete at the last step: tfdist/diagnose.py changed")
                    found["on_us" if on else "off_us"].append((middle - start) / (steps - 1) * 1e6)
                    if on:
                        found["send_us"].append((end - middle) * 1e6)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        clock._timing, clock._checked = None, False
    return found


# ---------------------------------------------------------------- the runs

def base_env(scratch: str, **extra: str) -> dict[str, str]:
    """The launcher's environment (local workers inherit it): no diagnose variable of the caller's, the runs
    kept out of the user's own (`tfdist jobs`), TensorFlow's C++ logs off, as in the other benchmarks."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFDIST_DIAGNOSE_")}
    env.update(PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3", TFDIST_RUNTIME_DIR=os.path.join(scratch, "run"),
               XDG_STATE_HOME=os.path.join(scratch, "state"), **extra)
    return env


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cluster.client.cli", *args]


PORT_TAKEN = "Could not start gRPC server"  # TensorFlow's server found its leased port taken (by another
# checkout's tests on this machine: the runs lease ports in a scratch state of their own); such a run is redone
RETRIES = []  # {argv, wall_s} of each run redone: in the JSON


def timed_run(argv: list[str], scratch: str, env: dict, ok=lambda proc: proc.returncode == 0, timeout: int = 900):
    """(the finished process, its wall seconds); `scratch` is its working directory."""
    for attempt in range(3):
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout)
        wall = time.perf_counter() - start
        if ok(proc) or PORT_TAKEN not in proc.stdout + proc.stderr or attempt == 2:
            break
        RETRIES.append({"argv": argv, "wall_s": wall})
        print(f"redone (a worker's port was taken): {' '.join(argv[3:])}", file=sys.stderr)
    if not ok(proc):
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc, wall


def configs_in(scratch: str) -> dict[str, str]:
    """variant -> the config file of its `tfdist launch` ("baseline" is also diagnose's): the digits config with
    its entrypoint absolute and saving into `scratch` (the runs' working directory, which also gets the
    script's TensorBoard files), or naming an edited copy of the script (EDITS)."""
    import yaml

    with open(CONFIG) as f:
        config = yaml.safe_load(f)
    with open(SCRIPT) as f:
        source = f.read()
    folder = os.path.join(scratch, "by-hand", "digits")
    os.makedirs(folder, exist_ok=True)
    data = os.path.join(scratch, "by-hand", "data")  # the script reads ../data/digits.csv.gz beside itself
    if not os.path.exists(data):
        os.symlink(os.path.join(REPO, "examples", "data"), data)
    configs = {}
    for variant in ("baseline", *EDITS):
        script = SCRIPT
        if variant in EDITS:
            edited = source
            for old, new in EDITS[variant]:
                if edited.count(old) != 1:
                    raise SystemExit(f"examples/digits/train.py changed: the by-hand edit for {variant} expects "
                                     f"{old!r} once; update EDITS in {__file__}")
                edited = edited.replace(old, new)
            script = os.path.join(folder, f"train_{variant}.py")
            with open(script, "w") as f:
                f.write(edited)
        changed = {**config, "entrypoint": f"{script} --save {os.path.join(scratch, variant + '.keras')}"}
        if variant != "baseline":
            changed["name"] = f"{config.get('name', 'digits')} (by hand: {variant})"
        if variant == "no_communication":
            changed["optimizations"] = {**(config.get("optimizations") or {}),
                                        "aggregation_frequency": CUT_AGGREGATION}
        configs[variant] = os.path.join(scratch, f"{variant}.yaml")
        with open(configs[variant], "w") as f:
            yaml.safe_dump(changed, f)
    return configs


def diagnose_once(scratch: str, config: str) -> dict:
    proc, wall = timed_run(cli("diagnose", "--config", config, "--json"), scratch, base_env(scratch))
    found = json.loads(proc.stdout)
    return {"wall_s": wall, "verdict": found["verdict"],
            "step_ms": {v["name"]: v["step_time_s"] * 1000 for v in found["variants"] if v["step_time_s"]},
            "skipped": {v["name"]: v["skipped"] for v in found["variants"] if v["skipped"]}}


def by_hand_once(scratch: str, configs: dict[str, str]) -> dict:
    """The three launches one after another. The script exits 1 below its accuracy target (2 epochs, or
    training on one batch, do not reach it): a run counts when it trained to its end and printed its result."""
    walls, bars = {}, {}
    for variant, config in configs.items():
        proc, walls[variant] = timed_run(cli("launch", "--config", config, "--hparam", f"epochs={BY_HAND_EPOCHS}"),
                                         scratch, base_env(scratch), ok=lambda p: "final test accuracy" in p.stdout)
        epochs = PROGRESS.findall(proc.stdout)
        bars[variant] = float(epochs[-1][1]) if len(epochs) == BY_HAND_EPOCHS else None
    return {"wall_s": sum(walls.values()), "variant_wall_s": walls, "progress_bar_ms": bars}


CLOCK = {"off": (False, False), "off, callbacks on the training thread": (False, True), "on": (True, False)}


def clock_once(scratch: str, steps: int, on: bool, sync: bool = False) -> dict:
    """One clock run: `on`, with the clock's environment; `sync`, the benchmark's own callback not async-safe."""
    extra = {}
    if on:  # what diagnose's baseline variant gives each worker (cluster/shared/diagnosis.py worker_env), with more
        # steps to time than fit runs: every step is timed, and fit ends by itself (a rank whose steps are all
        # timed waits to be canceled, as diagnose does; the record's one-off send is measured by `direct`)
        extra = {"TFDIST_DIAGNOSE_VARIANT": "baseline", "TFDIST_DIAGNOSE_WARMUP": "5",
                 "TFDIST_DIAGNOSE_STEPS": str(MAX_TIMED - 5), "TFDIST_DIAGNOSE_INTERFACE": "lo"}
    proc, wall = timed_run(cli("launch", "--slots", "2", "--distribution", "mwms", "--", __file__, "--worker",
                               "--steps", str(steps), *(["--sync"] if sync else [])),
                           scratch, base_env(scratch, **extra))
    found = json.loads(BENCH.search(proc.stdout).group(1))
    if found["steps"] != steps or bool(found["clock"]) != on:
        raise SystemExit(f"clock {'on' if on else 'off'}: fit ran {found['steps']} steps of {steps}, "
                         f"TFDIST_DIAGNOSE_VARIANT={found['clock']!r}")
    return {**found, "wall_s": wall}


def median_of(samples: list[dict], *keys: str):
    values = list(samples)
    for key in keys:
        values = [v[key] for v in values]
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of diagnose against by hand")
    parser.add_argument("--clock-repeats", type=int, default=7, help="rounds of the clock off and on")
    parser.add_argument("--steps", type=int, default=600, help="fit steps of each clock run (at most 993)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "diagnose.json"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sync", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps, args.sync)
        return 0
    if args.repeats < 1 or args.clock_repeats < 1:
        parser.error("--repeats and --clock-repeats: give 1 or more")
    if not SKIP + 2 <= args.steps < MAX_TIMED - 5:
        parser.error(f"--steps {args.steps}: give {SKIP + 2} to {MAX_TIMED - 6} (a diagnose variant times at most "
                     f"{MAX_TIMED} steps, and the clock's runs must end before it has timed them all)")
    import compare

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tfdist-bench-diagnose-") as scratch:
        configs = configs_in(scratch)
        clock_once(scratch, SKIP + 40, False)  # warms the page cache: the first TensorFlow import is slower
        whole = {"diagnose": [], "by hand": []}
        for i in range(args.repeats):
            order = ["diagnose", "by hand"] if i % 2 == 0 else ["by hand", "diagnose"]
            for name in order:
                sample = (diagnose_once(scratch, configs["baseline"]) if name == "diagnose"
                          else by_hand_once(scratch, configs))
                whole[name].append(sample)
                print(f"round {i + 1}/{args.repeats} {name}: {sample['wall_s']:.1f} s", file=sys.stderr)
        clock = {name: [] for name in CLOCK}
        for i in range(args.clock_repeats):
            for name in (list(CLOCK) if i % 2 == 0 else list(reversed(CLOCK))):
                clock[name].append(clock_once(scratch, args.steps, *CLOCK[name]))
                print(f"clock round {i + 1}/{args.clock_repeats} {name}: {clock[name][-1]['steps_per_s']:.1f} "
                      "steps/s", file=sys.stderr)
    hooks = direct(args.steps, 200)
    load_after = os.getloadavg()

    variants = ("baseline", "no_communication", "synthetic_input")
    diag_wall, hand_wall = median_of(whole["diagnose"], "wall_s"), median_of(whole["by hand"], "wall_s")
    rows = [("`tfdist diagnose --json` (3 variants; one_node skipped)", diag_wall, 1.0),
            (f"by hand: 3 x `tfdist launch`, epochs={BY_HAND_EPOCHS}", hand_wall, hand_wall / diag_wall)]
    rows += [(f"  by hand: {v}", median_of(whole["by hand"], "variant_wall_s", v), None) for v in variants]
    print(f"\n| {f'what (medians of {args.repeats})':56} | wall (s) | ratio |")
    print(f"|{'-' * 58}|---------:|------:|")
    for label, wall, ratio in rows:
        print(f"| {label:56} | {wall:8.1f} | {f'{ratio:.3f}' if ratio is not None else '':>5} |")
    print("\n| variant          | diagnose step (ms) | by hand: Keras progress bar, last epoch (ms/step) |")
    print("|------------------|-------------------:|--------------------------------------------------:|")
    step_ms, bar_ms = {}, {}
    for v in variants:
        step_ms[v] = median_of(whole["diagnose"], "step_ms", v)
        bar_ms[v] = median_of(whole["by hand"], "progress_bar_ms", v)
        shown = (lambda x: f"{x:.1f}" if x is not None else "-")
        print(f"| {v:16} | {shown(step_ms[v]):>18} | {shown(bar_ms[v]):>49} |")
    verdicts = sorted({s["verdict"] for s in whole["diagnose"]})
    print(f"diagnose's verdicts: {', '.join(verdicts)}")

    rate = {k: median_of(v, "steps_per_s") for k, v in clock.items()}
    print(f"\n| {f'diagnose clock (medians of {args.clock_repeats}, {args.steps} steps)':40} | steps/s | ms/step | "
          "ratio |")
    print(f"|{'-' * 42}|--------:|--------:|------:|")
    for k in CLOCK:
        print(f"| {k:40} | {rate[k]:7.1f} | {1000 / rate[k]:7.3f} | {rate[k] / rate['off']:5.3f} |")
    spread = {k: (min(s["steps_per_s"] for s in v), max(s["steps_per_s"] for s in v)) for k, v in clock.items()}
    sync = "off, callbacks on the training thread"
    paired = {against: statistics.median(on["steps_per_s"] / off["steps_per_s"]
                                         for on, off in zip(clock["on"], clock[against])) for against in ("off", sync)}
    print("runs: " + ", ".join(f"{k} {lo:.1f}-{hi:.1f} steps/s" for k, (lo, hi) in spread.items())
          + f"; on over each round's off, median: {paired['off']:.3f}; over its off with callbacks on the training "
          f"thread: {paired[sync]:.3f}")
    hook = {k: statistics.median(v) for k, v in hooks.items()}
    print(f"the clock's hooks called directly (200 rounds of {args.steps} steps, CPU time, medians): off "
          f"{hook['off_us']:.2f} us/step, on {hook['on_us']:.2f} us/step (+{hook['on_us'] - hook['off_us']:.2f} us = "
          f"{(hook['on_us'] - hook['off_us']) / (10 ** 6 / rate['off']) * 100:.3f}% of a step here); the record's "
          f"send at the last step {hook['send_us'] / 1000:.2f} ms once")
    print(f"load average (1 min) before / after: {load_before[0]:.1f} / {load_after[0]:.1f} on {os.cpu_count()} CPUs")

    compare.save_json(args.out, {
        "benchmark": "diagnose", "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                 text=True).stdout.strip(),
        "repeats": args.repeats, "clock_repeats": args.clock_repeats, "clock_steps": args.steps,
        "by_hand_epochs": BY_HAND_EPOCHS,
        "wall": {"diagnose_s": diag_wall, "by_hand_s": hand_wall, "by_hand_over_diagnose": hand_wall / diag_wall,
                 "by_hand_variant_s": {v: median_of(whole["by hand"], "variant_wall_s", v) for v in variants}},
        "step_ms": {"diagnose": step_ms, "by_hand_progress_bar": bar_ms},
        "clock": {"steps_per_s": rate, "on_over_off": rate["on"] / rate["off"],
                  "on_over_off_sync": rate["on"] / rate[sync], "on_over_each_round": paired, "hooks_cpu_us": hook},
        "load_average": {"before": load_before, "after": load_after}, "redone": RETRIES,
        "samples": {"wall": whole, "clock": clock, "hooks_cpu_us": hooks}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
