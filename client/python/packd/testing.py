"""Helpers to run a real packd server for tests and examples.

    with packd.testing.ServerProcess() as srv:
        client = packd.Client(srv.target)

The server binary is ``$PACKD_SERVER_BIN``, else ``$PACKD_BUILD_DIR/server/packd``.
(``$PACKD_SERVER`` is packctl's fallback server *address*; it is read as the
binary only when it names an existing file, the meaning it had here before.)
Ports are free loopback ports chosen at start; the server is stopped with
SIGTERM (graceful shutdown) and killed only if it does not exit.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["ServerProcess", "server_binary", "free_port"]


def server_binary() -> Path:
    """The packd server binary; FileNotFoundError saying how to build it."""
    env = os.environ.get("PACKD_SERVER_BIN")
    legacy = os.environ.get("PACKD_SERVER")
    if env:
        path = Path(env)
    elif legacy and Path(legacy).is_file():
        path = Path(legacy)
    else:
        build = os.environ.get("PACKD_BUILD_DIR")
        if not build:
            raise FileNotFoundError("set PACKD_BUILD_DIR to a packd build folder (or PACKD_SERVER_BIN to the binary)")
        path = Path(build) / "server" / "packd"
    if not path.is_file():
        raise FileNotFoundError(f"packd server binary not found at {path}; build it with cmake --build <dir>")
    return path


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A packd server on free loopback ports. ``args`` are extra flags
    (e.g. ``["--debug-delay-ms", "500"]``). ``target`` is HOST:PORT of the
    gRPC listener, ``metrics_url`` the /metrics URL."""

    def __init__(self, args=(), binary=None, start_timeout: float = 20.0, log_path=None, drain_delay: float = 0):
        self.binary = Path(binary) if binary else server_binary()
        # Tests stop servers often: no drain delay unless asked for.
        self.args = ["--drain-delay", str(drain_delay), *args]
        self.start_timeout = start_timeout
        self.log_path = log_path
        self.proc = None
        self.port = self.metrics_port = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self) -> "ServerProcess":
        last = None
        for _ in range(5):  # A port taken between choice and bind: try others.
            self.port, self.metrics_port = free_port(), free_port()
            if self.port == self.metrics_port:
                continue
            cmd = [str(self.binary), "--listen", self.target, "--metrics-listen",
                   f"127.0.0.1:{self.metrics_port}", *self.args]
            self._log = open(self.log_path, "w+") if self.log_path else tempfile.TemporaryFile(mode="w+")
            self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
            try:
                self._wait_serving()
                return self
            except RuntimeError as exc:
                last = exc
                self.stop()
        raise RuntimeError(f"packd server did not start: {last}")

    def _wait_serving(self) -> None:
        from .client import Client
        from .errors import PlanError

        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited with {self.proc.returncode}: {self.log_text()[-2000:]}")
            # A fresh channel per probe: a channel that saw the port closed
            # waits out its reconnect backoff even once the server listens.
            with Client(self.target, timeout=1.0, retries=0) as client:
                try:
                    if client.health() == "SERVING":
                        return
                except PlanError:
                    pass
            time.sleep(0.02)
        raise RuntimeError(f"not SERVING after {self.start_timeout}s: {self.log_text()[-2000:]}")

    def log_text(self) -> str:
        """Everything the server printed so far."""
        try:
            self._log.flush()
            self._log.seek(0)
            return self._log.read()
        except (AttributeError, ValueError, OSError):
            return ""

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait, SIGKILL if still running. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        try:
            self._log.close()
        except AttributeError:
            pass
