"""Helpers shared by the trainer adapters (packd.verl, packd.roll)."""

from __future__ import annotations

import numpy as np

from ._arrays import is_torch, to_numpy

_default_client = None


def default_client():
    """The client adapters use when none is given: ``Client(PACKD_TARGET)``
    when that variable is set, else the embedded planner."""
    global _default_client
    if _default_client is None:
        import os

        from .client import Client

        target = os.environ.get("PACKD_TARGET")
        _default_client = Client(target) if target else Client.local()
    return _default_client


def _mask_of(obj):
    """The attention mask inside a verl DataProto / TensorDict / dict, or
    None."""
    batch = getattr(obj, "batch", None)
    for holder in (batch, obj):
        if holder is None or isinstance(holder, (np.ndarray, list, tuple)) or is_torch(holder):
            continue
        try:
            if "attention_mask" in holder:
                return holder["attention_mask"]
        except TypeError:
            continue
    return None


def lengths_of(x, name: str = "batch") -> np.ndarray:
    """Per-sequence lengths (int64) from a DataProto/TensorDict/dict with an
    ``attention_mask``, a 2-D attention mask, or a 1-D list of lengths."""
    mask = _mask_of(x)
    if mask is not None:
        x = mask
    a = to_numpy(x, name)
    if a.ndim == 2:
        return (a != 0).sum(axis=1).astype(np.int64)
    if a.ndim == 1:
        return a.astype(np.int64)
    raise ValueError(f"{name}: expected an attention mask [B, S] or lengths [B], got shape {a.shape}")


def take(data, idx: np.ndarray):
    """data[idx] for numpy arrays, torch tensors, TensorDicts and lists."""
    if isinstance(data, (list, tuple)):
        return [data[i] for i in idx]
    if is_torch(data):
        import torch

        return data[torch.from_numpy(np.ascontiguousarray(idx))]
    if isinstance(data, np.ndarray):
        return data[idx]
    try:  # TensorDict and friends index with a torch tensor.
        import torch

        return data[torch.from_numpy(np.ascontiguousarray(idx))]
    except ImportError:
        return data[idx]


def heavy_middle(idx: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Items sorted by weight ascending and laid out as the even positions
    followed by the odd positions reversed: light at both ends, heavy in the
    middle (verl's per-rank order, "to reduce PP bubbles")."""
    s = idx[np.argsort(weight[idx], kind="stable")]
    return np.concatenate([s[0::2], s[1::2][::-1]])


def workload(lengths: np.ndarray) -> np.ndarray:
    """verl's per-sequence FLOPs proxy 24576*L + L**2 (float64)."""
    L = lengths.astype(np.float64)
    return 24576.0 * L + L * L
