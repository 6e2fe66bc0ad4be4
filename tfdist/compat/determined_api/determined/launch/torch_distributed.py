"""`python -m determined.launch.torch_distributed [OVERRIDES... --] COMMAND`: torchrun's environment, one
process per slot, is already tfdist's (its torch mode), so it runs the wrapped command."""

import sys

from determined.launch._run import command_of, exec_command


if __name__ == "__main__":
    exec_command(command_of(__spec__.name, sys.argv[1:]))
