"""Builds packd.v1.PlanRequest messages from Python keywords.

Keyword names are the proto field names; where a field lives (top level or
inside parallel/batching/cost/layout) is read from the message descriptors,
so the mapping cannot drift from the proto. Enum fields take the number, the
full proto name (``"DP_BALANCE_KK_EQUAL"``) or the short name
(``"kk_equal"``). A sub-message is set only when one of its fields differs
from its default, so a request built here serializes to the same bytes as
any other client that leaves defaults unset.
"""

from __future__ import annotations

import numpy as np
from google.protobuf import descriptor as _desc

from . import _stubs
from ._arrays import integer_error, to_numpy
from .errors import InvalidArgument

_UINT_MAX = {
    _desc.FieldDescriptor.TYPE_UINT32: (1 << 32) - 1,
    _desc.FieldDescriptor.TYPE_UINT64: (1 << 64) - 1,
}
_ARRAYS = ("lengths", "loss_tokens", "groups")


def _enum_prefix(enum_desc) -> str:
    names = [v.name for v in enum_desc.values]
    prefix = names[0]
    for n in names[1:]:
        while not n.startswith(prefix):
            prefix = prefix[:-1]
    return prefix[: prefix.rfind("_") + 1]


def field_map() -> dict:
    """``{keyword: (sub-message field name or None, FieldDescriptor)}`` for
    every scalar field of PlanRequest and its sub-messages (arrays
    excluded)."""
    pb = _stubs.pb2()
    out = {}
    for f in pb.PlanRequest.DESCRIPTOR.fields:
        if f.name in _ARRAYS:
            continue
        if f.message_type is not None:
            for sf in f.message_type.fields:
                if sf.name in out:
                    raise RuntimeError(f"proto field name {sf.name!r} appears twice; keywords would clash")
                out[sf.name] = (f.name, sf)
        else:
            out[f.name] = (None, f)
    return out


def enum_value(field, value, path: str | None = None) -> int:
    """The number of an enum value given as int, full or short name; path
    names the field in errors (``batching.mode``)."""
    enum_desc = field.enum_type
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)  # Out-of-range numbers go to the server, which names them.
    if isinstance(value, str):
        s = value.strip().upper()
        prefix = _enum_prefix(enum_desc)
        for v in enum_desc.values:
            if s in (v.name, v.name[len(prefix) :]):
                return v.number
    choices = ", ".join(v.name[len(_enum_prefix(enum_desc)) :].lower() for v in enum_desc.values)
    raise InvalidArgument(f"{path or field.name}: unknown value {value!r} (expected one of {choices})")


def enum_name(field, number: int) -> str:
    """The short lowercase name of an enum number ("kk_equal")."""
    enum_desc = field.enum_type
    v = enum_desc.values_by_number.get(int(number))
    if v is None:
        return str(number)
    return v.name[len(_enum_prefix(enum_desc)) :].lower()


def _scalar(path: str, field, value):
    t = field.type
    if t == _desc.FieldDescriptor.TYPE_ENUM:
        return enum_value(field, value, path)
    if t == _desc.FieldDescriptor.TYPE_BOOL:
        if not isinstance(value, (bool, np.bool_, int, np.integer)):
            raise InvalidArgument(f"{path}: expected a bool, got {value!r}")
        return bool(value)
    if t in _UINT_MAX:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise InvalidArgument(f"{path}: expected an integer, got {value!r}")
        value = int(value)
        if not 0 <= value <= _UINT_MAX[t]:
            raise InvalidArgument(f"{path}: must be in [0, {_UINT_MAX[t]}], got {value}")
        return value
    if t in (_desc.FieldDescriptor.TYPE_DOUBLE, _desc.FieldDescriptor.TYPE_FLOAT):
        try:
            return float(value)
        except (TypeError, ValueError):
            raise InvalidArgument(f"{path}: expected a number, got {value!r}") from None
    if t == _desc.FieldDescriptor.TYPE_STRING:
        if not isinstance(value, str):
            raise InvalidArgument(f"{path}: expected a string, got {value!r}")
        return value
    raise InvalidArgument(f"{path}: unsupported field type {t}")


