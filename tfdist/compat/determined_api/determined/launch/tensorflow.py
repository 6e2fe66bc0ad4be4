"""`python -m determined.launch.tensorflow [--] COMMAND`: TF_CONFIG for MultiWorkerMirroredStrategy is already
set by tfdist (its mwms mode), so it runs the wrapped command."""

import sys

from determined.launch._run import command_of, exec_command

if __name__ == "__main__":
    exec_command(command_of(__spec__.name, sys.argv[1:]))
