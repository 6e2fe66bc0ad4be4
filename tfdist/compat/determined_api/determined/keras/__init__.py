"""`det.keras`: the Keras callback Determined's current Keras examples use (DeterminedCallback, TensorBoard).
The TFKerasTrial class API is not offered: one line says so."""

from determined._unoffered import unoffered_module
from determined.keras._callback import DeterminedCallback, TensorBoard
from determined.keras import callbacks

TFKerasTensorBoard = TensorBoard  # Determined's deprecated name for it
__getattr__ = unoffered_module("determined.keras", "Determined's Trial class API", (
    "TFKerasTrial", "TFKerasTrialContext", "TFKerasContext", "InputData", "SequenceAdapter",
    "load_model_from_checkpoint_path", "ArrayLikeAdapter", "TFKerasExperimentalContext"))

__all__ = ["DeterminedCallback", "TensorBoard", "callbacks"]