def uint_array(values, name: str, bits: int) -> list:
    """values as a list of Python ints in [0, 2**bits); InvalidArgument naming
    the first bad entry otherwise."""
    a = to_numpy(values, name)
    if a.ndim != 1:
        raise InvalidArgument(f"{name}: expected a 1-D sequence, got shape {a.shape}")
    if a.size == 0:
        return []
    message = integer_error(name, values, a)
    if message is not None:
        raise InvalidArgument(message)
    lo, hi = 0, (1 << bits) - 1
    if np.issubdtype(a.dtype, np.signedinteger) and a.min() < lo:
        i = int(np.flatnonzero(a < lo)[0])
        raise InvalidArgument(f"{name}[{i}]: must be >= 0, got {int(a[i])}")
    if a.dtype == object or a.dtype.itemsize * 8 > bits or a.dtype == np.uint64:
        vals = [int(v) for v in a.tolist()]
        for i, v in enumerate(vals):
            if not lo <= v <= hi:
                raise InvalidArgument(f"{name}[{i}]: must be in [0, {hi}], got {v}")
        return vals
    return a.tolist()


_COST_FIELDS = ("linear", "quadratic", "per_sequence", "per_micro_batch")


def cost_fields(cost, fields: dict) -> dict:
    """The Cost keywords of ``cost=`` (a packd.Cost, a packd.Calibration, a
    packd.v1.Cost or a mapping of its fields; packd.Cost.coerce), refused
    beside any of those keywords set one by one."""
    from .calibration import Cost

    coerced = Cost.coerce(cost).fields()
    # The CP terms clash only where cost= sets them too.
    given = [k for k in _COST_FIELDS + ("cp_token", "cp_group") if fields.get(k) and
             (k in _COST_FIELDS or k in coerced)]
    if given:
        raise InvalidArgument(f"cost: give cost= or the fields {', '.join(_COST_FIELDS)} one by one, "
                              f"not both (got cost= and {given[0]}={fields[given[0]]!r})")
    return coerced


def _dynamic_cp(req, field, value):
    """parallel.dynamic_cp from ``dynamic_cp=``: False (fixed CP), True (the
    defaults: power-of-two groups, no minimum, packd's planner) or a mapping
    of the DynamicCp fields (sizes, min_size, algo; enums by name)."""
    if isinstance(value, (bool, np.bool_)):
        if value:
            req.parallel.dynamic_cp.SetInParent()
        return
    if not hasattr(value, "items"):
        raise InvalidArgument(f"parallel.dynamic_cp: expected True, False or a mapping of sizes, "
                              f"min_size, algo; got {value!r}")
    msg = req.parallel.dynamic_cp
    msg.SetInParent()
    for k, v in value.items():
        sf = field.message_type.fields_by_name.get(k)
        if sf is None:
            names = ", ".join(f.name for f in field.message_type.fields)
            raise InvalidArgument(f"parallel.dynamic_cp: unknown field {k!r} (expected one of {names})")
        path = f"parallel.dynamic_cp.{k}"
        setattr(msg, k, _scalar(path, sf, v))


def build(lengths, loss_tokens=None, groups=None, cost=None, **fields):
    """A PlanRequest from arrays and keyword fields (``cost``: the four Cost
    fields at once, see cost_fields). Unknown keywords raise TypeError like
    any Python call; bad values raise InvalidArgument."""
    if cost is not None:
        fields.update(cost_fields(cost, fields))
    pb = _stubs.pb2()
    req = pb.PlanRequest()
    req.lengths.extend(uint_array(lengths, "lengths", 32))
    if loss_tokens is not None:
        req.loss_tokens.extend(uint_array(loss_tokens, "loss_tokens", 32))
    if groups is not None:
        req.groups.extend(uint_array(groups, "groups", 64))
    fmap = field_map()
    for name, value in fields.items():
        if name not in fmap:
            raise TypeError(f"plan() got an unexpected keyword argument {name!r}")
        if value is None:
            continue
        if name == "dynamic_cp":
            _dynamic_cp(req, fmap[name][1], value)
            continue
        sub, field = fmap[name]
        path = f"{sub}.{name}" if sub else name
        v = _scalar(path, field, value)
        if v == field.default_value and not (field.type == _desc.FieldDescriptor.TYPE_STRING and v):
            continue  # Defaults stay unset: the same bytes as any other client.
        setattr(getattr(req, sub) if sub else req, name, v)
    return req
