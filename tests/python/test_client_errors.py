"""Every error class arrives as the right packd.PlanError subclass with the
server's message; only UNAVAILABLE is retried."""

import os
import re
import sys
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

import packd  # noqa: E402
from packd.testing import ServerProcess, free_port  # noqa: E402


@pytest.fixture(scope="module")
def server():
    # Every failed call logged (no --log-refused-interval limit): the tests
    # read each message back from the log.
    with ServerProcess(args=("--log-refused-interval", "0")) as srv:
        yield srv


@pytest.fixture(scope="module")
def local():
    return packd.Client.local()


LENGTHS = np.array([5000, 300, 1200, 64, 4096, 700, 2500, 1])

# (keywords, exception class, a fragment the message must contain)
BAD_REQUESTS = [
    (dict(dp=0), packd.InvalidArgument, "parallel.dp"),
    (dict(dp=2, dp_balance=77), packd.InvalidArgument, "batching.dp_balance: 77"),
    (dict(dp=2, micro_algo=9), packd.InvalidArgument, "batching.micro_algo"),
    (dict(dp=2, loss_tokens=[1, 2]), packd.InvalidArgument, "loss_tokens"),
    (dict(dp=2, loss_tokens=LENGTHS + 1), packd.InvalidArgument, "loss_tokens"),
    (dict(dp=2, max_tokens=1000), packd.FailedPrecondition, "lengths[0]"),
    (dict(dp=2, cp=4, max_tokens=1200), packd.FailedPrecondition, "lengths[0]"),
]


def _call(client, kw):
    kw = dict(kw)
    lengths = kw.pop("lengths", LENGTHS)
    return client.plan(lengths, **kw)


@pytest.mark.parametrize("kw,cls,fragment", BAD_REQUESTS, ids=lambda x: str(x)[:40])
def test_server_errors_map_to_exceptions(server, local, kw, cls, fragment):
    with packd.Client(server.target, retries=4) as remote:
        with pytest.raises(cls) as remote_err:
            _call(remote, kw)
        assert remote.last_attempts == 1, "a refused request is never retried"
    e = remote_err.value
    assert isinstance(e, packd.PlanError) and e.code == cls.code
    assert fragment in e.message, e.message
    # The embedded planner raises the same class with the same message.
    with pytest.raises(cls) as local_err:
        _call(local, kw)
    assert local_err.value.message == e.message
    assert local_err.value.code == e.code
    # The server logged the message it sent.
    # The log line is written after the answer is sent: wait for it.
    deadline = time.monotonic() + 5.0
    while e.message not in server.log_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert e.message in server.log_text()


def test_invalid_argument_is_not_retried(server):
    """One INVALID_ARGUMENT call reaches the server exactly once even with
    retries configured (counted in the server's own log)."""
    marker = 31337  # makes this request's log line unique
    with packd.Client(server.target, retries=5, backoff=0.01) as client:
        with pytest.raises(packd.InvalidArgument):
            client.plan([1, 2, 3], dp=2, dp_balance=marker)
    time.sleep(0.2)  # the server logs after replying
    lines = [ln for ln in server.log_text().splitlines() if f"dp_balance: {marker}" in ln]
    assert len(lines) == 1, lines
    assert client.last_attempts == 1


def test_not_found_and_bad_rank(server, local):
    remote = packd.Client(server.target)
    for client in (remote, local):  # the remote client is closed below
        with pytest.raises(packd.NotFound) as err:
            client.rank_plan("0123456789abcdef0123456789abcdef", 0)
        assert "0123456789abcdef0123456789abcdef" in err.value.message
        plan = client.plan(LENGTHS, dp=2)
        with pytest.raises(packd.InvalidArgument, match="dp_rank"):
            client.rank_plan(plan.plan_id, 2)
    with pytest.raises(packd.NotFound, match="unknown"):
        remote.health("no.such.Service")
    remote.close()


