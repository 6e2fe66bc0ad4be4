"""`determined.experimental`: the client of a Determined master, which tfdist has none of."""

from determined._unoffered import unoffered_module

__getattr__ = unoffered_module("determined.experimental", "the API of a Determined master")
