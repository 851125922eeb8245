"""Throwaway TLS certificates for the tests, made with the ``openssl`` command-line tool.

Why: the tests used to make their certificates with ``trustme``, which needs
the ``cryptography`` package. PyPy 8.0 (Python 3.11) has no ``cryptography``
wheel and it cannot be built here (no Rust toolchain), so every TLS test
failed there. This module needs only the standard library and the
``openssl`` tool (OpenSSL 3.x), so it works on any Python with ``ssl``.

What: the part of trustme's API the tests use, with the same names:

- `CA`: ``CA()`` makes a self-signed certificate authority;
  ``issue_cert(*identities)`` returns a `LeafCert`;
  ``configure_trust(ctx)`` makes an `ssl.SSLContext` trust it;
  ``cert_pem`` is its certificate.
- `LeafCert`: ``configure_cert(ctx)`` makes a context present it;
  ``private_key_pem``, ``cert_chain_pems`` and ``private_key_and_cert_chain_pem``.
  As in trustme, the chain holds the leaf and any intermediates but not the
  root CA (here: the leaf alone), so a server does not send its root: a
  client that does not trust the CA fails with "unable to get local issuer
  certificate", which tests check.
- `Blob`: PEM data, with ``bytes()`` and ``write_to_path(path, append=False)``.

An identity that parses as an IP address becomes an ``IP:`` subjectAltName,
one with ``@`` an ``email:`` one, anything else a ``DNS:`` one (a non-ASCII
host name is IDNA-encoded). Keys are EC P-256, signatures SHA-256, serial
numbers random, validity from a day ago to a year ahead. The extensions are
those RFC 5280 asks for and OpenSSL's strict verification
(``ssl.VERIFY_X509_STRICT``, on by default in Python 3.13's
`ssl.create_default_context`) checks: the CA has basicConstraints (critical,
CA:TRUE), keyUsage (critical) and a subjectKeyIdentifier; a leaf has
basicConstraints CA:FALSE, keyUsage, extendedKeyUsage (serverAuth,
clientAuth), subjectAltName, subjectKeyIdentifier and authorityKeyIdentifier.

A missing ``openssl`` tool, or a failing run of it, raises `RuntimeError`
(with openssl's stderr).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import shutil
import ssl
import subprocess
import tempfile
from pathlib import Path

__all__ = ["CA", "Blob", "LeafCert"]

_CONFIG = """\
[ca]
default_ca = test_ca

[test_ca]
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = test_policy
unique_subject = no
copy_extensions = none
email_in_dn = yes

[test_policy]
organizationName = optional
organizationalUnitName = optional
commonName = optional

[req]
distinguished_name = req_dn
string_mask = utf8only

[req_dn]

