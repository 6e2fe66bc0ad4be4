"""What every `tfdist` command shares below the command table: the error for a wrong command line and the
environment variables that stand in for --coordinator and --token-file."""

from __future__ import annotations

from tfdist.errors import UserError

COORDINATOR_ENV = "TFDIST_COORDINATOR"
TOKEN_FILE_ENV = "TFDIST_TOKEN_FILE"


class UsageError(UserError):
    """A wrong command line: a bad or missing flag. Exit 2, one line, nothing started."""
