"""packd: plan and apply the batching of variable-length sequences.

    import packd
    client = packd.Client("127.0.0.1:50051")      # or packd.Client.local()
    plan = client.plan(lengths, dp=8, max_tokens=32768)
    plan[0].micro_batches[0].cu_seqlens_padded     # numpy views
    cal = packd.calibrate("timings.jsonl")         # cost model from packd.timing records
    client.plan(lengths, dp=8, max_tokens=32768, cost=cal)

Submodules load lazily (PEP 562): ``import packd`` is cheap and never pulls
in the gRPC stubs, libpackd.so or the GPU binding (``packd.gpu``) until they
are used. Documentation: docs/python.md.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "Client": ("client", "Client"),
    "Plan": ("plan", "Plan"),
    "DynamicCpPlan": ("dcp", "DynamicCpPlan"),
    "GpuPlan": ("dcp", "GpuPlan"),
    "RankPlan": ("plan", "RankPlan"),
    "MicroBatch": ("plan", "MicroBatch"),
    "PlanError": ("errors", "PlanError"),
    "InvalidArgument": ("errors", "InvalidArgument"),
    "FailedPrecondition": ("errors", "FailedPrecondition"),
    "ResourceExhausted": ("errors", "ResourceExhausted"),
    "NotFound": ("errors", "NotFound"),
    "Unavailable": ("errors", "Unavailable"),
    "DeadlineExceeded": ("errors", "DeadlineExceeded"),
    "Internal": ("errors", "Internal"),
    "Unauthenticated": ("errors", "Unauthenticated"),
    "TrainerInvalidArgument": ("errors", "TrainerInvalidArgument"),
    "TrainerFailedPrecondition": ("errors", "TrainerFailedPrecondition"),
    "Cost": ("calibration", "Cost"),
    "Calibration": ("calibration", "Calibration"),
    "calibrate": ("calibration", "calibrate"),
    "load_manifest": ("manifest", "load_manifest"),
}
_SUBMODULES = ("layout", "verl", "roll", "megatron", "gpu", "errors", "client", "plan", "calibration", "timing", "manifest",
               "dcp")

__all__ = sorted(_LAZY) + ["layout", "verl", "roll", "megatron", "timing"]


def __getattr__(name):
    if name in _LAZY:
        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{mod}", __name__), attr)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'packd' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))