[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[leaf_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
subjectAltName = @alt_names

[alt_names]
"""

#: The longest commonName X.509 allows (ub-common-name).
_MAX_CN = 64


class Blob:
    """PEM data (trustme's `Blob`)."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def bytes(self) -> bytes:
        """The data."""
        return self._data

    def write_to_path(self, path: str | os.PathLike[str], append: bool = False) -> None:
        """Write the data to *path* (appending when *append*)."""
        with open(path, "ab" if append else "wb") as f:
            f.write(self._data)

    def __repr__(self) -> str:
        return f"<Blob: {len(self._data)} bytes>"


class LeafCert:
    """A certificate issued by a `CA`, with its private key."""

    def __init__(self, private_key_pem: bytes, chain: list[bytes]) -> None:
        self.private_key_pem = Blob(private_key_pem)
        self.cert_chain_pems = [Blob(pem) for pem in chain]
        self.private_key_and_cert_chain_pem = Blob(private_key_pem + b"".join(chain))

    def configure_cert(self, ctx: ssl.SSLContext) -> None:
        """Make *ctx* present this certificate (and its chain)."""
        with tempfile.TemporaryDirectory(prefix="tideloop-cert-") as tmp:
            path = Path(tmp, "cert.pem")
            self.private_key_and_cert_chain_pem.write_to_path(path)
            ctx.load_cert_chain(path)


class CA:
    """A self-signed certificate authority with a fresh key."""

    def __init__(self) -> None:
        self._openssl = _find_openssl()
        self._name = "tideloop test CA " + secrets.token_hex(6)
        with tempfile.TemporaryDirectory(prefix="tideloop-ca-") as tmp:
            work = Path(tmp)
            _write_config(work, [])
            self._run(work, *_new_key_and_request("ca", "O=tideloop tests", "CN=" + self._name))
            self._run(work, *_sign("ca.csr", "ca.pem", "ca_ext", "-selfsign"))
            self._key_pem = (work / "ca.key").read_bytes()
            self.cert_pem = Blob(_pem_only(work / "ca.pem"))

    def configure_trust(self, ctx: ssl.SSLContext) -> None:
        """Make *ctx* trust certificates this CA issued."""
        ctx.load_verify_locations(cadata=self.cert_pem.bytes().decode("ascii"))

    def issue_cert(self, *identities: str) -> LeafCert:
        """A certificate for *identities* (host names, IP addresses, emails), signed by this CA."""
        if not identities:
            raise ValueError("issue_cert needs at least one identity")
        alt_names = [_alt_name(identity) for identity in identities]
        common_name = alt_names[0].partition(":")[2]
        subject = ["O=tideloop tests", "OU=test cert " + secrets.token_hex(6)]
        if len(common_name) <= _MAX_CN:
            subject.append("CN=" + common_name)
        with tempfile.TemporaryDirectory(prefix="tideloop-ca-") as tmp:
            work = Path(tmp)
            _write_config(work, alt_names)
            (work / "ca.key").write_bytes(self._key_pem)
            (work / "ca.pem").write_bytes(self.cert_pem.bytes())
            self._run(work, *_new_key_and_request("leaf", *subject))
            self._run(work, *_sign("leaf.csr", "leaf.pem", "leaf_ext", "-cert", "ca.pem"))
            key = (work / "leaf.key").read_bytes()
            return LeafCert(key, [_pem_only(work / "leaf.pem")])

    def _run(self, work: Path, *args: str) -> None:
        env = {**os.environ, "OPENSSL_CONF": str(work / "openssl.cnf")}
        try:
            proc = subprocess.run(
                [self._openssl, *args], cwd=work, env=env, capture_output=True, check=False
            )
        except OSError as exc:
            raise RuntimeError(f"could not run {self._openssl}: {exc}") from exc
        if proc.returncode != 0:
            stderr = proc.stderr.decode(errors="replace").strip()
            raise RuntimeError(
                f"`openssl {' '.join(args)}` failed (exit status {proc.returncode}):\n{stderr}"
            )


def _find_openssl() -> str:
    path = shutil.which("openssl")
    if path is None:
        raise RuntimeError(
            "the `openssl` command-line tool is not on PATH; the tests need it to make "
            "TLS certificates (Debian/Ubuntu: apt-get install openssl)"
        )
    return path


def _alt_name(identity: str) -> str:
    """A subjectAltName entry for *identity*, as openssl's config writes it."""
    try:
        return "IP:" + str(ipaddress.ip_address(identity))
    except ValueError:
        pass
    if "@" in identity:
        return "email:" + identity
    if not identity.isascii():
        identity = ".".join(
            label if label.isascii() else label.encode("idna").decode("ascii")
            for label in identity.split(".")
        )
    return "DNS:" + identity


def _write_config(work: Path, alt_names: list[str]) -> None:
    lines = [_CONFIG]
    counts: dict[str, int] = {}
    for entry in alt_names:
        kind, _, value = entry.partition(":")
        counts[kind] = counts.get(kind, 0) + 1
        lines.append(f"{kind}.{counts[kind]} = {value}\n")
    (work / "openssl.cnf").write_text("".join(lines), encoding="utf-8")
    (work / "index.txt").write_text("")
    # Positive, 127 bits, an even number of hex digits with no leading zero byte.
    (work / "serial").write_text(f"{secrets.randbits(127) | 1 << 126:032X}\n")


def _new_key_and_request(stem: str, *subject: str) -> list[str]:
    """openssl arguments: a fresh P-256 key (*stem*.key) and a request for it (*stem*.csr)."""
    subj = "".join("/" + _escape_rdn(part) for part in subject)
    return [
        "req",
        "-new",
        "-config",
        "openssl.cnf",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        f"{stem}.key",
        "-out",
        f"{stem}.csr",
        "-utf8",
        "-subj",
        subj,
    ]


def _escape_rdn(part: str) -> str:
    key, _, value = part.partition("=")
    escaped = "".join("\\" + ch if ch in "\\/+=" else ch for ch in value)
    return f"{key}={escaped}"


def _sign(request: str, out: str, extensions: str, *issuer: str) -> list[str]:
    """openssl arguments: sign *request* into *out* with ca.key and the section *extensions*.

    *issuer* says whose certificate it is: ``-selfsign`` or ``-cert ca.pem``.
    """
    now = datetime.datetime.now(datetime.UTC)
    start = now - datetime.timedelta(days=1)
    end = now + datetime.timedelta(days=365)
    return [
        "ca",
        "-batch",
        "-config",
        "openssl.cnf",
        "-keyfile",
        "ca.key",
        *issuer,
        "-in",
        request,
        "-out",
        out,
        "-notext",
        "-preserveDN",
        "-utf8",
        "-extensions",
        extensions,
        "-startdate",
        start.strftime("%Y%m%d%H%M%SZ"),
        "-enddate",
        end.strftime("%Y%m%d%H%M%SZ"),
    ]


def _pem_only(path: Path) -> bytes:
    """The PEM block(s) in *path*, without anything openssl wrote around them."""
    data = path.read_bytes()
    start = data.find(b"-----BEGIN CERTIFICATE-----")
    if start < 0:
        raise RuntimeError(f"openssl wrote no certificate to {path.name}")
    return data[start:].rstrip() + b"\n"
