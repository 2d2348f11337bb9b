"""Transport security and authentication of the real packd binary on
loopback: TLS (--tls-cert, --tls-key), mutual TLS (--tls-client-ca) and bearer
tokens (--auth-token-file, rotated with SIGHUP), through the Python client
(packd.Client) and packctl, and the start-up errors of bad combinations.

The certificates are made at test time with the openssl command in a
temporary folder: a CA, a server certificate for 127.0.0.1 and localhost, a
client certificate from the same CA, and a second CA with a client
certificate of its own (which the server must refuse).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

import server_harness as h

sys.path.insert(0, str(h.REPO / "client" / "python"))

import packd  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")

LENGTHS = [700, 1200, 90, 3000, 15, 2048, 512, 333]


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, text=True)


def _make_ca(d: Path, name: str):
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN=packd test {name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


def _make_leaf(d: Path, name: str, ca: str, ext: str):
    (d / f"{name}.ext").write_text(ext)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN=packd test {name}", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d)


class Pki:
    def __init__(self, d: Path):
        self.dir = d
        _make_ca(d, "ca")
        _make_ca(d, "other_ca")
        _make_leaf(d, "server", "ca",
                   "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        _make_leaf(d, "client", "ca", "extendedKeyUsage=clientAuth\n")
        _make_leaf(d, "stranger", "other_ca", "extendedKeyUsage=clientAuth\n")

    def __getattr__(self, name):
        # pki.ca_pem -> <dir>/ca.pem, pki.server_key -> <dir>/server.key
        stem, _, ext = name.rpartition("_")
        return str(self.dir / f"{stem}.{ext}")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def servers():
    started = []

    def start(*args, env=None):
        s = h.start("--drain-delay", "0", *args, env=env)
        started.append(s)
        return s

    yield start
    for s in started:
        assert s.stop() == 0, s.log()


def tls_args(pki, mtls=False):
    args = ["--tls-cert", pki.server_pem, "--tls-key", pki.server_key]
    if mtls:
        args += ["--tls-client-ca", pki.ca_pem]
    return args


def client(srv, **kw):
    return packd.Client(srv.addr, timeout=10, retries=0, **kw)


def packctl(*args, env=None):
    full = {k: v for k, v in os.environ.items() if not k.startswith("PACKD_")}
    full.update(env or {})
    return subprocess.run([str(h.PACKCTL), *args], capture_output=True, text=True, timeout=60, env=full)


def lengths_file(tmp_path) -> str:
    p = tmp_path / "lengths.txt"
    p.write_text("".join(f"{n}\n" for n in LENGTHS))
    return str(p)


# --------------------------------------------------------------------------
# TLS


def test_tls_python_and_packctl_plan(pki, servers, tmp_path):
    srv = servers(*tls_args(pki))
    assert "tls=tls auth=off" in srv.log()
    with client(srv, tls_ca=pki.ca_pem) as c:
        plan = c.plan(LENGTHS, dp=2, max_tokens=4096)
        assert sorted(int(i) for i in plan.order()) == list(range(len(LENGTHS)))
        assert c.health() == "SERVING"
    # The PEM bytes work as well as a file name.
    with client(srv, tls_ca=Path(pki.ca_pem).read_bytes()) as c:
        assert c.plan(LENGTHS, dp=2, max_tokens=4096).plan_id == plan.plan_id

    r = packctl("plan", "--server", srv.addr, "--tls-ca", pki.ca_pem, lengths_file(tmp_path), "--dp", "2",
                "--max-tokens", "4096", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert plan.plan_id in r.stdout
    # The variable is the fallback of the flag, for every subcommand.
    r = packctl("health", "--server", srv.addr, env={"PACKD_TLS_CA": pki.ca_pem})
    assert r.returncode == 0, r.stderr
    assert "SERVING" in r.stdout
    r = packctl("rank-plan", "--server", srv.addr, "--plan-id", plan.plan_id, "--rank", "1",
                env={"PACKD_TLS_CA": pki.ca_pem})
    assert r.returncode == 0, r.stderr


def test_python_client_reads_the_variables(pki, servers, tmp_path, monkeypatch):
    tokens = write(tmp_path / "tokens", "env-token\n")
    srv = servers(*tls_args(pki, mtls=True), "--auth-token-file", tokens)
    monkeypatch.setenv("PACKD_TLS_CA", pki.ca_pem)
    monkeypatch.setenv("PACKD_TLS_CLIENT_CERT", pki.client_pem)
    monkeypatch.setenv("PACKD_TLS_CLIENT_KEY", pki.client_key)
    monkeypatch.setenv("PACKD_TOKEN_FILE", tokens)
    with client(srv) as c:
        assert c.plan(LENGTHS, dp=2).dp == 2
    # Ready credentials take the place of the PACKD_TLS_* variables.
    monkeypatch.setenv("PACKD_TLS_CA", str(tmp_path / "missing.pem"))
    creds = grpc.ssl_channel_credentials(
        Path(pki.ca_pem).read_bytes(), Path(pki.client_key).read_bytes(), Path(pki.client_pem).read_bytes())
    with client(srv, credentials=creds) as c:
        assert c.plan(LENGTHS, dp=2).dp == 2
    with pytest.raises(ValueError, match="tls_ca: cannot read"):
        client(srv)


def test_plaintext_client_refused_by_tls_server(pki, servers, tmp_path):
    srv = servers(*tls_args(pki))
    with client(srv) as c, pytest.raises(packd.Unavailable):
        c.plan(LENGTHS, dp=2)
    r = packctl("plan", "--server", srv.addr, "--timeout", "5", lengths_file(tmp_path), "--dp", "2")
    assert r.returncode == 1
    assert "UNAVAILABLE" in r.stderr


def test_tls_client_refuses_a_server_of_another_ca(pki, servers):
    srv = servers(*tls_args(pki))
    with client(srv, tls_ca=pki.other_ca_pem) as c, pytest.raises(packd.Unavailable):
        c.plan(LENGTHS, dp=2)


# --------------------------------------------------------------------------
# Mutual TLS


def test_mtls_requires_a_client_certificate_of_the_ca(pki, servers, tmp_path):
    srv = servers(*tls_args(pki, mtls=True))
    assert "tls=mtls" in srv.log()
    with client(srv, tls_ca=pki.ca_pem) as c, pytest.raises(packd.Unavailable):
        c.plan(LENGTHS, dp=2)
    with client(srv, tls_ca=pki.ca_pem, tls_cert=pki.stranger_pem, tls_key=pki.stranger_key) as c:
        with pytest.raises(packd.Unavailable):
            c.plan(LENGTHS, dp=2)
    with client(srv, tls_ca=pki.ca_pem, tls_cert=pki.client_pem, tls_key=pki.client_key) as c:
        assert c.plan(LENGTHS, dp=2).dp == 2

    lf = lengths_file(tmp_path)
    r = packctl("plan", "--server", srv.addr, "--timeout", "5", "--tls-ca", pki.ca_pem, lf, "--dp", "2")
    assert r.returncode == 1 and "UNAVAILABLE" in r.stderr
    r = packctl("plan", "--server", srv.addr, "--tls-ca", pki.ca_pem, "--tls-cert", pki.client_pem,
                "--tls-key", pki.client_key, lf, "--dp", "2")
    assert r.returncode == 0, r.stderr
    r = packctl("load", "--server", srv.addr, "--lengths", lf, "--duration", "0.3", "--warmup", "0",
                "--dp", "2", env={"PACKD_TLS_CA": pki.ca_pem, "PACKD_TLS_CLIENT_CERT": pki.client_pem,
                                  "PACKD_TLS_CLIENT_KEY": pki.client_key})
    assert r.returncode == 0, r.stderr
    # Inside the server's container the server's own PACKD_TLS_CERT and
    # PACKD_TLS_KEY are set; packctl reads its client certificate from
    # PACKD_TLS_CLIENT_CERT and PACKD_TLS_CLIENT_KEY, never from those.
    r = packctl("health", "--server", srv.addr,
                env={"PACKD_TLS_CERT": pki.server_pem, "PACKD_TLS_KEY": pki.server_key,
                     "PACKD_TLS_CLIENT_CA": pki.ca_pem, "PACKD_TLS_CA": pki.ca_pem,
                     "PACKD_TLS_CLIENT_CERT": pki.client_pem, "PACKD_TLS_CLIENT_KEY": pki.client_key})
    assert r.returncode == 0, r.stderr


def test_client_side_option_errors(pki, tmp_path):
    with pytest.raises(ValueError, match="tls_cert is set but tls_key is not"):
        packd.Client("127.0.0.1:1", tls_ca=pki.ca_pem, tls_cert=pki.client_pem)
    with pytest.raises(ValueError, match="tls_ca: cannot read"):
        packd.Client("127.0.0.1:1", tls_ca=str(tmp_path / "missing.pem"))
    with pytest.raises(ValueError, match="token_file: .* holds no token"):
        empty = tmp_path / "empty"
        empty.write_text("# nothing\n\n")
        packd.Client("127.0.0.1:1", token_file=str(empty))
    r = packctl("health", "--server", "127.0.0.1:1", "--tls-cert", pki.client_pem)
    assert r.returncode == 1 and "--tls-cert is set but --tls-key is not" in r.stderr
    r = packctl("rank-plan", "--server", "127.0.0.1:1", "--plan-id", "x", "--rank", "0",
                "--token-file", str(tmp_path / "missing"))
    assert r.returncode == 1 and "--token-file: cannot read" in r.stderr
    r = packctl("plan", "--server", "127.0.0.1:1", "--tls-ca=", str(tmp_path / "x"))
    assert r.returncode == 2 and "--tls-ca" in r.stderr


# --------------------------------------------------------------------------
# Bearer tokens


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_token_required_except_health(servers, tmp_path):
    tokens = write(tmp_path / "tokens", "# accepted tokens\n\n  s3cret-one  \nsecond-token\n")
    srv = servers("--auth-token-file", tokens)
    assert "auth=token" in srv.log()
    with client(srv) as c:
        with pytest.raises(packd.Unauthenticated, match="requires a bearer token"):
            c.plan(LENGTHS, dp=2)
        with pytest.raises(packd.Unauthenticated):
            c.rank_plan("0" * 32, 0)
        # Probes and load balancers call Health/Check without a token.
        assert c.health() == "SERVING"
    with client(srv, token="wrong-token") as c, pytest.raises(packd.Unauthenticated, match="not accepted"):
        c.plan(LENGTHS, dp=2)
    # The token is compared in full: a prefix or an extension is wrong.
    for near in ("s3cret-on", "s3cret-one2", "S3CRET-ONE"):
        with client(srv, token=near) as c, pytest.raises(packd.Unauthenticated):
            c.plan(LENGTHS, dp=2)
    for tok in ("s3cret-one", "second-token"):
        with client(srv, token=tok) as c:
            plan = c.plan(LENGTHS, dp=2)
            assert c.rank_plan(plan.plan_id, 1).dp_rank == 1
    # Raw gRPC: another scheme is refused with the status and a message.
    with srv.channel() as ch:
        stub = h.stubs().packd_pb2_grpc.PlannerStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            stub.Plan(h.plan_request(LENGTHS, dp=2), timeout=10, metadata=[("authorization", "Basic czNjcmV0")])
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "Bearer" in e.value.details()
    assert "s3cret-one" not in srv.log()

    lf = lengths_file(tmp_path)
    r = packctl("plan", "--server", srv.addr, lf, "--dp", "2")
    assert r.returncode == 1 and "UNAUTHENTICATED" in r.stderr
    tf = write(tmp_path / "client-token", "second-token\n")
    r = packctl("plan", "--server", srv.addr, "--token-file", tf, lf, "--dp", "2")
    assert r.returncode == 0, r.stderr
    r = packctl("plan", "--server", srv.addr, lf, "--dp", "2", env={"PACKD_TOKEN_FILE": tf})
    assert r.returncode == 0, r.stderr
    with client(srv, token_file=tf) as c:
        assert c.plan(LENGTHS, dp=2).dp == 2
    r = packctl("health", "--server", srv.addr)
    assert r.returncode == 0, r.stderr


def wait_for_log(srv, text, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if srv.log().count(text) > 0:
            return
        time.sleep(0.02)
    raise AssertionError(f"no {text!r} in the log:\n{srv.log()}")


def test_sighup_rotates_tokens(servers, tmp_path):
    path = tmp_path / "tokens"
    write(path, "old-token\n")
    srv = servers("--auth-token-file", str(path))
    with client(srv, token="old-token") as c:
        c.plan(LENGTHS, dp=2)

    # Both accepted while the clients move over.
    write(path, "old-token\nnew-token\n")
    srv.signal(signal.SIGHUP)
    wait_for_log(srv, "received SIGHUP: --auth-token-file: 2 tokens loaded")
    for tok in ("old-token", "new-token"):
        with client(srv, token=tok) as c:
            c.plan(LENGTHS, dp=2)

    # The old one removed.
    write(path, "new-token\n")
    srv.signal(signal.SIGHUP)
    wait_for_log(srv, "received SIGHUP: --auth-token-file: 1 token loaded")
    with client(srv, token="old-token") as c, pytest.raises(packd.Unauthenticated):
        c.plan(LENGTHS, dp=2)
    with client(srv, token="new-token") as c:
        c.plan(LENGTHS, dp=2)

    # A file that cannot be used keeps the tokens loaded before.
    write(path, "\n# emptied by mistake\n")
    srv.signal(signal.SIGHUP)
    wait_for_log(srv, "error packd: received SIGHUP: --auth-token-file: ")
    assert "holds no token" in srv.log() and "the tokens loaded before stay accepted" in srv.log()
    with client(srv, token="new-token") as c:
        c.plan(LENGTHS, dp=2)
    assert srv.proc.poll() is None


def test_a_replaced_token_file_is_noticed_without_a_signal(servers, tmp_path):
    path = tmp_path / "tokens"
    write(path, "first-token\n")
    srv = servers("--auth-token-file", str(path))
    with client(srv, token="first-token") as c:
        c.plan(LENGTHS, dp=2)
    # A Secret volume swaps in a new file; no SIGHUP is sent.
    write(tmp_path / "tokens.new", "second-token\n")
    os.replace(tmp_path / "tokens.new", path)
    deadline = time.monotonic() + 20
    with client(srv, token="second-token") as c:
        while True:
            try:
                c.plan(LENGTHS, dp=2)
                break
            except packd.Unauthenticated:
                assert time.monotonic() < deadline, srv.log()
                time.sleep(0.2)
    wait_for_log(srv, "--auth-token-file changed: 1 token loaded")
    with client(srv, token="first-token") as c, pytest.raises(packd.Unauthenticated):
        c.plan(LENGTHS, dp=2)


def test_tls_and_token_together(pki, servers):
    tokens = write(Path(pki.dir) / "tokens", "tls-token\n")
    srv = servers(*tls_args(pki, mtls=True), "--auth-token-file", tokens)
    kw = dict(tls_ca=pki.ca_pem, tls_cert=pki.client_pem, tls_key=pki.client_key)
    with client(srv, **kw) as c, pytest.raises(packd.Unauthenticated):
        c.plan(LENGTHS, dp=2)
    with client(srv, token="tls-token", **kw) as c:
        assert c.plan(LENGTHS, dp=2).dp == 2


# --------------------------------------------------------------------------
# Start-up errors


def _bad_cases(pki, tmp):
    empty = write(tmp / "empty-tokens", "\n# no token\n")
    spaced = write(tmp / "spaced-tokens", "two words\n")
    short = write(tmp / "short-secret", "tooshort\n")
    missing = str(tmp / "missing.pem")
    return [
        (["--tls-cert", pki.server_pem], "--tls-cert is set but --tls-key is not"),
        (["--tls-key", pki.server_key], "--tls-key is set but --tls-cert is not"),
        (["--tls-client-ca", pki.ca_pem], "--tls-client-ca is set but --tls-cert"),
        (["--tls-cert", missing, "--tls-key", pki.server_key], "--tls-cert: cannot read"),
        (["--tls-cert", pki.server_pem, "--tls-key", missing], "--tls-key: cannot read"),
        (["--tls-cert", pki.server_pem, "--tls-key", pki.client_key], "--tls-key: the key in"),
        (["--tls-cert", pki.server_key, "--tls-key", pki.server_key], "--tls-cert: "),
        (["--tls-cert", pki.server_pem, "--tls-key", pki.server_pem], "--tls-key: "),
        (tls_args(pki) + ["--tls-client-ca", pki.server_key], "--tls-client-ca: "),
        (["--auth-token-file", missing], "--auth-token-file: cannot read"),
        (["--auth-token-file", empty], "--auth-token-file: "),
        (["--auth-token-file", spaced], "--auth-token-file: "),
        (["--plan-id-secret-file", short], "--plan-id-secret-file: "),
        (["--plan-id-secret-file", missing], "--plan-id-secret-file: cannot read"),
    ]


def test_bad_combinations_exit_2_naming_the_flag(pki, tmp_path):
    for args, must in _bad_cases(pki, tmp_path):
        proc, log_path = h.launch(*args)
        rc = proc.wait(timeout=30)
        text = Path(log_path).read_text()
        os.unlink(log_path)
        assert rc == 2, (args, text)
        assert must in text, (args, text)


def test_variables_are_read_like_flags(pki, servers):
    proc, log_path = h.launch(env={"PACKD_TLS_CERT": pki.server_pem})
    assert proc.wait(timeout=30) == 2
    assert "--tls-cert is set but --tls-key is not" in Path(log_path).read_text()
    os.unlink(log_path)
    tokens = write(Path(pki.dir) / "env-tokens", "from-the-environment\n")
    srv = servers(env={"PACKD_TLS_CERT": pki.server_pem, "PACKD_TLS_KEY": pki.server_key,
                       "PACKD_TLS_CLIENT_CA": pki.ca_pem, "PACKD_AUTH_TOKEN_FILE": tokens})
    assert "tls=mtls auth=token" in srv.log()
    kw = dict(tls_ca=pki.ca_pem, tls_cert=pki.client_pem, tls_key=pki.client_key)
    with client(srv, **kw) as c, pytest.raises(packd.Unauthenticated):
        c.plan(LENGTHS, dp=2)
    with client(srv, token="from-the-environment", **kw) as c:
        assert c.plan(LENGTHS, dp=2).dp == 2
