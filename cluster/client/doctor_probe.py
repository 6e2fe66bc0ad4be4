"""Run by `tfdist doctor` in the workers' Python (its source, with `python -c`), never imported by the CLI:
it imports TensorFlow, Keras, tf_keras and Horovod as a worker would and prints what it found as one
JSON line (the fields of doctor_checks.PythonFacts). Before each import it prints the step, so a probe
that hangs is named by the step it hung in."""

import json
import os
import sys

STEP, FACTS = "TFDIST_DOCTOR_STEP ", "TFDIST_DOCTOR_FACTS "


def step(what):
    print(STEP + what, flush=True)


def error(e):
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[-1] if lines else ''}"[:300]


def probe():
    import importlib.util
    from importlib import metadata

    facts = {"python": sys.executable, "version": "%d.%d.%d" % sys.version_info[:3]}
    spec = importlib.util.find_spec("tfdist")
    if spec is not None and spec.origin:
        here = os.path.dirname(spec.origin)
        facts["tfdist"] = os.path.dirname(here)
        facts["bootstrap"] = os.path.isfile(os.path.join(here, "compat", "bootstrap", "sitecustomize.py"))
    if importlib.util.find_spec("tensorflow") is None:
        return facts  # not installed: no error to show
    step("importing tensorflow")
    try:
        import tensorflow as tf

        facts["tensorflow"] = tf.__version__
        packages = metadata.packages_distributions().get("tensorflow") or []
        facts["tensorflow_package"] = packages[0].replace("_", "-") if packages else ""
        facts["cuda"] = bool(tf.test.is_built_with_cuda())
        step("listing TensorFlow's GPUs")
        facts["tf_gpus"] = len(tf.config.list_physical_devices("GPU"))
    except Exception as e:
        facts["tensorflow_error"] = error(e)
        return facts
    step("importing keras")
    try:
        import keras

        facts["keras"] = keras.__version__
        if spec is not None:
            from tfdist.compat import keras_mwms

            facts["mwms_fix"] = bool(keras_mwms.apply())
    except Exception as e:
        facts["keras_error"] = error(e)
    if importlib.util.find_spec("tf_keras") is not None:
        step("importing tf_keras")
        try:
            import tf_keras

            facts["tf_keras"] = tf_keras.__version__
        except Exception as e:
            facts["tf_keras_error"] = error(e)
    if importlib.util.find_spec("horovod") is not None:
        step("importing horovod.tensorflow")
        try:
            import horovod
            import horovod.tensorflow as hvd

            facts["horovod"] = horovod.__version__
            facts["gloo"] = bool(hvd.gloo_built())
            marker = os.path.join(os.path.dirname(horovod.__file__), "TFDIST_BUILD")
            if os.path.isfile(marker):
                with open(marker) as f:
                    facts["horovod_build"] = f.read().strip()
        except Exception as e:
            facts["horovod_error"] = error(e)
    return facts


if __name__ == "__main__":
    print(FACTS + json.dumps(probe()), flush=True)
