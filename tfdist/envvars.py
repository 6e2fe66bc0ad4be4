"""Names of the environment variables the launcher hands every worker.

This module is the contract between the control plane (`cluster/`, which
writes these) and the worker library (`tfdist/`, which reads them). It
imports nothing so both sides can use it.
"""

JOB_ID = "TFDIST_JOB_ID"
RANK = "TFDIST_RANK"  # process rank, 0 .. size-1; rank 0 is the chief
SIZE = "TFDIST_SIZE"  # number of worker processes in the job
LOCAL_RANK = "TFDIST_LOCAL_RANK"  # rank of the process among those on its node
LOCAL_SIZE = "TFDIST_LOCAL_SIZE"  # processes on this node
NODE_RANK = "TFDIST_NODE_RANK"  # index of the node in the job's placement
NODE_ADDRESS = "TFDIST_NODE_ADDRESS"  # the address the job's other nodes reach this node at
# A launch plan cannot know a node's interface names; an env value equal to this placeholder is
# replaced by the agent with the name of the interface carrying NODE_ADDRESS (e.g. HOROVOD_GLOO_IFACE).
NODE_INTERFACE_PLACEHOLDER = "@tfdist:node-interface@"
NUM_NODES = "TFDIST_NUM_NODES"
SLOTS = "TFDIST_SLOTS"  # total replicas (slots) of the job
LOCAL_SLOTS = "TFDIST_LOCAL_SLOTS"  # replicas this process drives
DISTRIBUTION = "TFDIST_DISTRIBUTION"  # distribution mode, e.g. "mwms"
ROLE = "TFDIST_ROLE"  # the process's task type: worker (mwms, horovod, single-node), chief, ps, evaluator
GRADIENT_COMPRESSION = "TFDIST_GRADIENT_COMPRESSION"  # horovod mode: none or fp16
AGGREGATION_FREQUENCY = "TFDIST_AGGREGATION_FREQUENCY"  # k > 1: gradients all-reduced every k steps
AVERAGE_TRAINING_METRICS = "TFDIST_AVERAGE_TRAINING_METRICS"  # "1": the metrics callback averages over ranks
GLOBAL_BATCH_SIZE = "TFDIST_GLOBAL_BATCH_SIZE"
PER_REPLICA_BATCH_SIZE = "TFDIST_PER_REPLICA_BATCH_SIZE"
PER_WORKER_BATCH_SIZE = "TFDIST_PER_WORKER_BATCH_SIZE"
HPARAMS = "TFDIST_HPARAMS"  # JSON object of the config's hyperparameters
USER_DATA = "TFDIST_USER_DATA"  # JSON object of the config's `data` (Determined's), for the script
# JSON: the config as Determined's `det.get_cluster_info().trial._config` holds it (cluster/shared/determined_config.py)
EXPERIMENT_CONFIG = "TFDIST_EXPERIMENT_CONFIG"
SEARCHER = "TFDIST_SEARCHER"  # a trial's searcher: JSON {name, metric, smaller_is_better, max_length: {unit: n}}
# (or, for Determined's time_metric that names a metric, time_metric and max_time instead of max_length)
READY_FILE = "TFDIST_READY_FILE"  # init() touches it once the worker joined
PROGRESS_FILE = "TFDIST_PROGRESS_FILE"  # tfdist.report_progress() writes "step"; the agent heartbeats its age
METRICS_FILE = "TFDIST_METRICS_FILE"  # tfdist.report_metrics() appends JSON lines; the agent ships them
GPUS = "TFDIST_GPUS"  # GPU indices this process holds (as CUDA_VISIBLE_DEVICES), empty on CPU slots
DATA_DIR = "TFDIST_DATA_DIR"  # root of rank/node-scoped downloads
STORE = "TFDIST_STORE"  # host:port of the job's key-value store (collectives of small values)
# The job run's store secret: the first segment of every request's path. Put in a worker's environment by
# the agent that starts it (never in a plan, a command line or a log); a plan marks where it goes inside a
# value (Horovod's rendezvous address) with this placeholder, which the agent fills in.
STORE_SECRET = "TFDIST_STORE_SECRET"
STORE_SECRET_PLACEHOLDER = "@tfdist:store-secret@"
CLUSTER = "TFDIST_CLUSTER"  # JSON: job id, every node's address, GPUs and ranks (ctx.cluster_info)
ATTEMPT = "TFDIST_ATTEMPT"  # the job's run: 0 first, +1 per restart (max_restarts) or resume
CHECKPOINT_DIR = "TFDIST_CHECKPOINT_DIR"  # <checkpoint_storage>/<job id>: where tfdist's checkpoints go
# `tfdist diagnose` (tfdist/diagnose.py): the variant this run is, the steps it times after the warm-up ones,
# and the interface carrying the node's address (the agent fills in NODE_INTERFACE_PLACEHOLDER).
DIAGNOSE_VARIANT = "TFDIST_DIAGNOSE_VARIANT"
DIAGNOSE_STEPS = "TFDIST_DIAGNOSE_STEPS"
DIAGNOSE_WARMUP = "TFDIST_DIAGNOSE_WARMUP"
DIAGNOSE_INTERFACE = "TFDIST_DIAGNOSE_INTERFACE"
TF_CONFIG = "TF_CONFIG"
