"""Turn whatever a framework returns into a NumPy array for checks and plots."""

from __future__ import annotations

import numpy as np


def to_numpy(value) -> np.ndarray:
    """A NumPy copy of a torch tensor (any device, with or without grad), a TF tensor, or array-like.

    bfloat16 has no NumPy dtype, so such tensors come back as float32.
    """
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor
        import torch

        tensor = value.detach()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        return tensor.cpu().resolve_conj().resolve_neg().numpy()
    if hasattr(value, "numpy") and callable(value.numpy):  # tf.Tensor, tf.Variable
        return np.asarray(value.numpy())
    return np.asarray(value)
