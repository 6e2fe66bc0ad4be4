"""A Horovod Core API script under `determined.launch.horovod --autohorovod`: the context from Horovod
(DistributedContext.from_horovod(hvd)), Horovod's all-reduce and the context's allgather."""

import horovod.tensorflow as hvd
import tensorflow as tf

import determined as det

hvd.init()
distributed = det.core.DistributedContext.from_horovod(hvd)
with det.core.init(distributed=distributed) as core_context:
    total = hvd.allreduce(tf.constant(float(hvd.rank() + 1)), op=hvd.Sum)
    ranks = core_context.distributed.allgather(distributed.rank)
    if distributed.rank == 0:
        core_context.train.report_validation_metrics(steps_completed=1, metrics={"sum": float(total)})
    print(f"rank {distributed.rank} of {distributed.size} (node {distributed.cross_rank}): sum {float(total):g}, "
          f"ranks {ranks}", flush=True)
