"""`det.keras`: the Keras callback Determined's current Keras examples use (DeterminedCallback, TensorBoard).
The TFKerasTrial class API is not offered: one line says so."""

from determined._unoffered import unoffered_module
from determined.keras._callback import DeterminedCallback, TensorBoard
from determined.keras import callbacks

__getattr__ = unoffered_module("determined.keras", "Determined's Trial class API")

__all__ = ["DeterminedCallback", "TensorBoard", "callbacks"]
