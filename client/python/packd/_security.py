"""Connection security of packd.Client: TLS, mutual TLS and bearer tokens.

A server started with ``--tls-cert``/``--tls-key`` is reached over TLS: give
``tls_ca`` (the CA certificates that signed the server's certificate; without
it gRPC's default roots are used). A server with ``--tls-client-ca`` also
wants a client certificate: ``tls_cert`` and ``tls_key``. A server with
``--auth-token-file`` wants ``token`` (or ``token_file``, whose first token
line is read the way the server reads its file), sent with every call as
``authorization: Bearer <token>``.

Each TLS option is a file name or the PEM bytes themselves. Unset options
fall back to PACKD_TLS_CA, PACKD_TLS_CLIENT_CERT, PACKD_TLS_CLIENT_KEY and
PACKD_TOKEN_FILE, the variables packctl reads too. (PACKD_TLS_CERT and
PACKD_TLS_KEY are the server's own certificate and key, which a client
inside the server's container must not take for its own.)
"""

from __future__ import annotations

import os

import grpc

__all__ = ["channel_security", "read_token_file"]


def _pem(name: str, value) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    path = os.fspath(value)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ValueError(f"{name}: cannot read {path!r}: {exc.strerror}") from None
    if not data.strip():
        raise ValueError(f"{name}: {path!r} is empty")
    return data


def read_token_file(path) -> str:
    """The first token line of a token file (blank lines and '#' comments
    skipped, the ends trimmed)."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ValueError(f"token_file: cannot read {path!r}: {exc.strerror}") from None
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            return line
    raise ValueError(f"token_file: {path!r} holds no token")


def _check_token(token: str) -> str:
    if not isinstance(token, str) or not token:
        raise ValueError("token: must be a non-empty string")
    if any(ord(ch) <= 0x20 or ord(ch) >= 0x7F for ch in token):
        raise ValueError("token: may hold only printable ASCII without spaces")
    return token


def channel_security(tls_ca=None, tls_cert=None, tls_key=None, token=None, token_file=None,
                     environ=None, tls_from_env=True):
    """(channel credentials or None for plaintext, call metadata tuple) for
    the given options and the PACKD_* fallbacks in ``environ`` (default
    os.environ). ``tls_from_env`` False ignores PACKD_TLS_* (the caller has
    credentials of its own)."""
    env = os.environ if environ is None else environ
    tls_env = env if tls_from_env else {}
    tls_ca = tls_ca if tls_ca is not None else tls_env.get("PACKD_TLS_CA") or None
    tls_cert = tls_cert if tls_cert is not None else tls_env.get("PACKD_TLS_CLIENT_CERT") or None
    tls_key = tls_key if tls_key is not None else tls_env.get("PACKD_TLS_CLIENT_KEY") or None
    if token is not None and token_file is not None:
        raise ValueError("token and token_file: give one of them, not both")
    if token is None:
        token_file = token_file if token_file is not None else env.get("PACKD_TOKEN_FILE") or None
        if token_file is not None:
            token = read_token_file(token_file)
    if (tls_cert is None) != (tls_key is None):
        given, missing = ("tls_cert", "tls_key") if tls_cert is not None else ("tls_key", "tls_cert")
        raise ValueError(f"{given} is set but {missing} is not: a client certificate needs its key")
    credentials = None
    if tls_ca is not None or tls_cert is not None:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_pem("tls_ca", tls_ca),
            private_key=_pem("tls_key", tls_key),
            certificate_chain=_pem("tls_cert", tls_cert),
        )
    metadata = ()
    if token is not None:
        metadata = (("authorization", "Bearer " + _check_token(token)),)
    return credentials, metadata
