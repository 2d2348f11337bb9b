"""packd.Client: plans over gRPC, or in-process with ``Client.local()``.

Both modes take the same keywords and return the same Plan objects; a
trainer switches between a packd service and the embedded planner by
changing how it builds the client, nothing else.
"""

from __future__ import annotations

import os
import random
import threading
import time

import grpc

from . import _health, _request, _security, _stubs
from .errors import PlanError, error_for
from .plan import Plan, RankPlan

__all__ = ["Client", "DEFAULT_TARGET", "DEFAULT_MAX_MESSAGE_BYTES"]

DEFAULT_TARGET = "127.0.0.1:50051"
#: 1 GiB each way: a plan of 1M sequences is a few tens of MB.
DEFAULT_MAX_MESSAGE_BYTES = 1 << 30


class _RemoteTransport:
    kind = "remote"

    def __init__(self, target, options, credentials, metadata=()):
        self._args = (target, options, credentials)
        # The bearer token travels as call metadata: gRPC only composes call
        # credentials with TLS, and a token on a plaintext channel (a test, a
        # sidecar on loopback) must work too.
        self._metadata = tuple(metadata) or None
        self._open()

    def _open(self):
        target, options, credentials = self._args
        if credentials is None:
            self.channel = grpc.insecure_channel(target, options=options)
        else:
            self.channel = grpc.secure_channel(target, credentials, options=options)
        stub = _stubs.pb2_grpc().PlannerStub(self.channel)
        self._plan = stub.Plan
        self._rank_plan = stub.GetRankPlan
        req_cls, resp_cls = _health.classes()
        self._req_cls = req_cls
        self._check = self.channel.unary_unary(
            _health.CHECK_METHOD,
            request_serializer=req_cls.SerializeToString,
            response_deserializer=resp_cls.FromString,
        )

    def plan(self, request, timeout):
        return self._plan(request, timeout=timeout, metadata=self._metadata)

    def rank_plan(self, request, timeout):
        return self._rank_plan(request, timeout=timeout, metadata=self._metadata)

    def health(self, service, timeout) -> str:
        resp = self._check(self._req_cls(service=service), timeout=timeout, metadata=self._metadata)
        return _health.STATUS_NAMES.get(resp.status, str(resp.status))

    def reconnect(self):
        """A fresh channel: after UNAVAILABLE the old channel may sit in its
        reconnect backoff (or keep a failed handshake) while the server is
        already back; a new channel connects at once."""
        # The old channel is not closed here: another thread may still be
        # using it; it closes when garbage collected.
        self._open()

    def close(self):
        self.channel.close()


def _channel_options(max_message_bytes: int, extra) -> list:
    opts = {
        "grpc.max_send_message_length": int(max_message_bytes),
        "grpc.max_receive_message_length": int(max_message_bytes),
        # The client retries UNAVAILABLE itself (counted, with backoff, on a
        # fresh channel); the channel's own retries stay off so the count is
        # exact.
        "grpc.enable_retries": 0,
    }
    for k, v in dict(extra or {}).items():
        opts[k] = v
    return list(opts.items())


