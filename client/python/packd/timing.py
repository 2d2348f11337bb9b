"""Micro-batch timings for calibrating packd's cost model.

Wrap the forward and backward of every micro-batch, then fit::

    rec = packd.timing.Recorder(device="cuda")      # or "cpu"
    for mb in plan[rank].micro_batches:
        with rec.micro_batch(mb):                   # or the sequence lengths
            loss = model(...); loss.backward()
    rec.dump("timings.jsonl")                       # packctl calibrate reads it
    cal = packd.calibrate(rec)                      # or the file

On CUDA (``device`` a CUDA device, or CUDA tensors of lengths) a pair of
torch.cuda.Event brackets the block on the current stream, so nothing waits
while training runs; the events are synchronized when the records are read
(``records``, ``dump``). On the CPU the block is timed with
time.perf_counter. A block that raises records nothing.

Every record is ``{"lengths": [...], "seconds": t}``, one JSON line in
``dump``: the format of ``packctl calibrate`` and :func:`packd.calibrate`.
For a packd MicroBatch the lengths are its slots (the differences of
``cu_seqlens_padded``): what the planner costs.

Under dynamic context parallelism each GPU times its own share of its
group's work, and the record carries the group size, ``"cp": c`` (above 1
only), from which the calibration fits the CP terms::

    for step in dplan.gpu(rank):                    # a packd.DynamicCpPlan
        with rec.micro_batch(step):                 # the group's slots, cp = step.size
            loss = model(...); loss.backward()
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager

__all__ = ["Recorder"]


def _is_cuda(device, lengths) -> bool:
    if device is not None:
        kind = getattr(device, "type", None)
        if kind is None:
            kind = str(device).split(":", 1)[0]
        return kind == "cuda"
    return bool(getattr(lengths, "is_cuda", False))


def _group_size(lengths, cp) -> int:
    """The CP group size of a timed block: ``cp`` when given, a dynamic-CP
    GpuStep's size, else 1. An idle GPU's step has nothing to time."""
    from .calibration import _as_cp

    if cp is None and hasattr(lengths, "rank_in_group"):
        if lengths.group is None:
            raise ValueError(f"micro_batch: GPU {lengths.first_gpu} is idle in slot {lengths.slot} "
                             f"(a GpuStep with no group has no work to time)")
        cp = lengths.size
    return 1 if cp is None else _as_cp(cp, "cp")


def _record(lengths: list, seconds: float, c: int) -> dict:
    rec = {"lengths": lengths, "seconds": seconds}
    if c > 1:
        rec["cp"] = c
    return rec


class Recorder:
    """Collects micro-batch timings. ``device``: where the timed work runs
    (None: CUDA when the lengths given are CUDA tensors, else the CPU);
    each ``micro_batch`` call may name its own."""

    def __init__(self, device=None):
        self.device = device
        self._done: list = []
        self._pending: list = []  # (lengths, start event, end event)

    @contextmanager
    def micro_batch(self, lengths, device=None, cp=None):
        """Times the block as one micro-batch of these sequences (a list of
        ints, an array, a tensor, a packd MicroBatch, or a dynamic-CP plan's
        GpuStep: its group's slots). ``cp``: the size of the CP group whose
        GPU ran the block (default: a GpuStep's ``size``, else 1)."""
        from .calibration import _as_lengths

        c = _group_size(lengths, cp)
        device = self.device if device is None else device
        if _is_cuda(device, lengths):
            import torch

            # Lengths on the GPU stay there until the records are read.
            held = lengths.detach().clone() if hasattr(lengths, "detach") else _as_lengths(lengths, "lengths")
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._pending.append((held, start, end, c))
            return
        held = _as_lengths(lengths, "lengths")
        t0 = time.perf_counter()
        yield
        self._done.append(_record(held, time.perf_counter() - t0, c))

    def _flush(self) -> None:
        from .calibration import _as_lengths

        for held, start, end, c in self._pending:
            end.synchronize()
            self._done.append(_record(_as_lengths(held, "lengths"), start.elapsed_time(end) / 1000.0, c))
        self._pending.clear()

    @property
    def records(self) -> list:
        """The records so far, in the order the blocks ran (waits for the
        CUDA events of the ones timed on a GPU)."""
        self._flush()
        return list(self._done)

    def dump(self, path, *, append: bool = False) -> int:
        """Writes the records as JSON lines (``append`` adds to the file);
        returns how many were written."""
        records = self.records
        with open(os.fspath(path), "a" if append else "w", encoding="utf-8") as f:
            for rec in records:
                f.write(json.dumps(rec, allow_nan=False) + "\n")
        return len(records)

    def clear(self) -> None:
        """Drops every record (the pending CUDA ones too)."""
        self._done.clear()
        self._pending.clear()

    def __len__(self) -> int:
        return len(self._done) + len(self._pending)

    def __repr__(self) -> str:
        return f"Recorder(device={self.device!r}, records={len(self)})"
