"""aggregation_frequency k under MultiWorkerMirroredStrategy: gradients accumulate in per-replica
variables for k-1 steps with no collective at all, and the k-th step all-reduces their mean once.

Keras 3's own gradient accumulation cannot do this under MWMS: it runs the update inside a `cond`,
and TensorFlow refuses MWMS's all-reduce (a merge_call) inside control flow. So the choice between
"accumulate" and "accumulate, all-reduce and apply" is made in Python, between two compiled
functions, by the train function `model.fit` calls once per step. Steps that only accumulate report
this worker's own metrics (no cross-worker mean: that would be a collective too); every k-th step
reports the mean over workers, as without aggregation.

Installed by `tfdist.aggregate_gradients(optimizer)` in mwms mode; it takes effect for models whose
optimizer it marked. Needs steps_per_execution=1 (Keras's default).
"""

from __future__ import annotations

import logging

log = logging.getLogger("tfdist")

MARK = "_tfdist_aggregation"  # set on an optimizer: k
_installed = False


def install() -> None:
    """Routes `make_train_function` of Keras 3's TensorFlow trainer to ours for marked optimizers."""
    global _installed
    if _installed:
        return
    from keras.src.backend.tensorflow import trainer as tf_trainer

    upstream = tf_trainer.TensorFlowTrainer.make_train_function

    def make_train_function(self, force=False):
        k = getattr(self.optimizer, MARK, 1)
        if k <= 1:
            return upstream(self, force)
        if self.train_function is not None and not force:
            return self.train_function
        self.train_function = aggregating_train_function(self, k, tf_trainer.reduce_per_replica)
        return self.train_function

    tf_trainer.TensorFlowTrainer.make_train_function = make_train_function
    _installed = True


def aggregating_train_function(model, k: int, reduce_per_replica):
    import tensorflow as tf
    from keras.src import tree
    from keras.src.losses import loss as loss_module
    from keras.src.trainers import data_adapters

    if model.steps_per_execution != 1:
        raise ValueError(f"optimizations.aggregation_frequency under MWMS needs steps_per_execution=1. "
                         f"Received: steps_per_execution={model.steps_per_execution}")
    strategy = model.distribute_strategy
    weights = model.trainable_weights
    with strategy.scope():  # one local copy per replica; never read across replicas
        sums = [tf.Variable(tf.zeros(w.shape, w.dtype), trainable=False,
                            synchronization=tf.VariableSynchronization.ON_READ,
                            aggregation=tf.VariableAggregation.SUM) for w in weights]

    def gradients(data):
        x, y, sample_weight = data_adapters.data_adapter_utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True) if model._call_has_training_arg else model(x)
            loss = model._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
            model._loss_tracker.update_state(
                loss_module.unscale_loss_for_distribution(loss),
                sample_weight=tf.shape(next(i for i in tree.flatten(x) if i is not None))[0])
            loss = model.optimizer.scale_loss(loss)
        return tape.gradient(loss, weights), (x, y, y_pred, sample_weight)

    def accumulate(data):
        grads, (x, y, y_pred, sample_weight) = gradients(data)
        for total, g in zip(sums, grads):
            total.assign_add(g)
        return model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def update(data):
        grads, (x, y, y_pred, sample_weight) = gradients(data)
        means = [(total + g) / k for total, g in zip(sums, grads)]
        model.optimizer.apply_gradients(zip(means, weights))  # the one all-reduce of these k steps
        for total in sums:
            total.assign(tf.zeros_like(total))
        return model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def compiled(step, reduction):
        @tf.function(reduce_retracing=True)
        def one_step(iterator):
            outputs = strategy.run(step, args=(iterator.get_next(),))
            return reduce_per_replica(outputs, strategy, reduction=reduction)
        return one_step

    accumulate_fn, update_fn = compiled(accumulate, "first"), compiled(update, "auto")
    calls = [0]

    def train_function(iterator):
        calls[0] += 1
        return (update_fn if calls[0] % k == 0 else accumulate_fn)(iterator)

    train_function.accumulate_fn, train_function.update_fn = accumulate_fn, update_fn  # for tests and benchmarks
    return train_function


def collective_ops(fn) -> list[str]:
    """The collective ops the traced graphs of a tf.function hold (none for the accumulate step)."""
    return [f"{op.type}:{op.name}" for concrete in fn._list_all_concrete_functions()
            for op in concrete.graph.get_operations() if op.type.startswith("Collective")]
