"""Stage 4: the script is its own launcher. Run as `launcher`, once per node, it starts a worker per slot of its
node (through determined.launch.wrap_rank) and fails fast when one fails; each worker builds its
DistributedContext from get_cluster_info() and adds every worker's increment (allgather), the chief alone
reporting and checkpointing; every rank asks whether to stop."""

import json
import logging
import queue
import subprocess
import sys
import threading
import time

import determined as det

STEPS = 30


def worker_main(slots_per_node, num_nodes, cross_rank, chief_ip, rank, local_rank, info):
    distributed = det.core.DistributedContext(rank=rank, size=num_nodes * slots_per_node, local_rank=local_rank,
                                              local_size=slots_per_node, cross_rank=cross_rank,
                                              cross_size=num_nodes, chief_ip=chief_ip)
    with det.core.init(distributed=distributed) as core_context:
        x, start = 0, 0
        if info.latest_checkpoint is not None:
            with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
                x, start = [int(v) for v in (path / "state").read_text().split(",")]
        local = core_context.distributed.allgather_local(local_rank)
        assert local == list(range(slots_per_node)), local
        for batch in range(start, STEPS):
            x += sum(core_context.distributed.allgather(info.trial.hparams.get("increment_by", 1)))
            done = batch + 1
            if core_context.distributed.rank == 0:
                logging.info("x is now %d", x)
            if done % 10 == 0:
                if core_context.distributed.rank == 0:
                    core_context.train.report_training_metrics(steps_completed=done, metrics={"x": x})
                    core_context.train.report_validation_metrics(steps_completed=done, metrics={"x": x})
                    with core_context.checkpoint.store_path({"steps_completed": done}) as (path, storage_id):
                        (path / "state").write_text(f"{x},{done}")
                if core_context.preempt.should_preempt():
                    return 0
        print(f"worker {rank} of {distributed.size} done: x={x}", flush=True)
    return 0


def launcher_main(slots_per_node, cross_rank):
    procs = []
    for local_rank in range(slots_per_node):
        rank = cross_rank * slots_per_node + local_rank
        procs.append(subprocess.Popen([sys.executable, "-m", "determined.launch.wrap_rank", str(rank), "--",
                                       sys.executable, __file__, "worker", str(rank), str(local_rank)]))
    exits: queue.Queue = queue.Queue()
    threads = [threading.Thread(target=lambda p=p: exits.put((p, p.wait()))) for p in procs]
    for t in threads:
        t.start()
    first_failure = 0
    for _ in range(slots_per_node):
        proc, code = exits.get()
        procs.remove(proc)
        if code != 0 and first_failure == 0:
            first_failure = code
            for other in procs:
                other.kill()
    for t in threads:
        t.join()
    return first_failure


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    assert info is not None, "this example only runs on-cluster"
    slots_per_node = len(info.slot_ids)
    num_nodes = len(info.container_addrs)
    cross_rank = info.container_rank
    chief_ip = info.container_addrs[0]
    if sys.argv[1] == "launcher":
        print(f"launcher on node {cross_rank} of {num_nodes}: {slots_per_node} workers at {time.time():.0f}, "
              f"container_addrs {json.dumps(info.container_addrs)}", flush=True)
        sys.exit(launcher_main(slots_per_node, cross_rank))
    if sys.argv[1] == "worker":
        sys.exit(worker_main(slots_per_node, num_nodes, cross_rank, chief_ip, int(sys.argv[2]), int(sys.argv[3]),
                             info))
    raise ValueError(f"unrecognized first argument: {sys.argv[1]}")
