"""Exceptions raised by packd.

Every failure of a planning call is a ``PlanError`` subclass chosen by the
gRPC status code, whether the call went to a server or ran embedded. The
exception carries the status (``code``, a ``grpc.StatusCode``) and the
server's message (``message``), which names the offending field and value.
"""

from __future__ import annotations

import grpc

__all__ = [
    "PlanError",
    "InvalidArgument",
    "FailedPrecondition",
    "ResourceExhausted",
    "NotFound",
    "Unavailable",
    "DeadlineExceeded",
    "Internal",
    "Unauthenticated",
    "TrainerInvalidArgument",
    "TrainerFailedPrecondition",
    "error_for",
]


class PlanError(Exception):
    """A planning call failed. ``code`` is the grpc.StatusCode and
    ``message`` the server's (or embedded planner's) message."""

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: grpc.StatusCode | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


class InvalidArgument(PlanError, ValueError):
    """A request field has a bad value (INVALID_ARGUMENT)."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class FailedPrecondition(PlanError):
    """Valid fields that cannot be met together, e.g. a sequence longer than
    the token cap (FAILED_PRECONDITION)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(PlanError):
    """The request is too large to plan or the server is saturated
    (RESOURCE_EXHAUSTED)."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class NotFound(PlanError, LookupError):
    """A plan id is not in the server's cache (NOT_FOUND)."""

    code = grpc.StatusCode.NOT_FOUND


class Unavailable(PlanError, ConnectionError):
    """The server could not be reached, after every retry (UNAVAILABLE)."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(PlanError, TimeoutError):
    """The call did not finish within the client's timeout
    (DEADLINE_EXCEEDED)."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Internal(PlanError):
    """A bug in the server or planner (INTERNAL)."""

    code = grpc.StatusCode.INTERNAL


class Unauthenticated(PlanError, PermissionError):
    """The server wants a bearer token this client did not send or that it
    does not accept (UNAUTHENTICATED): see ``token=`` and ``token_file=``."""

    code = grpc.StatusCode.UNAUTHENTICATED


class TrainerInvalidArgument(InvalidArgument, AssertionError):
    """InvalidArgument raised by a trainer adapter (packd.verl, packd.roll)
    where the trainer's own function asserts: also an AssertionError (and,
    as every InvalidArgument, a ValueError), so the trainer's ``except``
    clauses keep catching it."""


class TrainerFailedPrecondition(FailedPrecondition, AssertionError, ValueError):
    """FailedPrecondition raised by a trainer adapter: also an
    AssertionError and a ValueError, the two types verl's and ROLL's
    functions raise for the same conditions (a sequence or forced group
    over the token cap, more micro-batches than groups, counts that do not
    divide), so the trainer's ``except`` clauses keep catching it."""


_BY_CODE = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        FailedPrecondition,
        ResourceExhausted,
        NotFound,
        Unavailable,
        DeadlineExceeded,
        Internal,
        Unauthenticated,
    )
}
_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


def status_code(number: int) -> grpc.StatusCode:
    """The grpc.StatusCode with the given numeric value (UNKNOWN if none)."""
    return _BY_NUMBER.get(int(number), grpc.StatusCode.UNKNOWN)


def error_for(code, message: str) -> PlanError:
    """The PlanError subclass instance for a status code (a grpc.StatusCode
    or its number)."""
    if not isinstance(code, grpc.StatusCode):
        code = status_code(code)
    cls = _BY_CODE.get(code, PlanError)
    return cls(message, code)
