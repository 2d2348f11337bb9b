"""Reads packctl's input files into the keyword arguments of
``Client.plan``, so that a workload written for ``packctl plan`` plans the
same from Python:

    kwargs = packd.load_manifest("grpo-step-7.json")
    plan = packd.Client.local().plan(**kwargs)

Two formats, told apart as packctl does by the first non-blank character
(docs/packctl.md, "Input"):

- a JSON manifest (``{``): a PlanRequest in the protobuf JSON mapping. Keys
  are proto names or lowerCamelCase; integers are JSON numbers or decimal
  strings; enums the proto name, the short name or the number; bools JSON
  booleans (or the words packctl takes: true/false, yes/no, on/off, 1/0);
  ``null`` means "not set". Unknown keys, duplicate keys and values of the
  wrong type raise ``packd.InvalidArgument`` naming the file and the field.
- a lengths file: one sequence a line, ``TOTAL`` or ``PROMPT RESPONSE``
  (the length is their sum, the loss tokens the response); ``#`` starts a
  comment. Loss tokens are given only when some line has two numbers; a
  ``TOTAL`` line then counts all its tokens as loss tokens.

The result maps the flat keywords of ``Client.plan`` (``dp``, ``max_tokens``,
``mode``, ...) to values, plus ``lengths`` and, where given,
``loss_tokens`` and ``groups``; sub-messages are flattened, as the
keywords are. Values keep the form written (an enum stays its name), and
``Client.plan`` checks them as it checks any keyword, so a bad value there
raises the same error as it would from code.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import _request
from .errors import InvalidArgument

_SUBMESSAGES = ("parallel", "batching", "cost", "layout")
_BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
_UINT32_MAX = (1 << 32) - 1
_UINT64_MAX = (1 << 64) - 1


def _snake(key: str) -> str:
    """lowerCamelCase -> snake_case (packctl's rule); snake_case stays."""
    return "".join("_" + c.lower() if "A" <= c <= "Z" else c for c in key)


def _no_duplicates(name):
    def hook(pairs):
        seen = {}
        for key, value in pairs:
            if key in seen:
                raise InvalidArgument(f"{name}: manifest: duplicate key {key!r}")
            seen[key] = value
        return seen

    return hook


def _uint(value, what: str, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidArgument(f"{what}: expected an unsigned integer (a number or a decimal string), got {value!r}")
    if isinstance(value, str):
        if not value.isdigit() or not value.isascii():
            raise InvalidArgument(f"{what}: expected an unsigned decimal integer, got {value!r}")
        value = int(value)
    if not 0 <= value <= hi:
        raise InvalidArgument(f"{what}: must be in [0, {hi}], got {value}")
    return value


def _uint_array(value, what: str, hi: int) -> list:
    if not isinstance(value, list):
        raise InvalidArgument(f"{what}: expected an array, got {value!r}")
    return [_uint(v, f"{what}[{i}]", hi) for i, v in enumerate(value)]


def _scalar(value, what: str, field):
    """One field of a sub-message (or seed, job) in the form Client.plan
    takes, checked for its JSON type."""
    from google.protobuf import descriptor as d

    t = field.type
    if isinstance(value, (list, dict)):
        raise InvalidArgument(f"{what}: expected a number, string or bool, got {value!r}")
    if t == d.FieldDescriptor.TYPE_BOOL:
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in _BOOL_WORDS:
            return _BOOL_WORDS[word]
        raise InvalidArgument(f"{what}: expected a bool (true/false, yes/no, on/off, 1/0), got {value!r}")
    if t == d.FieldDescriptor.TYPE_ENUM:
        if isinstance(value, bool):
            raise InvalidArgument(f"{what}: expected an enum name or number, got {value!r}")
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
        if isinstance(value, str):
            value = value.replace("-", "_")
        _request.enum_value(field, value, what)  # Raises naming the field and the choices.
        return value
    if t in (d.FieldDescriptor.TYPE_UINT32, d.FieldDescriptor.TYPE_UINT64):
        return _uint(value, what, _UINT32_MAX if t == d.FieldDescriptor.TYPE_UINT32 else _UINT64_MAX)
    if t in (d.FieldDescriptor.TYPE_DOUBLE, d.FieldDescriptor.TYPE_FLOAT):
        if isinstance(value, bool):
            raise InvalidArgument(f"{what}: expected a number, got {value!r}")
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise InvalidArgument(f"{what}: expected a number, got {value!r}") from None
        if x != x or x in (float("inf"), float("-inf")):
            raise InvalidArgument(f"{what}: expected a finite number, got {value!r}")
        return x
    if t == d.FieldDescriptor.TYPE_STRING:
        if not isinstance(value, str):
            raise InvalidArgument(f"{what}: expected a string, got {value!r}")
        return value
    raise InvalidArgument(f"{what}: unsupported field type {t}")


def _from_manifest(text: str, name: str) -> dict:
    try:
        root = json.loads(text, object_pairs_hook=_no_duplicates(name))
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{name}:{exc.lineno}:{exc.colno}: invalid JSON manifest: {exc.msg}") from None
    if not isinstance(root, dict):
        raise InvalidArgument(f"{name}: the manifest must be a JSON object")
    fmap = _request.field_map()
    out: dict = {}
    for key, value in root.items():
        field = _snake(key)
        if value is None:
            continue
        if field in ("lengths", "loss_tokens"):
            out[field] = _uint_array(value, f"{name}: manifest: {field}", _UINT32_MAX)
        elif field == "groups":
            out[field] = _uint_array(value, f"{name}: manifest: {field}", _UINT64_MAX)
        elif field in _SUBMESSAGES:
            if not isinstance(value, dict):
                raise InvalidArgument(f"{name}: manifest: {field}: expected an object, got {value!r}")
            for skey, svalue in value.items():
                sfield = _snake(skey)
                what = f"{name}: manifest: {field}.{skey}"
                if sfield not in fmap or fmap[sfield][0] != field:
                    raise InvalidArgument(f"{name}: manifest: unknown field '{field}.{skey}'")
                if svalue is None:
                    continue
                out[sfield] = _scalar(svalue, what, fmap[sfield][1])
        elif field in ("job", "seed"):
            if field == "job" and not isinstance(value, str):
                raise InvalidArgument(f"{name}: manifest: {key}: expected a string, got {value!r}")
            out[field] = _scalar(value, f"{name}: manifest: {key}", fmap[field][1])
        else:
            raise InvalidArgument(f"{name}: manifest: unknown field '{key}'")
    if not out.get("lengths"):
        raise InvalidArgument(f'{name}: the manifest has no "lengths"')
    return out


def _from_lengths(text: str, name: str) -> dict:
    lengths, loss, two = [], [], False
    for lineno, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 2:
            raise InvalidArgument(f"{name}:{lineno}: expected TOTAL or PROMPT RESPONSE, got {line.strip()!r}")
        values = [_uint(w, f"{name}:{lineno}", _UINT32_MAX) for w in words]
        length = sum(values)
        if length > _UINT32_MAX:
            raise InvalidArgument(f"{name}:{lineno}: PROMPT + RESPONSE = {length} exceeds 2^32-1")
        two = two or len(values) == 2
        lengths.append(length)
        loss.append(values[-1] if len(values) == 2 else length)
    if not lengths:
        raise InvalidArgument(f"{name}: no lengths (every line is blank or a comment)")
    out: dict = {"lengths": lengths}
    if two:
        out["loss_tokens"] = loss
    return out


def load_manifest(path) -> dict:
    """The ``Client.plan`` keyword arguments of a packctl input file (a JSON
    manifest or a lengths file; see the module documentation). ``path`` is
    a file name; ``"-"`` is not read from stdin here."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise InvalidArgument(f"{path}: cannot read: {exc.strerror or exc}") from None
    if text.lstrip().startswith("{"):
        return _from_manifest(text, str(path))
    return _from_lengths(text, str(path))


__all__ = ["load_manifest"]
