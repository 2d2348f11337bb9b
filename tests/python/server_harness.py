"""Test harness for the packd server binary: Python stubs generated at test
time from the repository's protos, and a real `packd` process on loopback.

The stubs are made with protoc --python_out and Debian's grpc_python_plugin
into a temporary folder. The proto file names stay "packd/v1/packd.proto" and
"grpc/health/v1/health.proto" (so the descriptor pool accepts another copy of
the same file from the packd Python package), but the modules are written
flat into one package, `pk_server_stubs`, with the cross-imports made
relative: protoc would otherwise name them after `packd` and `grpc`, which
clash with the packd package and with grpcio itself.

Environment: PACKD_BUILD_DIR (default <repo>/build) holds server/packd and
client/c/packctl. PACKD_VALGRIND=1 runs every server under valgrind
(memcheck, leak kinds definite/indirect/possible are errors, suppressions in
tests/python/packd.supp); an error makes the server exit with 99, which the
tests see as a failed stop.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("PACKD_BUILD_DIR", REPO / "build"))
PACKD = BUILD / "server" / "packd"
PACKCTL = BUILD / "client" / "c" / "packctl"
WORKLOADS = REPO / "bench" / "workloads"

# Large enough for a plan of 1,000,000 sequences.
MAX_MESSAGE = 64 << 20
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.max_send_message_length", MAX_MESSAGE),
]

_stubs = None


def _generate(out: Path) -> None:
    pkg = out / "pk_server_stubs"
    with tempfile.TemporaryDirectory() as tmp:
        for include, rel in (
            (REPO / "proto", "packd/v1/packd.proto"),
            (REPO / "server" / "proto", "grpc/health/v1/health.proto"),
        ):
            cmd = [
                "protoc",
                f"-I{include}",
                f"--python_out={tmp}",
                f"--grpc_out={tmp}",
                "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin",
                str(include / rel),
            ]
            subprocess.run(cmd, check=True, capture_output=True, text=True)
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text('"""Generated at test time; do not edit."""\n')
        for sub, name in (("packd/v1", "packd"), ("grpc/health/v1", "health")):
            for suffix in ("_pb2.py", "_pb2_grpc.py"):
                text = (Path(tmp) / sub / (name + suffix)).read_text()
                dotted = sub.replace("/", ".")
                text = text.replace(f"from {dotted} import {name}_pb2 as", f"from . import {name}_pb2 as")
                (pkg / (name + suffix)).write_text(text)


def stubs():
    """A namespace with packd_pb2, packd_pb2_grpc, health_pb2, health_pb2_grpc."""
    global _stubs
    if _stubs is None:
        if shutil.which("protoc") is None:
            raise RuntimeError("protoc not found: install Debian's protobuf-compiler")
        out = Path(tempfile.mkdtemp(prefix="packd-test-stubs-"))
        _generate(out)
        sys.path.insert(0, str(out))

        class _S:
            pass

        _stubs = _S()
        for mod in ("packd_pb2", "packd_pb2_grpc", "health_pb2", "health_pb2_grpc"):
            setattr(_stubs, mod, importlib.import_module(f"pk_server_stubs.{mod}"))
    return _stubs


_READY = re.compile(r"grpc_port=(\d+) metrics_port=(\d+)")


class Server:
    """A running packd process. Its log (stdout and stderr) goes to a file."""

    def __init__(self, proc, log_path, grpc_port, metrics_port):
        self.proc = proc
        self.log_path = log_path
        self.grpc_port = grpc_port
        self.metrics_port = metrics_port
        self.addr = f"127.0.0.1:{grpc_port}"
        self.metrics_url = f"http://127.0.0.1:{metrics_port}"

    def log(self) -> str:
        return Path(self.log_path).read_text(errors="replace")

    def channel(self, **kw):
        return grpc.insecure_channel(self.addr, options=CHANNEL_OPTIONS + list(kw.pop("options", [])), **kw)

    def http_get(self, path: str, timeout: float = 5.0):
        """(status, body) of GET path on the metrics listener."""
        try:
            with urllib.request.urlopen(self.metrics_url + path, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metrics(self) -> str:
        status, body = self.http_get("/metrics")
        assert status == 200, body
        return body

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"packd did not stop within {timeout}s; log:\n{self.log()}")
        return self.proc.returncode


def launch(*args, env=None, listen="127.0.0.1:0", metrics_listen="127.0.0.1:0"):
    """Starts packd without waiting; returns (proc, log_path)."""
    if not PACKD.exists():
        raise RuntimeError(f"{PACKD} is missing: build first (cmake --build {BUILD})")
    fd, log_path = tempfile.mkstemp(prefix="packd-test-", suffix=".log")
    full_env = dict(os.environ)
    for k in list(full_env):
        if k.startswith("PACKD_") and k != "PACKD_BUILD_DIR":
            del full_env[k]
    full_env.update(env or {})
    cmd = [str(PACKD), "--listen", listen, "--metrics-listen", metrics_listen, *args]
    if os.environ.get("PACKD_VALGRIND") == "1":
        cmd = [
            "valgrind",
            "--quiet",
            "--error-exitcode=99",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite,indirect,possible",
            f"--suppressions={Path(__file__).resolve().parent / 'packd.supp'}",
            *cmd,
        ]
    proc = subprocess.Popen(cmd, stdout=fd, stderr=subprocess.STDOUT, env=full_env)
    os.close(fd)
    return proc, log_path


def start(*args, env=None, timeout: float = None) -> Server:
    """Starts packd on free loopback ports and waits for its start-up line."""
    proc, log_path = launch(*args, env=env)
    if timeout is None:
        timeout = 60.0 if os.environ.get("PACKD_VALGRIND") == "1" else 15.0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = Path(log_path).read_text(errors="replace")
        m = _READY.search(text)
        if m:
            return Server(proc, log_path, int(m.group(1)), int(m.group(2)))
        if proc.poll() is not None:
            raise RuntimeError(f"packd exited with {proc.returncode} at start-up:\n{text}")
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"packd did not start within {timeout}s:\n{Path(log_path).read_text()}")


def plan_request(lengths, dp=4, max_tokens=0, **kw):
    """A PlanRequest with the given lengths; extra keyword arguments go to
    batching (mode, equal_count, ...) unless they are PlanRequest fields."""
    pb = stubs().packd_pb2
    batching = {k: v for k, v in kw.items() if k in pb.Batching.DESCRIPTOR.fields_by_name}
    top = {k: v for k, v in kw.items() if k not in batching}
    req = pb.PlanRequest(lengths=list(lengths), parallel=pb.Parallel(dp=dp), **top)
    req.batching.CopyFrom(pb.Batching(max_tokens=max_tokens, **batching))
    return req


def workload(name: str = "azure_conv_2023.txt", n: int | None = None):
    """Lengths from bench/workloads: one sequence a line, TOTAL or PROMPT
    RESPONSE (the length is the sum); '#' starts a comment."""
    out = []
    for line in (WORKLOADS / name).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(sum(int(x) for x in line.split()))
            if n is not None and len(out) >= n:
                break
    return out


def eventually(check, timeout: float = 10.0):
    """Calls check() until it stops raising AssertionError or timeout passes.
    The server records a call (metrics, log line) when the last byte of the
    answer has left, which may be just after the client has it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
