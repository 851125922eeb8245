"""The server-side TLS context of the TLS workloads, with a certificate made at run time.

The key and the self-signed certificate for ``localhost``/``127.0.0.1``
come from the ``openssl`` command-line tool (ECDSA P-256, what a modern
server would use; no Python package needed), once per server process and
before the server reports ready, so outside every measurement. The load
generators do not verify certificates. The context is
``ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)``: the stdlib's
defaults for a server (TLS 1.2+, TLS 1.3 negotiated with OpenSSL's
default cipher), the same for every loop.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import tempfile
from pathlib import Path

__all__ = ["server_context"]


def server_context() -> ssl.SSLContext:
    """A TLS server context with a fresh self-signed certificate; RuntimeError without openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl command is needed to make the TLS workloads' certificate")
    with tempfile.TemporaryDirectory(prefix="tideloop-bench-tls-") as tmp:
        key, cert = Path(tmp) / "key.pem", Path(tmp) / "cert.pem"
        subprocess.run(
            [
                openssl,
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost,IP:127.0.0.1",
                "-keyout",
                str(key),
                "-out",
                str(cert),
            ],
            check=True,
            capture_output=True,
        )
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
    return context
