"""`det.keras.callbacks`: the Determined-aware TensorBoard callback under its other name."""

from determined.keras._callback import TensorBoard

__all__ = ["TensorBoard"]
