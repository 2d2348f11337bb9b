"""Array helpers shared by packd.layout and the adapters.

numpy is the required path. A torch CPU tensor is accepted wherever an array
is: it is converted to numpy (sharing memory when possible) and results are
handed back as torch tensors. torch is imported only when such a tensor is
actually passed, so packd never needs torch installed.
"""

from __future__ import annotations

import numpy as np


def is_torch(x) -> bool:
    """True when x is a torch tensor (checked without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def to_numpy(x, name: str = "array") -> np.ndarray:
    """numpy view (or copy) of x: a numpy array, torch CPU tensor or sequence."""
    if isinstance(x, np.ndarray):
        return x
    if is_torch(x):
        t = x.detach()
        if t.device.type != "cpu":
            raise TypeError(
                f"{name}: packd.layout is the CPU reference and takes CPU tensors; "
                f"got a tensor on {t.device}"
            )
        return t.numpy()
    try:
        return np.asarray(x)
    except Exception as exc:  # numpy raises many types for ragged input
        raise TypeError(f"{name}: cannot convert {type(x).__name__} to an array: {exc}") from None


def like(result: np.ndarray, template):
    """Returns result as the same kind of array as template (torch or numpy)."""
    if is_torch(template):
        import torch  # Only reached when the caller already uses torch.

        return torch.from_numpy(np.ascontiguousarray(result))
    return result


def as_index_array(x, name: str) -> np.ndarray:
    """A 1-D int64 copy of x; raises ValueError naming `name` otherwise."""
    a = to_numpy(x, name)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        if np.issubdtype(a.dtype, np.floating) and np.all(np.mod(a, 1) == 0):
            a = a.astype(np.int64)
        else:
            raise ValueError(f"{name}: expected integers, got dtype {a.dtype}")
    return a.astype(np.int64, copy=True)
