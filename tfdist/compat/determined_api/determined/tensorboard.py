"""`determined.tensorboard`: Determined's upload of event files; tfdist serves them where they are written."""

from determined._unoffered import unoffered_module

__getattr__ = unoffered_module("determined.tensorboard", "the API of a Determined master")
