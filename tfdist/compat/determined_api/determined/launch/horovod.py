"""`python -m determined.launch.horovod [--autohorovod] [--] COMMAND`: one process per slot with Horovod's
environment is already tfdist's (its horovod mode), so it runs the wrapped command."""

import sys

from determined.launch._run import command_of, exec_command


if __name__ == "__main__":
    exec_command(command_of(__spec__.name, sys.argv[1:]))
