"""`python -m determined.launch.deepspeed [--] COMMAND`: DeepSpeed reads torchrun's environment, which tfdist's
torch mode sets (one process per slot), so it runs the wrapped command."""

import sys

from determined.launch._run import command_of, exec_command


if __name__ == "__main__":
    exec_command(command_of(__spec__.name, sys.argv[1:]))
