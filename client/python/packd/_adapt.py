"""What the trainer adapters (packd.verl, packd.roll) share: reading
sequence lengths out of whatever a trainer passes, and selecting rows of it
again.

Trainers hand over a DataProto (``.batch`` is a TensorDict), a TensorDict or
a plain dict of tensors, an attention mask, or lengths. The lengths come
from, in this order: a nested (jagged) ``input_ids`` (its offsets: verl's
no-padding layout has no attention mask), the ``attention_mask`` (row sums),
or the object itself (a 2-D mask or 1-D lengths). Tensors may live on any
device: only the lengths are copied to the host, and every selected row
stays on the caller's device and keeps the caller's container type.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ._arrays import integer_error, is_torch

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


def trainer_plan(client, lengths, **kwargs):
    """``client.plan`` for an adapter: its InvalidArgument and
    FailedPrecondition come out as TrainerInvalidArgument and
    TrainerFailedPrecondition (the same message), which are also the
    AssertionError and ValueError the trainers raise, so a trainer's
    ``except`` keeps working with packd patched in."""
    from .errors import FailedPrecondition, InvalidArgument, TrainerFailedPrecondition, TrainerInvalidArgument

    try:
        return client.plan(lengths, **kwargs)
    except (TrainerFailedPrecondition, TrainerInvalidArgument):
        raise
    except FailedPrecondition as exc:
        raise TrainerFailedPrecondition(exc.message) from None
    except InvalidArgument as exc:
        raise TrainerInvalidArgument(exc.message) from None


def _is_nested(t) -> bool:
    return is_torch(t) and bool(getattr(t, "is_nested", False))


def _holder(obj):
    """The mapping of named tensors inside obj (DataProto.batch, a
    TensorDict or a dict), or None."""
    inner = getattr(obj, "batch", None)
    for h in (inner, obj):
        if h is None or isinstance(h, (np.ndarray, list, tuple)) or is_torch(h):
            continue
        if hasattr(h, "keys") and hasattr(h, "__getitem__"):
            return h
    return None


def _has(holder, key) -> bool:
    try:
        return key in holder.keys()
    except TypeError:
        return False


def _host(t, name: str) -> np.ndarray:
    """A host numpy copy of a tensor on any device (or an array)."""
    if is_torch(t):
        t = t.detach()
        if t.device.type == "meta":
            raise ValueError(f"{name}: a tensor on the meta device has no values to read lengths from")
        return t.cpu().numpy()
    try:
        return np.asarray(t)
    except Exception as exc:  # numpy raises many types for ragged input
        raise TypeError(f"{name}: cannot convert {type(t).__name__} to an array: {exc}") from None


def nested_lengths(t) -> np.ndarray:
    """Row lengths of a nested tensor: its offsets where it has them (the
    jagged layout), else the first dimension of every component."""
    offsets = getattr(t, "offsets", None)
    if callable(offsets):
        try:
            off = offsets()
        except (RuntimeError, TypeError):
            off = None
        if off is not None:
            return np.diff(_host(off, "input_ids.offsets()")).astype(np.int64)
    return np.array([c.shape[0] for c in t.unbind()], dtype=np.int64)


def lengths_of(x, name: str = "batch") -> np.ndarray:
    """Per-sequence lengths (int64, host) of a DataProto / TensorDict / dict
    (nested ``input_ids`` or ``attention_mask``), a 2-D attention mask, or 1-D
    lengths. ValueError names what is missing or malformed."""
    holder = _holder(x)
    if holder is not None:
        if _has(holder, "input_ids") and _is_nested(holder["input_ids"]):
            return nested_lengths(holder["input_ids"])
        if _has(holder, "attention_mask"):
            x, name = holder["attention_mask"], f"{name}['attention_mask']"
        else:
            keys = sorted(map(str, holder.keys()))
            raise ValueError(
                f"{name}: needs an 'attention_mask' or a nested 'input_ids' to read lengths from, got keys {keys}"
            )
    elif _is_nested(x):
        return nested_lengths(x)
    a = _host(x, name)
    if a.ndim == 2:
        return (a != 0).sum(axis=1).astype(np.int64)
    if a.ndim == 1:
        if a.size and not np.issubdtype(a.dtype, np.integer):
            if not (np.issubdtype(a.dtype, np.floating) and np.all(np.mod(a, 1) == 0)):
                raise ValueError(integer_error(name, x, a))
        return a.astype(np.int64)
    raise ValueError(f"{name}: expected an attention mask [B, S] or lengths [B], got shape {a.shape}")


def device_of(x):
    """The device of the first tensor found in x (a tensor, DataProto,
    TensorDict or dict), or None."""
    if is_torch(x):
        return x.device
    holder = _holder(x)
    if holder is not None:
        for key in holder.keys():
            v = holder[key]
            if is_torch(v):
                return v.device
    return None


def _rebuild_nested(parts, like):
    import torch

    layout = getattr(like, "layout", None)
    jagged = getattr(torch, "jagged", None)
    if jagged is not None and layout == jagged:
        return torch.nested.as_nested_tensor(parts, layout=jagged)
    return torch.nested.nested_tensor(parts) if parts else torch.nested.nested_tensor([])


def select_value(v, idx: np.ndarray):
    """Rows idx of one value (tensor on any device, nested tensor, numpy
    array, list), in the value's own kind."""
    if is_torch(v):
        import torch

        if _is_nested(v):
            comps = v.unbind()
            return _rebuild_nested([comps[int(i)] for i in idx], v)
        index = torch.as_tensor(np.ascontiguousarray(idx, dtype=np.int64))
        if v.device.type not in ("cpu", "meta"):
            index = index.to(v.device)
        return v.index_select(0, index) if v.dim() else v
    if isinstance(v, np.ndarray):
        return v[idx]
    if isinstance(v, (list, tuple)):
        return [v[int(i)] for i in idx]
    if isinstance(v, Mapping) or _holder(v) is not None:
        return select_rows(v, idx)
    try:  # TensorDict-like containers index with a torch tensor.
        import torch

        return v[torch.as_tensor(np.ascontiguousarray(idx, dtype=np.int64))]
    except ImportError:
        return v[idx]


