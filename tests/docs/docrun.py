"""Executed documentation: find the code blocks of a Markdown document, run
them in document order in a fresh temporary folder against a packd build,
and compare the outputs the document shows with what the commands print.

The conventions (also in tests/docs/README.md):

- A fenced block tagged ``sh``, ``bash`` or ``shell`` is a shell script; it
  runs with ``bash -e -o pipefail`` and must exit 0.
- A fenced block tagged ``python`` runs in one Python namespace per document,
  so later blocks use the names earlier blocks defined.
- An untagged fenced block whose first line starts with ``$ `` is a
  transcript: each ``$ `` line (with ``\\`` continuation lines) is a command,
  the lines up to the next ``$ `` line are what it prints (stdout and stderr
  together), and that text is compared.
- Other blocks (``json``, ``c``, untagged listings) are not run.
- An HTML comment ``<!-- doc: ... -->`` on the lines just before a block
  changes how it is run: ``skip reason=TEXT`` (not run; the reason is
  printed), ``server`` (a real packd server runs for the block),
  ``output`` (this block is the expected output of the block before it),
  ``timeout=SECONDS``, ``before COMMAND`` (a shell command run first, for
  inputs the document describes in words, e.g. a file of timings). ``<!-- doc: picture FILE -->`` before a paragraph
  runs the ``packctl ...`` command written in that paragraph's code span
  and compares the FILE it writes with the committed one.

Every block of a document sees: the working folder, a fresh temporary folder
holding links to the repository's top-level entries (``docs/`` copied, so
commands may write there) and ``build`` linked to the build under test; the
build's ``client/c`` and ``server`` folders and a ``python3`` that is
/usr/bin/python3 first on PATH; ``PACKD_BUILD_DIR``. The addresses
``127.0.0.1:50051`` and ``127.0.0.1:9464`` written in a document are
replaced by free loopback ports chosen per document, so documents can show
the defaults while tests run beside each other.

Outputs are compared after normalising what changes from run to run:
planning times, timestamps, the temporary folder and the repository path.
``write`` mode (scripts/make-docs.sh) puts the new outputs and pictures into
the documents instead, keeping a shown output wherever it already matches.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHELL_TAGS = {"sh", "bash", "shell"}
DEFAULT_TIMEOUT = 120.0
REFRESH = "scripts/make-docs.sh"

# The documents the doc test runs, relative to the repository root.
DOCUMENTS = (
    "README.md",
    "docs/packctl.md",
    "docs/operators.md",
    "docs/python.md",
    "client/python/README.md",
    "gpu/README.md",
    "bench/quality/README.md",
)

_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*doc:\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    """One fenced block: its tag, text, first line (1-based, the fence) and
    last line (the closing fence), and the markers written before it."""

    path: str
    tag: str
    text: str
    start: int
    end: int
    indent: str
    markers: dict = field(default_factory=dict)
    kind: str = "listing"  # sh, python, transcript, output, listing, picture

    def where(self) -> str:
        return f"{self.path}:{self.start}"


def parse_marker(text: str) -> dict:
    """``skip reason=needs a GPU`` -> {"skip": True, "reason": "needs a GPU"};
    ``reason=`` takes the rest of the comment."""
    out: dict = {}
    m = re.match(r"before\s+(.*)$", text)
    if m:
        return {"before": m.group(1).strip()}
    reason = None
    m = re.search(r"\breason=(.*)$", text)
    if m:
        reason = m.group(1).strip()
        text = text[: m.start()]
    words = text.split()
    i = 0
    while i < len(words):
        w = words[i]
        if "=" in w:
            k, v = w.split("=", 1)
            out[k] = v
        elif w == "picture" and i + 1 < len(words):
            out["picture"] = words[i + 1]
            i += 1
        else:
            out[w] = True
        i += 1
    if reason is not None:
        out["reason"] = reason
    return out


def parse(path: Path, rel: str | None = None) -> list[Block]:
    """Every fenced block of the document, and a ``picture`` pseudo-block for
    each picture marker, in document order."""
    rel = rel or str(path)
    lines = path.read_text().split("\n")
    blocks: list[Block] = []
    pending: dict = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        mk = _MARKER.match(line)
        if mk:
            marker = parse_marker(mk.group(1))
            if "picture" in marker:
                # The command is the first code span starting with packctl
                # in the paragraph that follows the marker.
                j = i + 1
                para = []
                while j < len(lines) and (lines[j].strip() or not para):
                    para.append(lines[j])
                    j += 1
                spans = re.findall(r"`([^`]*)`", " ".join(s.strip() for s in para))
                cmd = next((s for s in spans if s.startswith("packctl ") and marker["picture"] in s), None)
                if cmd is None:
                    raise ValueError(f"{rel}:{i + 1}: picture marker without a `packctl ... {marker['picture']}` command after it")
                blocks.append(Block(rel, "", cmd, i + 1, i + 1, "", marker, "picture"))
            else:
                pending.update(marker)
            i += 1
            continue
        fm = _FENCE.match(line)
        if fm:
            indent, fence, tag = fm.group(1), fm.group(2), fm.group(3).lower()
            body = []
            j = i + 1
            while j < len(lines) and not (lines[j].strip().startswith(fence[:3]) and lines[j].strip().strip(fence[0]) == ""):
                body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
                j += 1
            text = "\n".join(body) + "\n"
            b = Block(rel, tag, text, i + 1, j + 1, indent, pending)
            if pending.get("output"):
                b.kind = "output"
            elif tag in SHELL_TAGS:
                b.kind = "sh"
            elif tag == "python":
                b.kind = "python"
            elif tag == "" and body and body[0].startswith("$ "):
                b.kind = "transcript"
            blocks.append(b)
            pending = {}
            i = j + 1
            continue
        if line.strip():
            pending = {}
        i += 1
    return blocks


def transcript_steps(text: str) -> list[tuple[str, list[str]]]:
    """[(command, shown output lines)] of a transcript block."""
    steps: list[tuple[str, list[str]]] = []
    lines = text.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            raise ValueError(f"transcript line {i + 1} is not a '$ ' command: {lines[i]!r}")
        cmd = [lines[i][2:]]
        while cmd[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd.append(lines[i])
        i += 1
        out = []
        while i < len(lines) and not lines[i].startswith("$ "):
            out.append(lines[i])
            i += 1
        steps.append(("\n".join(cmd), out))
    return steps


# Values that change from run to run (planning time, timestamps, temporary
# paths) are replaced by placeholders before outputs are compared.
_NORMALISE = (
    (re.compile(r"(plan time\s+)\d+(\s+us)"), r"\1<T>\2"),
    (re.compile(r'("planTimeUs":\s*)"\d+"'), r'\1"<T>"'),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "<TIME>"),
    (re.compile(r"\b\d+(\.\d+)? ?ms\b"), "<MS>"),
    (re.compile(r"\b\d+\.\d+ s\b"), "<S> s"),
)


def relative(text: str, tmp: str = "") -> str:
    """Paths under the temporary folder or the repository, written relative
    to it (the folder the commands run in stands for the repository root)."""
    for root in filter(None, (tmp and os.path.realpath(tmp), tmp, str(REPO))):
        text = text.replace(root + "/", "").replace(root, ".")
    return text


def normalise(text: str, tmp: str = "", ports: dict | None = None) -> str:
    text = relative(text, tmp)
    for pattern, repl in _NORMALISE:
        text = pattern.sub(repl, text)
    if ports:
        for real, shown in ports.items():
            text = text.replace(real, shown)
    return "\n".join(line.rstrip() for line in text.rstrip("\n").split("\n"))


def diff(shown: str, got: str, where: str) -> str:
    return "".join(
        difflib.unified_diff(
            (shown + "\n").splitlines(True), (got + "\n").splitlines(True), f"{where} (in the document)", f"{where} (printed now)"
        )
    )


@dataclass
class Result:
    block: Block
    status: str  # ok, skipped, failed
    message: str = ""
    new_text: str | None = None  # the block's body as make-docs would write it
    picture: tuple | None = None  # (repository path, generated path)


class Runner:
    """Runs one document's blocks in order in a fresh temporary folder."""

    def __init__(self, rel: str, build: Path, log=print):
        self.rel = rel
        self.path = Path(rel) if os.path.isabs(rel) else REPO / rel
        self.build = Path(build).resolve()
        self.log = log
        self.tmp = None
        self.ns: dict = {"__name__": "__doc__"}
        self.server = None

    # -- environment -------------------------------------------------------
    def _setup(self) -> None:
        from packd.testing import free_port  # noqa: WPS433 (imported once the path is set)

        self.tmp = tempfile.mkdtemp(prefix="packd-doc-")
        for entry in REPO.iterdir():
            if entry.name in (".git", "build") or entry.name.startswith("build-"):
                continue
            if entry.name == "docs":
                shutil.copytree(entry, Path(self.tmp) / "docs")
            else:
                os.symlink(entry, Path(self.tmp) / entry.name)
        os.symlink(self.build, Path(self.tmp) / "build")
        pybin = Path(self.tmp) / ".doc-bin"
        pybin.mkdir()
        os.symlink("/usr/bin/python3", pybin / "python3")
        ports = set()
        while len(ports) < 2:
            ports.add(free_port())
        grpc_port, metrics_port = sorted(ports)
        self.addr = {"127.0.0.1:50051": f"127.0.0.1:{grpc_port}", "127.0.0.1:9464": f"127.0.0.1:{metrics_port}"}
        self.env = dict(os.environ)
        self.env["PATH"] = os.pathsep.join(
            [str(pybin), str(self.build / "client" / "c"), str(self.build / "server"), self.env.get("PATH", "")]
        )
        self.env["PACKD_BUILD_DIR"] = str(self.build)
        self.env.pop("PACKD_TARGET", None)
        self.env.pop("PACKD_SERVER", None)

    def _addresses(self, text: str) -> str:
        for shown, real in self.addr.items():
            text = text.replace(shown, real)
        return text

    def _start_server(self):
        from packd.testing import ServerProcess

        grpc_addr = self.addr["127.0.0.1:50051"]
        metrics_addr = self.addr["127.0.0.1:9464"]
        srv = ServerProcess(binary=self.build / "server" / "packd")
        # Start on the document's ports (ServerProcess picks its own; these
        # were free when the document began).
        srv.port = int(grpc_addr.rsplit(":", 1)[1])
        srv.metrics_port = int(metrics_addr.rsplit(":", 1)[1])
        # One fixed plan-id secret, so that a document may show the plan ids
        # the server gives (keyed ids are random per process otherwise).
        secret = Path(self.tmp) / ".doc-plan-id-secret"
        secret.write_text("packd documentation examples\n")
        cmd = [str(srv.binary), "--listen", grpc_addr, "--metrics-listen", metrics_addr,
               "--plan-id-secret-file", str(secret), *srv.args]
        srv._log = tempfile.TemporaryFile(mode="w+")
        srv.proc = subprocess.Popen(cmd, stdout=srv._log, stderr=subprocess.STDOUT)
        srv._wait_serving()
        return srv

    # -- kinds of blocks ---------------------------------------------------
    def _sh(self, script: str, timeout: float) -> tuple[int, str]:
        return self._shell(["bash", "-e", "-o", "pipefail", "-c", script], timeout)

    def _shell(self, argv: list, timeout: float) -> tuple[int, str]:
        """Runs a shell in a session of its own and kills the whole session
        when it returns or times out, so that nothing a block started in
        the background (a server) outlives it and holds a port."""
        p = subprocess.Popen(argv, cwd=self.tmp, env=self.env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill_session(p)
            p.communicate()
            raise
        self._kill_session(p)
        return p.returncode, out

    @staticmethod
    def _kill_session(p) -> None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _python(self, code: str, where: str) -> tuple[bool, str]:
        buf = io.StringIO()
        old_cwd, old_env = os.getcwd(), dict(os.environ)
        os.chdir(self.tmp)
        os.environ.clear()
        os.environ.update(self.env)
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                exec(compile(code, where, "exec"), self.ns)  # noqa: S102 (the document's own code)
            return True, buf.getvalue()
        except BaseException:  # noqa: BLE001 (reported with the block)
            return False, buf.getvalue() + traceback.format_exc()
        finally:
            os.chdir(old_cwd)
            os.environ.clear()
            os.environ.update(old_env)

    def run(self) -> list[Result]:
        blocks = parse(self.path, self.rel)
        self._setup()
        results: list[Result] = []
        last_output = None  # (result, printed text) of the last sh/python block
        try:
            for b in blocks:
                if b.kind == "listing":
                    continue
                if b.markers.get("skip"):
                    reason = b.markers.get("reason", "no reason given")
                    self.log(f"SKIP {b.where()} ({b.kind}): {reason}")
                    results.append(Result(b, "skipped", reason))
                    continue
                timeout = float(b.markers.get("timeout", DEFAULT_TIMEOUT))
                started = time.monotonic()
                if b.markers.get("server"):
                    self.server = self._start_server()
                if b.markers.get("before"):
                    rc, out = self._sh(self._addresses(b.markers["before"]), timeout)
                    if rc != 0:
                        results.append(Result(b, "failed", f"{b.where()}: its 'before' command exited {rc}\n{out}"))
                        self.log(f"FAILED {b.where()} (before)")
                        continue
                try:
                    r, printed = self._run_block(b, timeout, last_output)
                finally:
                    if self.server is not None:
                        self.server.stop()
                        self.server._log.close()
                        self.server = None
                last_output = printed
                results.append(r)
                self.log(f"{r.status.upper():4} {b.where()} ({b.kind}, {time.monotonic() - started:.1f} s)")
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return results

    def _run_block(self, b: Block, timeout: float, last_output):
        where = b.where()
        if b.kind == "sh":
            try:
                rc, out = self._sh(self._addresses(b.text), timeout)
            except subprocess.TimeoutExpired:
                return Result(b, "failed", f"{where}: timed out after {timeout:.0f} s"), None
            if rc != 0:
                return Result(b, "failed", f"{where}: exit status {rc}\n{out}"), None
            return Result(b, "ok"), out
        if b.kind == "python":
            ok, out = self._python(self._addresses(b.text), where)
            if not ok:
                return Result(b, "failed", f"{where}: the Python block raised\n{out}"), None
            return Result(b, "ok"), out
        if b.kind == "output":
            if last_output is None:
                return Result(b, "failed", f"{where}: an output block must follow a block that ran"), None
            return self._compare(b, b.text, last_output), None
        if b.kind == "transcript":
            return self._transcript(b, timeout), None
        if b.kind == "picture":
            return self._picture(b, timeout), None
        raise AssertionError(b.kind)

    def _as_shown(self, got: str) -> str:
        """Printed text as a document shows it: relative paths, the
        document's addresses, no trailing blanks."""
        text = relative(got, self.tmp)
        for real, shown in self._shown_ports().items():
            text = text.replace(real, shown)
        return "\n".join(line.rstrip() for line in text.rstrip("\n").split("\n")) + "\n"

    def _shown_ports(self) -> dict:
        return {real: shown for shown, real in self.addr.items()}

    def _compare(self, b: Block, shown: str, got: str) -> Result:
        n_shown = normalise(shown, self.tmp, self._shown_ports())
        n_got = normalise(got, self.tmp, self._shown_ports())
        if n_shown == n_got:
            return Result(b, "ok", new_text=shown)
        return Result(
            b,
            "failed",
            f"{b.where()}: the output shown differs from what the command prints now "
            f"(refresh with {REFRESH}):\n{diff(n_shown, n_got, b.where())}",
            new_text=self._as_shown(got),
        )

    def _transcript(self, b: Block, timeout: float) -> Result:
        problems, body, changed = [], [], False
        for cmd, shown_lines in transcript_steps(b.text):
            try:
                rc, got = self._sh_plain(self._addresses(cmd), timeout)
            except subprocess.TimeoutExpired:
                return Result(b, "failed", f"{b.where()}: `{cmd}` timed out after {timeout:.0f} s")
            if rc != 0:
                # A command the document expects to fail shows its status
                # with `; echo "exit $?"`; any other failure is a broken
                # example, which make-docs must not write into the document.
                return Result(b, "failed", f"{b.where()}: `{cmd}` exited {rc}:\n{got}")
            shown = "\n".join(shown_lines)
            n_shown = normalise(shown, self.tmp, self._shown_ports())
            n_got = normalise(got, self.tmp, self._shown_ports())
            body.append("$ " + cmd)
            if n_shown == n_got:
                body.extend(shown_lines)
            else:
                changed = True
                problems.append(f"$ {cmd}\n{diff(n_shown, n_got, b.where())}")
                body.extend(self._as_shown(got).rstrip("\n").split("\n") if got.strip() else [])
        new_text = "\n".join(body) + "\n"
        if changed:
            return Result(
                b,
                "failed",
                f"{b.where()}: the transcript differs from what its commands print now "
                f"(refresh with {REFRESH}):\n" + "\n".join(problems),
                new_text=new_text,
            )
        return Result(b, "ok", new_text=new_text)

    def _sh_plain(self, cmd: str, timeout: float) -> tuple[int, str]:
        """A transcript command: its exit status may be anything (the
        document shows it with ``echo "exit $?"`` where it matters)."""
        return self._shell(["bash", "-c", cmd], timeout)

    def _picture(self, b: Block, timeout: float) -> Result:
        target = b.markers["picture"]
        made = Path(self.tmp) / target
        if made.exists():
            made.unlink()
        rc, out = self._sh(b.text, timeout)
        if rc != 0 or not made.exists():
            return Result(b, "failed", f"{b.where()}: `{b.text}` exited {rc} without writing {target}\n{out}")
        committed = REPO / target
        got = made.read_bytes()
        keep = Path(tempfile.mkstemp(prefix="packd-doc-picture-")[1])
        keep.write_bytes(got)
        if committed.exists() and normalise(committed.read_text(), self.tmp) == normalise(got.decode(), self.tmp):
            keep.unlink()
            return Result(b, "ok")
        shown = committed.read_text() if committed.exists() else ""
        d = diff(normalise(shown), normalise(got.decode(), self.tmp), target)
        if len(d) > 4000:
            d = d[:4000] + "\n... (diff cut)\n"
        return Result(
            b,
            "failed",
            f"{b.where()}: {target} differs from what `{b.text}` makes now (refresh with {REFRESH}):\n{d}",
            picture=(committed, keep),
        )


def discard(results: list[Result]) -> None:
    """Removes the new pictures a check made and did not write back."""
    for r in results:
        if r.picture is not None and r.picture[1].exists():
            r.picture[1].unlink()


def write_back(rel: str, results: list[Result]) -> list[str]:
    """Puts the new outputs of failed comparisons into the document and
    the new pictures into the repository. Returns what changed."""
    path = Path(rel) if os.path.isabs(rel) else REPO / rel
    lines = path.read_text().split("\n")
    changed = []
    # Bottom-up, so earlier line numbers stay valid.
    for r in sorted(results, key=lambda r: r.block.start, reverse=True):
        if r.status != "failed":
            continue
        b = r.block
        if r.picture is not None:
            committed, made = r.picture
            shutil.copyfile(made, committed)
            made.unlink()
            changed.append(str(committed.relative_to(REPO)))
            continue
        if r.new_text is None:
            continue
        body = [b.indent + line if line else line for line in r.new_text.rstrip("\n").split("\n")]
        lines[b.start : b.end - 1] = body
        changed.append(f"{rel}:{b.start}")
    path.write_text("\n".join(lines))
    return changed


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Run the documents' code blocks (tests/docs/README.md).")
    ap.add_argument("documents", nargs="*", help="documents relative to the repository root (default: all)")
    ap.add_argument("--build", default=os.environ.get("PACKD_BUILD_DIR", str(REPO / "build")))
    ap.add_argument("--write", action="store_true", help="put new outputs and pictures into the documents")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO / "client" / "python"))
    os.environ["PACKD_BUILD_DIR"] = str(Path(args.build).resolve())
    failed = 0
    for rel in args.documents or DOCUMENTS:
        results = Runner(rel, Path(args.build)).run()
        bad = [r for r in results if r.status == "failed"]
        if args.write:
            for what in write_back(rel, results):
                print(f"refreshed {what}")
            bad = [r for r in bad if r.new_text is None and r.picture is None]
        else:
            discard(results)
        for r in bad:
            print(r.message, file=sys.stderr)
        failed += len(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