def test_resource_exhausted_over_max_message_bytes():
    with ServerProcess(["--max-message-bytes", "4096"]) as srv:
        with packd.Client(srv.target, retries=3) as client:
            with pytest.raises(packd.ResourceExhausted) as err:
                client.plan(np.full(2000, 100), dp=4)
            assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert err.value.message
            assert client.last_attempts == 1


def test_deadline_exceeded_is_not_retried():
    with ServerProcess(["--debug-delay-ms", "600", "--grace-period", "1"]) as srv:
        with packd.Client(srv.target, timeout=0.15, retries=3) as client:
            t0 = time.monotonic()
            with pytest.raises(packd.DeadlineExceeded) as err:
                client.plan(LENGTHS, dp=2)
            assert isinstance(err.value, TimeoutError)
            assert client.last_attempts == 1
            assert time.monotonic() - t0 < 0.6


def test_unavailable_after_retries():
    port = free_port()  # nobody listens here
    client = packd.Client(f"127.0.0.1:{port}", retries=2, backoff=0.02, timeout=2)
    with pytest.raises(packd.Unavailable) as err:
        client.plan(LENGTHS, dp=2)
    assert client.last_attempts == 3
    assert "after 3 attempts" in err.value.message
    assert isinstance(err.value, ConnectionError)


def test_retry_reaches_a_server_that_starts_late():
    port, mport = free_port(), free_port()
    client = packd.Client(f"127.0.0.1:{port}", retries=30, backoff=0.05, max_backoff=0.2, timeout=5)
    srv = ServerProcess()

    def start_late():
        time.sleep(0.4)
        srv.port, srv.metrics_port = port, mport
        import subprocess
        import tempfile

        srv._log = tempfile.TemporaryFile(mode="w+")
        srv.proc = subprocess.Popen(
            [str(srv.binary), "--listen", f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{mport}",
             "--drain-delay", "0"],
            stdout=srv._log, stderr=subprocess.STDOUT,
        )

    t = threading.Thread(target=start_late)
    t.start()
    try:
        plan = client.plan(LENGTHS, dp=2)
        assert plan.num_sequences == LENGTHS.size
        assert client.last_attempts > 1
    finally:
        client.close()
        t.join()
        srv.stop()


@pytest.mark.parametrize(
    "kw,pattern",
    [
        (dict(lengths=[3, 4, -1]), r"lengths\[2\]: must be >= 0, got -1"),
        (dict(lengths=[3, 1 << 33]), r"lengths\[1\]: must be in \[0, 4294967295\]"),
        (dict(lengths=[1.5, 2]), r"lengths\[0\]: expected an integer, got 1.5 \(a float\)"),
        (dict(lengths=[[1, 2]]), r"lengths: expected a 1-D sequence"),
        (dict(dp=-1), r"parallel.dp: must be in \[0, 4294967295\], got -1"),
        (dict(dp=2, mode="zigzag"), r"batching.mode: unknown value 'zigzag' \(expected one of packed, padded, fixed\)"),
        (dict(dp=2, shuffle="yes"), r"batching.shuffle: expected a bool"),
        (dict(dp=2, groups=[-4] * 8), r"groups\[0\]: must be >= 0"),
    ],
)
def test_bad_values_are_refused_before_sending(kw, pattern):
    # An unreachable target: a local refusal never gets as far as the network.
    client = packd.Client(f"127.0.0.1:{free_port()}", retries=0)
    with pytest.raises(packd.InvalidArgument, match=pattern):
        _call(client, kw)
    assert client.last_attempts == 0


def test_unknown_keyword_is_a_type_error(local):
    with pytest.raises(TypeError, match="no_such_field"):
        local.plan(LENGTHS, dp=2, no_such_field=1)


def test_error_str_names_status_and_message(local):
    with pytest.raises(packd.PlanError) as err:
        local.plan(LENGTHS, dp=0)
    assert re.match(r"INVALID_ARGUMENT: parallel\.dp", str(err.value))