def _per_row(v, rows) -> bool:
    """Whether a dict entry holds one item per row of the batch (and so is
    selected), rather than a value shared by all rows (a scalar, a string,
    a dict of settings), which every selection keeps as it is. With
    ``rows`` None every sized entry counts as per-row."""
    if isinstance(v, (str, bytes)) or (isinstance(v, Mapping) and _holder(v) is None):
        return False
    if _is_nested(v):  # One component per row; a nested tensor has no sizes.
        return rows is None or len(v.unbind()) == rows
    shape = getattr(v, "shape", None)
    if shape is not None:
        n = int(shape[0]) if len(shape) else None
    elif hasattr(v, "__len__"):
        n = len(v)
    else:
        return False
    return n is not None and (rows is None or n == rows)


def select_rows(batch, idx, rows=None):
    """Rows idx of a batch, keeping its kind: a dict (or any other mapping
    that is not a TensorDict) gives a mapping of the same type whose
    per-row entries are selected and whose other entries (scalars,
    strings, entries of another length than ``rows``) are kept; a
    TensorDict a TensorDict (verl's own selection helper when verl is
    loaded, since it knows every kind of entry verl stores), a tensor or
    array the same."""
    idx = np.asarray(idx, dtype=np.int64)
    if isinstance(batch, Mapping) and type(batch).__name__ != "TensorDict":
        out = {k: (select_value(v, idx) if _per_row(v, rows) else v) for k, v in batch.items()}
        if type(batch) is dict:
            return out
        try:
            return type(batch)(out)
        except TypeError:  # A mapping type that cannot be built from a dict.
            return out
    if _holder(batch) is batch and not is_torch(batch):
        helper = _verl_index_select()
        if helper is not None and type(batch).__name__ == "TensorDict":
            return helper(batch, idx.tolist())
        if any(_is_nested(batch[k]) for k in batch.keys()):
            parts = {k: select_value(batch[k], idx) for k in batch.keys()}
            return type(batch)(parts, batch_size=[int(idx.size)])
        import torch

        return batch[torch.as_tensor(idx)]
    return select_value(batch, idx)


def _verl_index_select():
    import sys

    mod = sys.modules.get("verl.utils.tensordict_utils")
    return getattr(mod, "index_select_tensor_dict", None) if mod is not None else None


def _is_number(v) -> bool:
    try:
        float(v)
        return not isinstance(v, (str, bytes))
    except (TypeError, ValueError):
        return False


def host_values(values, name: str) -> np.ndarray:
    """A 1-D float64 host copy of numbers given as a list, array or tensor
    on any device; ValueError naming the first negative or non-finite one."""
    a = _host(values, name)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence, got shape {a.shape}")
    try:
        a = a.astype(np.float64)
    except (TypeError, ValueError):
        # numpy turned a list with one string into strings throughout: look
        # at the list itself for the entry that is not a number.
        items = list(values) if isinstance(values, (list, tuple)) else a.tolist()
        i = next((i for i, v in enumerate(items) if not _is_number(v)), 0)
        raise ValueError(f"{name}[{i}]: expected a number, got {items[i]!r} (dtype {a.dtype})") from None
    bad = np.flatnonzero(~np.isfinite(a) | (a < 0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name}[{i}]: must be finite and >= 0, got {a[i]!r}")
    return a


def heavy_middle(idx: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Items sorted by weight ascending and laid out as the even positions
    followed by the odd positions reversed: light at both ends, heavy in the
    middle (verl's per-rank order, to shorten pipeline bubbles)."""
    s = idx[np.argsort(weight[idx], kind="stable")]
    return np.concatenate([s[0::2], s[1::2][::-1]])


def workload(lengths: np.ndarray) -> np.ndarray:
    """verl's and ROLL's per-sequence FLOPs proxy 24576*L + L**2 (float64):
    packd's default cost (L + L**2/24576) times 24576."""
    L = np.asarray(lengths).astype(np.float64)
    return 24576.0 * L + L * L


def dp_max(count: int, dp_group, device=None) -> int:
    """The largest count over ``dp_group`` when torch.distributed is
    initialised (every rank must call), else count. The count tensor goes
    where the group's backend wants it: the host for gloo, otherwise the
    caller's accelerator (``device``) or the backend's device (nccl: cuda,
    hccl: npu, xccl: xpu)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return count
    if not dist.is_available() or not dist.is_initialized():
        return count
    backend = str(dist.get_backend(dp_group)).lower()
    dev = torch.device("cpu")
    if backend != "gloo":
        if device is not None and torch.device(device).type not in ("cpu", "meta"):
            dev = torch.device(device)
        else:
            kind = {"nccl": "cuda", "hccl": "npu", "xccl": "xpu"}.get(backend, "cuda")
            mod = getattr(torch, kind, None)
            dev = torch.device(kind, mod.current_device()) if mod is not None else torch.device(kind)
    t = torch.tensor([int(count)], dtype=torch.int64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=dp_group)
    return int(t.cpu().item())