class Client:
    """A packd planner client.

    ``Client(target)`` talks to a packd server over gRPC (``target`` is
    ``HOST:PORT``; default ``$PACKD_TARGET`` or 127.0.0.1:50051).
    ``Client.local()`` runs the same planner in-process through
    libpackd.so.

    timeout: seconds per attempt of one call (gRPC deadline).
    retries: extra attempts after UNAVAILABLE (server not reachable), with
    exponential backoff from ``backoff`` seconds up to ``max_backoff``, with
    jitter. No other status is retried: a bad request fails at once.
    max_message_bytes: send and receive limit (default 1 GiB, enough for
    plans of millions of sequences).
    options: extra gRPC channel options (dict).

    Security (see docs/operators.md, Security): ``tls_ca`` (file or PEM
    bytes of the CAs that signed the server's certificate) turns TLS on;
    ``tls_cert`` and ``tls_key`` add a client certificate for servers that
    require one; ``token`` (or ``token_file``) is sent as ``authorization:
    Bearer <token>``. Unset, they fall back to PACKD_TLS_CA,
    PACKD_TLS_CLIENT_CERT, PACKD_TLS_CLIENT_KEY and PACKD_TOKEN_FILE.
    ``credentials`` takes ready
    grpc.ChannelCredentials instead of the tls_* options.
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        options=None,
        credentials=None,
        tls_ca=None,
        tls_cert=None,
        tls_key=None,
        token: str | None = None,
        token_file=None,
        _transport=None,
    ):
        if retries < 0:
            raise ValueError(f"retries: must be >= 0, got {retries}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout: must be > 0 seconds, got {timeout}")
        self.timeout = timeout
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self._local = threading.local()
        if _transport is not None:
            self.target = None
            self._transport = _transport
        else:
            self.target = target or os.environ.get("PACKD_TARGET") or DEFAULT_TARGET
            tls, metadata = _security.channel_security(
                tls_ca, tls_cert, tls_key, token, token_file, tls_from_env=credentials is None
            )
            if credentials is not None and tls is not None:
                raise ValueError("credentials and tls_*: give one way to set up TLS, not both")
            self._transport = _RemoteTransport(
                self.target,
                _channel_options(max_message_bytes, options),
                credentials if credentials is not None else tls,
                metadata,
            )

    @classmethod
    def local(cls, library=None, *, cache_plans: int = 16) -> "Client":
        """A client that plans in-process with libpackd.so (found from
        ``library``, PACKD_LIB, next to the package, or
        ``$PACKD_BUILD_DIR/server/libpackd.so``). The last ``cache_plans``
        plans stay available to ``rank_plan``."""
        from ._embedded import EmbeddedTransport

        return cls(_transport=EmbeddedTransport(library, cache_plans), retries=0)

    @property
    def mode(self) -> str:
        """"remote" or "embedded"."""
        return self._transport.kind

    @property
    def last_attempts(self) -> int:
        """How many attempts the last call of this thread made (1 when it
        was not retried)."""
        return getattr(self._local, "attempts", 0)

    def _call(self, fn, request):
        delay = self.backoff
        attempt = 0
        while True:
            attempt += 1
            self._local.attempts = attempt
            try:
                return fn(request, self.timeout)
            except PlanError:
                raise
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
                details = (exc.details() if hasattr(exc, "details") else None) or str(exc)
                if code == grpc.StatusCode.UNAVAILABLE and attempt <= self.retries:
                    time.sleep(min(delay, self.max_backoff) * (0.5 + random.random() / 2))
                    delay *= 2
                    if hasattr(self._transport, "reconnect"):
                        self._transport.reconnect()
                    continue
                if code == grpc.StatusCode.UNAVAILABLE and attempt > 1:
                    details = f"{details} (after {attempt} attempts)"
                raise error_for(code, details) from None

    def plan_request(self, request, lengths=None) -> Plan:
        """Plans a ready packd.v1.PlanRequest message: a Plan, or a
        DynamicCpPlan when the request sets parallel.dynamic_cp."""
        resp = self._call(self._transport.plan, request)
        lengths = lengths if lengths is not None else request.lengths
        if resp.HasField("dynamic_cp"):
            from .dcp import DynamicCpPlan

            return DynamicCpPlan(resp, lengths)
        return Plan(resp, lengths)

    def plan(
        self,
        lengths,
        *,
        loss_tokens=None,
        groups=None,
        job: str = "",
        # Parallel.
        dp: int = 0,
        tp: int = 0,
        cp: int = 0,
        pp: int = 0,
        vpp: int = 0,
        cp_algo="zigzag",
        sequence_parallel: bool = False,
        num_heads: int = 0,
        microbatch_group: int = 0,
        dynamic_cp=None,
        # Batching.
        mini_batches: int = 0,
        shuffle: bool = False,
        dp_balance="auto",
        equal_count: bool = False,
        mode="packed",
        max_tokens: int = 0,
        max_seqs: int = 0,
        micro_batch_size: int = 0,
        min_micro_batches: int = 0,
        round: int = 0,
        micro_algo="auto",
        order="cost_desc",
        keep_groups: bool = False,
        groups_on_rank: bool = False,
        # Cost: a packd.Cost, packd.Calibration, packd.v1.Cost or mapping as
        # cost=, or the fields one by one.
        cost=None,
        linear: float = 0.0,
        quadratic: float = 0.0,
        per_sequence: float = 0.0,
        per_micro_batch: float = 0.0,
        cp_token: float = 0.0,
        cp_group: float = 0.0,
        # Layout.
        align: int = 0,
        pad_multiple: int = 0,
        total_multiple: int = 0,
        fixed_shape: bool = False,
        seed: int = 0,
    ) -> Plan:
        """Plans one global batch. Keywords are the PlanRequest fields
        (proto names and defaults; 0 means the proto's default). ``dp`` is
        required (>= 1). Enums take short names ("kk_equal"), proto names
        or numbers. ``cost`` sets linear, quadratic, per_sequence and
        per_micro_batch at once (a packd.Cost, the packd.Calibration of
        packd.calibrate, a packd.v1.Cost or a mapping of its fields).
        ``dynamic_cp`` (True, or a mapping of sizes, min_size and algo)
        plans dynamic context parallelism over the dp x cp GPUs instead and
        returns a packd.DynamicCpPlan; ``cp_token`` and ``cp_group`` are its
        CP cost terms. Raises a PlanError subclass (InvalidArgument,
        FailedPrecondition, ...) carrying the server's message."""
        fields = dict(
            job=job, dp=dp, tp=tp, cp=cp, pp=pp, vpp=vpp, cp_algo=cp_algo,
            sequence_parallel=sequence_parallel, num_heads=num_heads,
            microbatch_group=microbatch_group, dynamic_cp=dynamic_cp, mini_batches=mini_batches,
            shuffle=shuffle,
            dp_balance=dp_balance, equal_count=equal_count, mode=mode, max_tokens=max_tokens,
            max_seqs=max_seqs, micro_batch_size=micro_batch_size,
            min_micro_batches=min_micro_batches, round=round, micro_algo=micro_algo, order=order,
            keep_groups=keep_groups, groups_on_rank=groups_on_rank, linear=linear,
            quadratic=quadratic, per_sequence=per_sequence, per_micro_batch=per_micro_batch,
            cp_token=cp_token, cp_group=cp_group, align=align,
            pad_multiple=pad_multiple, total_multiple=total_multiple, fixed_shape=fixed_shape,
            seed=seed,
        )
        request = _request.build(lengths, loss_tokens, groups, cost=cost, **fields)
        return self.plan_request(request, lengths=request.lengths)

    def rank_plan(self, plan_id: str, rank: int):
        """One rank's part of a recent plan (GetRankPlan): a RankPlan, or
        for a dynamic-CP plan GPU ``rank``'s packd.GpuPlan (equal to
        ``plan.gpu(rank)`` of the whole plan). NotFound when the plan has
        left the cache; InvalidArgument naming dp_rank when the plan has no
        such rank (or GPU)."""
        pb = _stubs.pb2()
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < (1 << 32):
            raise error_for(grpc.StatusCode.INVALID_ARGUMENT, f"dp_rank: must be in [0, 4294967295], got {rank!r}")
        req = pb.GetRankPlanRequest(plan_id=str(plan_id), dp_rank=rank)
        message = self._call(self._transport.rank_plan, req)
        if message.HasField("dynamic_cp"):
            from .dcp import GpuPlan

            return GpuPlan.from_message(message)
        return RankPlan(message)

    def health(self, service: str = "") -> str:
        """The grpc.health.v1 status of the server: "SERVING",
        "NOT_SERVING", ... for the service ``""`` (the whole server) or
        ``"packd.v1.Planner"``; any other name raises NotFound. Embedded,
        the same names answer "SERVING" and others raise the same NotFound."""
        return self._call(lambda req, timeout: self._transport.health(req, timeout), service)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        where = self.target if self.mode == "remote" else str(self._transport.library.path)
        return f"Client({self.mode}: {where}, timeout={self.timeout}, retries={self.retries})"
