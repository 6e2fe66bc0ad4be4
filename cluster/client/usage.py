"""What every `tfdist` command shares below the command table: the error for a wrong command line and the
environment variables that stand in for --coordinator and --credentials."""

from __future__ import annotations

from tfdist.errors import UserError

COORDINATOR_ENV = "TFDIST_COORDINATOR"
CREDENTIALS_ENV = "TFDIST_CREDENTIALS"  # cluster/shared/auth.py reads it too


class UsageError(UserError):
    """A wrong command line: a bad or missing flag. Exit 2, one line, nothing started."""
