"""Replacing a trainer's functions in place, and putting them back.

A trainer imports its batching functions in two ways: ``import
mod; mod.f(...)`` reads the module attribute at call time, ``from mod
import f`` copies the function object into the importing module when it
loads. Replacing the attribute of ``mod`` covers the first kind and every
module imported afterwards; the second kind, for modules already loaded,
needs the copy replaced too. So a patch replaces the attribute and then
every global of every loaded module that is the very same function object
(identity, not name: ``from mod import f as g`` is found as well).

Each replacement is recorded with what it replaced, so ``undo()`` restores
exactly the objects that were there, in reverse order. A patch of the same
name is applied once per process: a second ``apply`` returns the handle of
the first (idempotent), and logs nothing.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading

__all__ = ["PatchHandle", "Wrap", "apply"]

_log = logging.getLogger("packd")
# Reentrant: importing a trainer's module inside apply() may run an import
# hook that applies the same patch (tests/peers' start-up hook does).
_lock = threading.RLock()
_active: dict = {}


class PatchHandle:
    """What one ``patch()`` replaced; ``undo()`` puts it back. Usable as a
    context manager (undone on exit)."""

    # What undo() logs, after the patch's name.
    restored = "functions restored"

    def __init__(self, name: str):
        self.name = name
        self.replaced: list = []  # labels of what was replaced, in order
        self.skipped: list = []  # what this version does not have
        self._undo: list = []  # callables restoring one change each
        self.active = False

    def undo(self) -> None:
        """Restores every replaced object. Safe to call twice."""
        with _lock:
            if not self.active:
                return
            for restore in reversed(self._undo):
                restore()
            self._undo.clear()
            self.active = False
            if _active.get(self.name) is self:
                del _active[self.name]
        _log.info("packd: %s %s", self.name, self.restored)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.undo()

    def __repr__(self) -> str:
        state = "active" if self.active else "undone"
        return f"{type(self).__name__}({self.name!r}, {state}, replaced={self.replaced})"


def _set(handle: PatchHandle, ns: dict, key: str, new, label: str) -> None:
    """Sets ``ns[key] = new`` (a key ``ns`` may lack) and records how to
    restore it under ``label``."""
    if key in ns:
        old = ns[key]
        handle._undo.append(lambda: ns.__setitem__(key, old))
    else:
        handle._undo.append(lambda: ns.pop(key, None))
    ns[key] = new
    handle.replaced.append(label)


class Wrap:
    """A replacement built from the object it replaces (a subclass of a
    trainer's class, say): ``make(original)`` is called only when the
    attribute exists, so a version without it is skipped, not broken."""

    def __init__(self, make):
        self.make = make


def apply(name: str, targets: dict) -> PatchHandle:
    """Replaces ``targets`` = ``{module name: {attribute: replacement or
    Wrap}}``, as far as the installed version of the trainer has them.

    Trainer versions differ in what they define (a function added in one
    release, a module moved in another): a module that does not import, or
    an attribute it does not have, is skipped, and what was skipped is
    logged once (a warning on logger "packd", naming each, with the import
    error) so that a path left unpatched is never silent. Only when nothing
    at all matches does it fail: ImportError when no module imported,
    AttributeError naming the attributes looked for otherwise. Returns the
    handle of the active patch (the same one while it is active)."""
    with _lock:
        if name in _active:
            return _active[name]
        found: dict = {}
        skipped: list = []
        import_errors: list = []
        for mod_name, attrs in targets.items():
            try:
                mod = importlib.import_module(mod_name)
            except ImportError as exc:
                import_errors.append(f"{mod_name} ({exc})")
                skipped.extend(f"{mod_name}.{attr}" for attr in attrs)
                continue
            for attr, new in attrs.items():
                if hasattr(mod, attr):
                    found.setdefault(mod_name, (mod, {}))[1][attr] = new
                else:
                    skipped.append(f"{mod_name}.{attr}")
        if name in _active:  # Applied while the modules were imported.
            return _active[name]
        if not found:
            if len(import_errors) == len(targets):
                raise ImportError(f"packd.{name}.patch(): cannot import {'; '.join(import_errors)}")
            looked = ", ".join(f"{m}.{a}" for m, attrs in targets.items() for a in attrs)
            raise AttributeError(
                f"packd.{name}.patch(): this {name} version has none of {looked}; it is not supported"
            )
        handle = PatchHandle(name)
        originals = {}
        for mod_name, (mod, attrs) in found.items():
            ns = mod.__dict__
            for attr, new in attrs.items():
                if isinstance(new, Wrap):
                    new = new.make(ns[attr])
                originals[id(ns[attr])] = (ns[attr], new)
                _set(handle, ns, attr, new, f"{mod_name}.{attr}")
        # Copies made by `from mod import f` in modules already loaded.
        for mod_name, mod in list(sys.modules.items()):
            ns = getattr(mod, "__dict__", None)
            if not isinstance(ns, dict) or mod_name in found:
                continue
            for key, value in list(ns.items()):
                hit = originals.get(id(value))
                if hit is not None and hit[0] is value:
                    _set(handle, ns, key, hit[1], f"{mod_name}.{key}")
        handle.skipped = skipped
        handle.active = True
        _active[name] = handle
    _log.info("packd: %s functions replaced: %s", name, ", ".join(handle.replaced))
    if skipped:
        detail = f" (import failed: {'; '.join(import_errors)})" if import_errors else ""
        _log.warning("packd: %s functions not in this %s version, left as they are: %s%s", name, name,
                     ", ".join(skipped), detail)
    return handle
