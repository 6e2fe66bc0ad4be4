"""`python -m determined.launch.torch_distributed [TORCHRUN OPTIONS] [--] COMMAND`: torchrun's environment, one
process per slot, is already tfdist's (its torch mode), so it runs the wrapped command."""

import sys

from determined.launch._run import command_of, exec_command

VALUED = ("--nproc_per_node", "--nproc-per-node", "--nnodes", "--master_port", "--master-port",
          "--rdzv_endpoint", "--rdzv-endpoint", "--rdzv_backend", "--rdzv-backend", "--node_rank", "--node-rank",
          "--max_restarts", "--max-restarts")  # its options that take a value

if __name__ == "__main__":
    exec_command(command_of(__spec__.name, sys.argv[1:], valued=VALUED))
