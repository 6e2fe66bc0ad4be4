"""Determined's error names a script may catch."""


class InternalException(Exception):
    pass


class CheckpointNotFound(Exception):
    pass


class InvalidExperimentException(Exception):
    pass
