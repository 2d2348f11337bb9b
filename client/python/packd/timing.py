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


class Recorder:
    """Collects micro-batch timings. ``device``: where the timed work runs
    (None: CUDA when the lengths given are CUDA tensors, else the CPU);
    each ``micro_batch`` call may name its own."""

    def __init__(self, device=None):
        self.device = device
        self._done: list = []
        self._pending: list = []  # (lengths, start event, end event)

    @contextmanager
    def micro_batch(self, lengths, device=None):
        """Times the block as one micro-batch of these sequences (a list of
        ints, an array, a tensor or a packd MicroBatch)."""
        from .calibration import _as_lengths

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
            self._pending.append((held, start, end))
            return
        held = _as_lengths(lengths, "lengths")
        t0 = time.perf_counter()
        yield
        self._done.append({"lengths": held, "seconds": time.perf_counter() - t0})

    def _flush(self) -> None:
        from .calibration import _as_lengths

        for held, start, end in self._pending:
            end.synchronize()
            self._done.append({"lengths": _as_lengths(held, "lengths"),
                               "seconds": start.elapsed_time(end) / 1000.0})
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
