"""Batches shaped the way verl and ROLL hand them to their batching
functions, for the adapters' contract tests.

Neither trainer installs here (no PyPI), so these classes carry exactly the
behaviour of the containers that the call sites rely on and nothing more:
``TensorDictLike`` indexes every tensor by row and a string key gives one
tensor (tensordict's TensorDict); ``DataProtoLike`` holds ``batch``,
``non_tensor_batch`` and ``meta_info`` with in-place ``reorder``, a
``slice`` that shares ``meta_info`` with its parent (ROLL's), ``select_idxs``
and ``from_dict`` (verl's and ROLL's DataProto). The peers' own test files
run against their real code outside this repository (see docs/python.md).
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import MutableMapping

import numpy as np
import torch


class TensorDictLike(MutableMapping):
    def __init__(self, source, batch_size):
        self._d = dict(source)
        self.batch_size = torch.Size(batch_size)

    def __getitem__(self, key):
        if isinstance(key, str):
            return self._d[key]
        out = {}
        for k, v in self._d.items():
            if getattr(v, "is_nested", False):
                comps = v.unbind()
                rows = range(len(comps))[key] if isinstance(key, slice) else [int(i) for i in key]
                out[k] = torch.nested.nested_tensor([comps[i] for i in rows])
            else:
                out[k] = v[key]
        first = next(iter(out.values()))
        n = len(first.unbind()) if getattr(first, "is_nested", False) else first.shape[0]
        return TensorDictLike(out, [n])

    def __setitem__(self, key, value):
        self._d[key] = value

    def __delitem__(self, key):
        del self._d[key]

    def __iter__(self):
        return iter(self._d)

    def __len__(self):
        return int(self.batch_size[0]) if len(self.batch_size) else 0


class DataProtoLike:
    def __init__(self, batch=None, non_tensor_batch=None, meta_info=None):
        self.batch = batch
        self.non_tensor_batch = dict(non_tensor_batch or {})
        self.meta_info = meta_info if meta_info is not None else {}

    @classmethod
    def from_dict(cls, tensors, non_tensors=None, meta_info=None):
        first = next(iter(tensors.values()))
        n = len(first.unbind()) if getattr(first, "is_nested", False) else first.shape[0]
        return cls(TensorDictLike(tensors, [n]), non_tensors, meta_info)

    def __len__(self):
        return len(self.batch)

    def reorder(self, indices):
        idx = torch.as_tensor(indices).view(-1)
        self.batch = self.batch[idx]
        self.non_tensor_batch = {k: v[idx.numpy()] for k, v in self.non_tensor_batch.items()}

    def slice(self, start=None, end=None, step=None):
        s = slice(start, end, step)
        return DataProtoLike(self.batch[s], {k: v[s] for k, v in self.non_tensor_batch.items()}, self.meta_info)

    def select_idxs(self, idxs):
        idx = torch.as_tensor(np.asarray(idxs, dtype=np.int64))
        return DataProtoLike(self.batch[idx], {k: v[idx.numpy()] for k, v in self.non_tensor_batch.items()},
                             self.meta_info)


def padded_batch(rng, lengths, width=None, prompt=None):
    """verl's padded rollout batch for the given lengths: a left-padded
    prompt of ``prompt`` columns and a right-padded response; input_ids hold
    the row number at every valid token so rows can be traced."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.size
    prompt = prompt if prompt is not None else int(lengths.max(initial=1) // 2 + 1)
    p = np.minimum(rng.integers(0, prompt + 1, size=n), lengths)
    width = width or prompt + int((lengths - p).max(initial=0))
    mask = torch.zeros(n, width, dtype=torch.int64)
    for i in range(n):
        mask[i, prompt - p[i] : prompt - p[i] + lengths[i]] = 1
    ids = torch.arange(n).unsqueeze(1).expand(n, width) * mask
    return {"input_ids": ids, "attention_mask": mask}


def kk_partition(values, k, equal_size=True):
    """Largest differencing (Karmarkar-Karp) into k sets, with equal counts
    when asked: the comparison baseline for the trainers' balancing,
    written from the algorithm's description."""
    import heapq

    n = len(values)
    order = sorted(range(n), key=lambda i: (values[i], i))
    heap, tick = [], 0
    if equal_size:
        assert n % k == 0
        seeds = [order[s : s + k] for s in range(0, n, k)]
    else:
        seeds = [[i] for i in order]
    for items in seeds:
        sets = [[values[i], [i]] for i in items] + [[0, []] for _ in range(k - len(items))]
        sets.sort(key=lambda x: -x[0])
        heapq.heappush(heap, (-(sets[0][0] - sets[-1][0]), tick, sets))
        tick += 1
    while len(heap) > 1:
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        merged = [[a[i][0] + b[k - 1 - i][0], a[i][1] + b[k - 1 - i][1]] for i in range(k)]
        merged.sort(key=lambda x: -x[0])
        heapq.heappush(heap, (-(merged[0][0] - merged[-1][0]), tick, merged))
        tick += 1
    return [s[1] for s in heap[0][2]]


def installed_fake_package(root, files, monkeypatch):
    """Writes ``files`` ({relative path: source}) under root, puts root first
    on sys.path and hides every already imported module of the package's
    top-level name, so that imports find the fresh files. Returns the
    name, for ``forget_package`` at the end of the test."""
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    top = next(iter(files)).split("/")[0]
    monkeypatch.syspath_prepend(str(root))
    for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
        monkeypatch.delitem(sys.modules, name)
    return top


def forget_package(top):
    """Drops the modules a test imported from its fake package."""
    for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
        del sys.modules[name]
