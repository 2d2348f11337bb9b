"""packd's cost model and its calibration from measured micro-batch times.

A sequence of aligned length ``a`` costs ``per_sequence + linear*a +
quadratic*a**2`` and a micro-batch costs the sum over its sequences plus
``per_micro_batch`` (packd.v1.Cost; ``linear`` and ``quadratic`` both 0 mean
the default 1 and 1/24576). :func:`calibrate` fits the four coefficients to
timings by non-negative least squares, the same fit as ``packctl
calibrate``::

    cal = packd.calibrate("timings.jsonl")      # or an iterable of records
    print(cal)                                  # coefficients, r2, MAPE
    plan = client.plan(lengths, dp=8, max_tokens=32768, cost=cal)

A record is one measured micro-batch, ``{"lengths": [...], "seconds": t}``
(packd.timing writes them), with an optional ``"cp": c``: the size of the
context-parallel group it ran on (default 1). When some record has c > 1
the fit is dynamic CP's per-GPU cost (packd.v1.Cost's ``cp_token`` and
``cp_group`` too)::

    per_micro_batch + cp_group*(c-1) + sum over sequences of
      [per_sequence + (linear*a + quadratic*a**2)/c + cp_token*a*(c-1)/c]
 Only numpy is needed; scipy.optimize.nnls is
used where scipy is installed, and an own Lawson-Hanson solver where not.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from ._arrays import integer_error

__all__ = ["Cost", "Calibration", "calibrate", "read_timings"]

# The Cost fields: proto name -> JSON (lowerCamelCase) name, in field order.
_FIELDS = {"linear": "linear", "quadratic": "quadratic", "per_sequence": "perSequence",
           "per_micro_batch": "perMicroBatch", "cp_token": "cpToken", "cp_group": "cpGroup"}
# The dynamic-CP fields: written only when set (or fitted), so that a cost
# without them reads as it did before they existed.
_CP_FIELDS = ("cp_token", "cp_group")
# The fit's terms (features 1, k, sum a / c, sum a^2 / c, c - 1,
# sum a (c - 1) / c), as Cost fields; the first 4 without CP timings.
_TERMS = ("per_micro_batch", "per_sequence", "linear", "quadratic", "cp_group", "cp_token")
_BASE_TERMS = 4
# The largest CP group size a record may carry (packctl_fit.h).
_MAX_CP = 65536
# Below this fraction of the largest eigenvalue of the scaled normal
# matrix, the records do not tell coefficients apart (packctl_fit.c).
_MIN_EIGEN = 1e-12


def _invalid(message: str):
    from .errors import InvalidArgument

    return InvalidArgument(message)


@dataclass(frozen=True)
class Cost:
    """packd.v1.Cost: finite coefficients >= 0 (0 means the proto
    default; ``cp_token`` and ``cp_group`` are dynamic CP's terms). Pass it
    as ``Client.plan(cost=...)``."""

    linear: float = 0.0
    quadratic: float = 0.0
    per_sequence: float = 0.0
    per_micro_batch: float = 0.0
    cp_token: float = 0.0
    cp_group: float = 0.0

    def __post_init__(self):
        for name in _FIELDS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise _invalid(f"cost.{name}: expected a number, got {v!r}")
            v = float(v)
            if not math.isfinite(v) or v < 0:
                raise _invalid(f"cost.{name}: {v!r} (must be finite and >= 0)")
            object.__setattr__(self, name, v)

    @classmethod
    def coerce(cls, value) -> "Cost":
        """A Cost from a Cost, anything with a ``.cost`` (a Calibration), a
        packd.v1.Cost message, or a mapping of its fields (proto or JSON
        names)."""
        if isinstance(value, Cost):
            return value
        inner = getattr(value, "cost", None)
        if isinstance(inner, Cost):
            return inner
        desc = getattr(value, "DESCRIPTOR", None)
        if desc is not None and getattr(desc, "full_name", "") == "packd.v1.Cost":
            return cls(**{name: getattr(value, name) for name in _FIELDS})
        if isinstance(value, Mapping):
            return cls.from_dict(value)
        raise _invalid(f"cost: expected a packd.Cost, a packd.Calibration, a packd.v1.Cost or a "
                       f"mapping of its fields, got {type(value).__name__}")

    @classmethod
    def from_dict(cls, d: Mapping) -> "Cost":
        """From proto names (``per_sequence``) or JSON names
        (``perSequence``); missing fields are 0."""
        by_json = {j: p for p, j in _FIELDS.items()}
        kw = {}
        for key, v in d.items():
            name = key if key in _FIELDS else by_json.get(key)
            if name is None:
                raise _invalid(f"cost: unknown field {key!r} (expected {', '.join(_FIELDS)})")
            kw[name] = v
        return cls(**kw)

    def fields(self) -> dict:
        """The fields by proto name (the Client.plan keywords); the CP
        ones only when set."""
        return {name: getattr(self, name) for name in _FIELDS
                if name not in _CP_FIELDS or getattr(self, name)}

    def to_dict(self, *, cp: bool = False) -> dict:
        """The protobuf JSON mapping (lowerCamelCase names, zeros
        included; the CP fields when set or ``cp``), as ``packctl calibrate
        --format json`` prints it."""
        return {_FIELDS[name]: getattr(self, name) for name in _FIELDS
                if name not in _CP_FIELDS or cp or getattr(self, name)}

    def to_proto(self):
        """A packd.v1.Cost message."""
        from . import _stubs

        return _stubs.pb2().Cost(**self.fields())

    def predict(self, lengths, *, align: int = 1, cp: int = 1) -> float:
        """The cost of one micro-batch of these sequence lengths (each
        rounded up to a multiple of align) on one GPU of a CP group of
        ``cp``, with the planner's defaults: seconds, for a calibrated
        Cost."""
        x = _features(_as_lengths(lengths, "lengths"), align, _as_cp(cp, "cp"))
        lin, quad = self.linear, self.quadratic
        if lin == 0 and quad == 0:
            lin, quad = 1.0, 1.0 / 24576
        return float(self.per_micro_batch * x[0] + self.per_sequence * x[1] + lin * x[2] + quad * x[3]
                     + self.cp_group * x[4] + self.cp_token * x[5])


@dataclass(frozen=True)
class Calibration:
    """The result of :func:`calibrate`: ``cost`` (a :class:`Cost`), ``r2``
    (1 - residual / total sum of squares), ``mape`` (mean absolute
    percentage error as a fraction, 0.01 = 1 %) and ``samples``. Pass it
    (or its ``cost``) as ``Client.plan(cost=...)``."""

    cost: Cost
    r2: float
    mape: float
    samples: int
    # Whether the CP terms were fitted (some record had cp > 1).
    cp: bool = False

    def to_dict(self) -> dict:
        """The document ``packctl calibrate --format json`` prints."""
        return {"cost": self.cost.to_dict(cp=self.cp), "r2": self.r2, "mape": self.mape,
                "samples": self.samples}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Calibration":
        """From that document (e.g. ``json.load`` of packctl's output)."""
        cp = any(_FIELDS[name] in d["cost"] or name in d["cost"] for name in _CP_FIELDS)
        return cls(Cost.from_dict(d["cost"]), float(d["r2"]), float(d["mape"]), int(d["samples"]), cp)

    def __str__(self) -> str:
        units = {"per_micro_batch": "s per micro-batch", "per_sequence": "s per sequence",
                 "linear": "s per token", "quadratic": "s per token^2",
                 "cp_group": "s per group x (c-1)", "cp_token": "s per token x (c-1)/c"}
        terms = _TERMS if self.cp else _TERMS[:_BASE_TERMS]
        rows = [f"{name:<18} {getattr(self.cost, name):<14.6g} {units[name]}" for name in terms]
        return (f"packd cost model fitted to {self.samples} micro-batches\n" + "\n".join(rows) +
                f"\nr2 {self.r2:.6f}, MAPE {100 * self.mape:.3f} %")


def _as_lengths(value, where: str) -> list:
    """Sequence lengths as Python ints: a list of ints, a numpy array, a
    torch tensor or a packd MicroBatch (its slots, the diff of
    cu_seqlens_padded: what the planner costs)."""
    if hasattr(value, "cu_seqlens_padded"):
        value = np.diff(np.asarray(value.cu_seqlens_padded, dtype=np.int64))
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise ValueError(f"{where}: expected a 1-D array of integers, got shape {value.shape}")
        message = integer_error(where, value, value)
        if message is not None:
            raise ValueError(message)
        value = value.tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(f"{where}: expected an array of integers, got {value!r}")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{where}[{i}]: expected a non-negative integer, got {v!r}")
        v = int(v)
        if v < 0 or v > 0xFFFFFFFF:
            raise ValueError(f"{where}[{i}]: {v} is {'negative' if v < 0 else 'above 4294967295'}")
        out.append(v)
    return out


def _as_cp(value, where: str) -> int:
    """A CP group size: an integer in [1, 65536]."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{where}: expected an integer group size >= 1, got {value!r}")
    c = int(value)
    if c < 1 or c > _MAX_CP:
        raise ValueError(f"{where}: {c} is {'below 1' if c < 1 else 'too large'} "
                         f"(a CP group holds 1 to {_MAX_CP} GPUs)")
    return c


def _features(lengths: list, align: int, cp: int = 1) -> np.ndarray:
    """1, k, sum a / c, sum a^2 / c, c - 1, sum a (c - 1) / c
    (packctl_fit_features_cp)."""
    a = np.asarray(lengths, dtype=np.float64)
    if align > 1:
        a = np.ceil(a / align) * align
    s, c = float(a.sum()), float(cp)
    return np.array([1.0, float(a.size), s / c, float((a * a).sum()) / c, c - 1, s * (c - 1) / c])


def _record(rec, where: str, align: int):
    """(features, seconds) of one record; ValueError naming where and the
    field."""
    if not isinstance(rec, Mapping):
        raise ValueError(f'{where}: expected an object {{"lengths": [...], "seconds": T}}, '
                         f"got {type(rec).__name__}")
    if "lengths" not in rec:
        raise ValueError(f"{where}: lengths: missing (the micro-batch's sequence lengths)")
    lengths = _as_lengths(rec["lengths"], f"{where}: lengths")
    if not lengths:
        raise ValueError(f"{where}: lengths: empty (a micro-batch holds at least one sequence)")
    if "seconds" not in rec:
        raise ValueError(f"{where}: seconds: missing (the micro-batch's measured time)")
    s = rec["seconds"]
    if isinstance(s, bool) or not isinstance(s, (int, float, np.integer, np.floating)):
        raise ValueError(f"{where}: seconds: expected a number, got {s!r}")
    s = float(s)
    if not math.isfinite(s):
        raise ValueError(f"{where}: seconds: {s!r} is not a finite number")
    if s < 0:
        raise ValueError(f"{where}: seconds: {s!r} is negative (a measured time is finite and >= 0)")
    cp = _as_cp(rec["cp"], f"{where}: cp") if "cp" in rec else 1
    return _features(lengths, align, cp), s, cp


def read_timings(path) -> list:
    """The records of a JSON-lines file (blank lines skipped); ValueError
    naming the line for one that is not JSON. NaN and Infinity (which
    Python's json writes) are read, and refused with the field they are
    in."""
    records = []
    name = os.fspath(path)
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{name}:{lineno}: invalid JSON: {e}") from None
            records.append((f"{name}:{lineno}", rec))
    if not records:
        raise ValueError(f"{name}: no records (the file is empty)")
    return records


def _nnls(g: np.ndarray, h: np.ndarray) -> np.ndarray:
    """The x >= 0 least x'gx - 2h'x for a positive definite g: Lawson and
    Hanson's active set method on the normal equations (the solver of
    packctl_fit.c)."""
    p = h.size
    x = np.zeros(p)
    passive = np.zeros(p, dtype=bool)
    barred = np.zeros(p, dtype=bool)
    tol = 1e-12 * max(float(np.abs(h).max()), 1e-300)
    for _ in range(8 * p):
        w = h - g @ x
        free = ~passive & ~barred & (w > tol)
        if not free.any():
            break
        j = int(np.argmax(np.where(free, w, -np.inf)))
        passive[j] = True
        for inner in range(8 * p):
            z = np.zeros(p)
            idx = np.flatnonzero(passive)
            z[idx] = np.linalg.solve(g[np.ix_(idx, idx)], h[idx])
            if (z[idx] > 0).all():
                x = z
                barred[:] = False
                break
            if inner == 0 and not z[j] > 0:
                passive[j] = False  # Its gradient was rounding: keep it at 0.
                barred[j] = True
                break
            neg = idx[z[idx] <= 0]
            alpha = min(1.0, float(np.min(x[neg] / (x[neg] - z[neg]))))
            x = x + alpha * (z - x)
            fixed = passive & (x <= 1e-14 * np.abs(x).max())
            x[fixed] = 0
            passive &= ~fixed
    return x


def _names(mask) -> str:
    names = [t for t, m in zip(_TERMS, mask) if m]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _fit(x: np.ndarray, t: np.ndarray):
    """Coefficients (term order), r2 and MAPE; ValueError when they cannot
    be fitted (the messages of packctl_fit.c)."""
    n, p = t.size, x.shape[1]
    if n < p:
        names = ", ".join(_TERMS[:_BASE_TERMS]) + (", cp_group, cp_token" if p > _BASE_TERMS else "")
        raise ValueError(f"{n} record{'' if n == 1 else 's'}: fitting the {p} coefficients "
                         f"({names}) needs at least {p}")
    scale = np.sqrt((x * x).sum(axis=0))
    zero = ~(scale > 0)
    if zero.any():
        why = "no record has a sequence" if zero[1] else "every length is 0"
        raise ValueError(f"{_names(zero)} cannot be fitted: {why} (time micro-batches of "
                         "sequences of non-zero length)")
    xs = x / scale
    g, h = xs.T @ xs, xs.T @ t
    val, vec = np.linalg.eigh(g)
    small = ~(val > _MIN_EIGEN * val.max())
    if small.any():
        mixed = (np.abs(vec[:, small]) > 0.05).any(axis=1)
        raise ValueError(f"collinear records: they do not tell {_names(mixed)} apart (the features 1, "
                         "sequences, tokens and squared tokens of the records are linearly "
                         "dependent); time micro-batches with different numbers of sequences and "
                         "different lengths")
    try:
        from scipy.optimize import nnls
    except ImportError:
        c = _nnls(g, h)
    else:
        c = nnls(xs, t)[0]
    coef = c / scale
    if coef[2] == 0 and coef[3] == 0:
        raise ValueError("the fit gives linear = quadratic = 0 (the times do not grow with tokens), "
                         "and a Cost with both 0 means the default model; time micro-batches with "
                         "more different token counts")
    pred = x @ coef
    ss_res = float(((t - pred) ** 2).sum())
    ss_tot = float(((t - t.mean()) ** 2).sum())
    r2 = 1 - ss_res / ss_tot if ss_tot > 0 else (0.0 if ss_res > 0 else 1.0)
    pos = t > 0
    mape = float((np.abs(pred[pos] - t[pos]) / t[pos]).mean()) if pos.any() else 0.0
    return coef, r2, mape


def calibrate(records, *, align: int = 1) -> Calibration:
    """Fits packd's cost model to measured micro-batch times.

    ``records``: a path to a JSON-lines file, an iterable of records
    ``{"lengths": [...], "seconds": t}`` (lengths may be lists, numpy
    arrays, tensors or packd MicroBatch objects), or a packd.timing
    Recorder. ``align`` rounds every length up to a multiple of it first, as
    the planner does (the plan's ``alignment``).

    Returns a :class:`Calibration`; its ``cost`` fits ``seconds =
    per_micro_batch + per_sequence*k + linear*sum(a) + quadratic*sum(a^2)``
    with every coefficient >= 0; where some record carries ``"cp": c > 1``,
    the dynamic-CP cost of the module docstring (``cp_token`` and
    ``cp_group`` too, and ``Calibration.cp`` is true). Raises ValueError naming the record (or
    file line) and field for bad input, and for data that cannot be fitted
    (fewer than 4 records, collinear records)."""
    if isinstance(align, bool) or not isinstance(align, (int, np.integer)) or align < 0:
        raise ValueError(f"align: expected an integer >= 0, got {align!r}")
    if isinstance(records, (str, bytes, os.PathLike)):
        labelled = read_timings(records)
    else:
        if hasattr(records, "records") and not isinstance(records, Mapping):
            records = records.records
        labelled = [(f"record {i}", rec) for i, rec in enumerate(records)]
        if not labelled:
            raise ValueError("no records")
    rows = [_record(rec, where, int(align)) for where, rec in labelled]
    cp = any(r[2] > 1 for r in rows)
    # Without CP timings the CP features are all 0: fit the first four.
    x = np.array([r[0] for r in rows])[:, :len(_TERMS) if cp else _BASE_TERMS]
    t = np.array([r[1] for r in rows], dtype=np.float64)
    coef, r2, mape = _fit(x, t)
    cost = Cost(**{name: float(coef[i]) for i, name in enumerate(_TERMS[:coef.size])})
    return Calibration(cost=cost, r2=float(r2), mape=float(mape), samples=int(t.size), cp=cp)
