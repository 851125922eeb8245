"""Tests of `certs`, the tests' own certificate maker (the ``openssl`` tool behind trustme's API).

Each test runs a real TLS handshake between two `ssl.SSLSocket` ends of a
`socket.socketpair()`, the server's in a thread; no event loop. The client
context is `ssl.create_default_context()` (host names checked) with
``VERIFY_X509_STRICT`` added, as Python 3.13+ has by default, so the
certificates must pass OpenSSL's strict checks on every Python.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
from pathlib import Path

import pytest

import certs

WAIT = 10.0


@pytest.fixture(scope="module")
def ca() -> certs.CA:
    return certs.CA()


@pytest.fixture(scope="module")
def server_cert(ca: certs.CA) -> certs.LeafCert:
    return ca.issue_cert("localhost", "127.0.0.1", "::1")


def server_context(cert: certs.LeafCert) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(ctx)
    return ctx


def client_context(ca: certs.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    ca.configure_trust(ctx)
    return ctx


def handshake(
    server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, server_hostname: str
) -> tuple[dict[str, object], BaseException | None, dict[str, object] | None]:
    """Handshake over a socketpair and exchange a byte.

    Returns the server certificate the client saw, the server's error (None
    when it succeeded) and the client certificate the server saw. The
    client's error is raised.
    """
    a, b = socket.socketpair()
    a.settimeout(WAIT)
    b.settimeout(WAIT)
    result: dict[str, object] = {}
    handshake.server_result = result  # type: ignore[attr-defined]  # for a test whose client fails

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(b, server_side=True) as tls:
                result["peer"] = tls.getpeercert()
                tls.sendall(tls.recv(1))
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with client_ctx.wrap_socket(a, server_hostname=server_hostname) as tls:
            cert = tls.getpeercert()
            tls.sendall(b"x")
            assert tls.recv(1) == b"x"
    finally:
        a.close()
        thread.join(WAIT)
        b.close()
    assert not thread.is_alive()
    assert cert is not None
    return cert, result.get("error"), result.get("peer")  # type: ignore[return-value]


def test_verifies_for_each_identity(ca: certs.CA, server_cert: certs.LeafCert) -> None:
    for hostname in ("localhost", "127.0.0.1", "::1"):
        cert, error, _ = handshake(server_context(server_cert), client_context(ca), hostname)
        assert error is None
        subject = dict(rdn[0] for rdn in cert["subject"])  # type: ignore[attr-defined]
        assert subject["commonName"] == "localhost"  # the first identity
        assert cert["subjectAltName"] == (
            ("DNS", "localhost"),
            ("IP Address", "127.0.0.1"),
            ("IP Address", "0:0:0:0:0:0:0:1"),
        )


def test_validity_starts_a_day_ago_and_lasts_a_year(
    ca: certs.CA, server_cert: certs.LeafCert
) -> None:
    cert, _, _ = handshake(server_context(server_cert), client_context(ca), "localhost")
    now = datetime.datetime.now(datetime.UTC).timestamp()
    not_before = ssl.cert_time_to_seconds(cert["notBefore"])  # type: ignore[arg-type]
    not_after = ssl.cert_time_to_seconds(cert["notAfter"])  # type: ignore[arg-type]
    assert now - 86400 - 120 < not_before < now - 86400 + 120
    assert now + 365 * 86400 - 120 < not_after < now + 365 * 86400 + 120


def test_another_ca_is_not_trusted(server_cert: certs.LeafCert) -> None:
    with pytest.raises(ssl.SSLCertVerificationError) as info:
        handshake(server_context(server_cert), client_context(certs.CA()), "localhost")
    # The server does not send its root: the client cannot find an issuer.
    assert info.value.verify_code == 20  # X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY


@pytest.mark.parametrize("hostname", ["example.org", "127.0.0.2"])
def test_wrong_host_name_fails(ca: certs.CA, server_cert: certs.LeafCert, hostname: str) -> None:
    with pytest.raises(ssl.SSLCertVerificationError) as info:
        handshake(server_context(server_cert), client_context(ca), hostname)
    assert info.value.verify_code in (62, 64)  # hostname / IP address mismatch


def test_client_certificate(ca: certs.CA, server_cert: certs.LeafCert) -> None:
    server_ctx = server_context(server_cert)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    server_ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    ca.configure_trust(server_ctx)
    client_ctx = client_context(ca)
    ca.issue_cert("client@example.org").configure_cert(client_ctx)
    _, error, peer = handshake(server_ctx, client_ctx, "localhost")
    assert error is None
    assert peer is not None
    assert peer["subjectAltName"] == (("email", "client@example.org"),)


def test_client_certificate_from_another_ca_is_refused(
    ca: certs.CA, server_cert: certs.LeafCert
) -> None:
    server_ctx = server_context(server_cert)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    ca.configure_trust(server_ctx)
    client_ctx = client_context(ca)
    certs.CA().issue_cert("client@example.org").configure_cert(client_ctx)
    # TLS 1.3: the client's handshake ends before the server checks the
    # client's certificate, so the refusal reaches the client later, as an
    # alert on its read or as a closed connection on its write.
    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(server_ctx, client_ctx, "localhost")
    error = handshake.server_result.get("error")  # type: ignore[attr-defined]
    assert isinstance(error, ssl.SSLCertVerificationError), error  # the server refused it


def test_chain_and_write_to_path(ca: certs.CA, server_cert: certs.LeafCert, tmp_path: Path) -> None:
    chain = server_cert.cert_chain_pems
    assert len(chain) == 1  # the leaf; as in trustme, not the root CA
    assert server_cert.private_key_and_cert_chain_pem.bytes() == (
        server_cert.private_key_pem.bytes() + chain[0].bytes()
    )
    for blob in (server_cert.private_key_pem, ca.cert_pem, *chain):
        assert blob.bytes().startswith(b"-----BEGIN ")
        assert blob.bytes().endswith(b"-----\n")

    cert_file, key_file, ca_file = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    chain[0].write_to_path(cert_file)
    ca.cert_pem.write_to_path(str(cert_file), append=True)  # a full chain, to check append
    server_cert.private_key_pem.write_to_path(key_file)
    ca.cert_pem.write_to_path(ca_file)
    ca.cert_pem.write_to_path(ca_file)  # overwrites: still one certificate
    assert ca_file.read_bytes() == ca.cert_pem.bytes()
    assert cert_file.read_bytes() == chain[0].bytes() + ca.cert_pem.bytes()

    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert_file, key_file)
    client_ctx = ssl.create_default_context(cafile=ca_file)
    client_ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    _, error, _ = handshake(server_ctx, client_ctx, "localhost")
    assert error is None


def test_missing_openssl_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RuntimeError, match="openssl"):
        certs.CA()


def test_failing_openssl_reports_its_stderr(ca: certs.CA) -> None:
    with pytest.raises(RuntimeError, match=r"failed \(exit status \d+\):\n.+"):
        ca.issue_cert("bad\nname")
