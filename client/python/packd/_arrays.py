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


def first_non_integer(original, a: np.ndarray):
    """(index, value) of the first entry of ``original`` that is not an
    integer, or None. ``a`` is ``np.asarray(original)``. A Python list is
    looked at item by item, because numpy turns ``[1, "x"]`` into an array
    of strings where even the 1 is no longer an integer; in an array, a
    float entry with an integral value (``2.0``) still counts as a
    non-integer (the array's dtype is wrong for every entry), so the first
    entry is named with the dtype."""
    if isinstance(original, (list, tuple)):
        for i, v in enumerate(original):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                return i, v
        return None
    flat = a.reshape(-1)
    if a.dtype == object:
        for i, v in enumerate(flat):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                return i, v
        return None
    if np.issubdtype(a.dtype, np.integer) or flat.size == 0:
        return None
    if np.issubdtype(a.dtype, np.floating):
        bad = np.flatnonzero(np.mod(flat, 1) != 0)
        i = int(bad[0]) if bad.size else 0
        return i, flat[i].item()
    return 0, flat[0].item()


def integer_error(name: str, original, a: np.ndarray) -> str | None:
    """The message for a sequence that should hold integers and does not:
    ``lengths[3]: expected an integer, got 'x' (a str)``, naming the
    argument, the index and the value (and the dtype of an array, which is
    what is wrong when every entry is, e.g., a float); None when every
    entry is an integer."""
    found = first_non_integer(original, a)
    if found is None:
        return None
    i, v = found
    if isinstance(original, (list, tuple)) or a.dtype == object:
        return f"{name}[{i}]: expected an integer, got {v!r} (a {type(v).__name__})"
    return f"{name}[{i}]: expected an integer, got {v!r} (the array has dtype {a.dtype})"


def as_index_array(x, name: str) -> np.ndarray:
    """A 1-D int64 copy of x; raises ValueError naming `name` otherwise."""
    a = to_numpy(x, name)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        if np.issubdtype(a.dtype, np.floating) and np.all(np.mod(a, 1) == 0):
            a = a.astype(np.int64)
        else:
            raise ValueError(integer_error(name, x, a))
    return a.astype(np.int64, copy=True)
