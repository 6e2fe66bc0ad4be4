"""`determined.experimental`: the client of a Determined master, which tfdist has none of."""

from determined._unoffered import unoffered_module

__getattr__ = unoffered_module("determined.experimental", "a Determined master")
