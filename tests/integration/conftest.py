"""Shared fixtures for the integration tests that run real libraries on the loops.

The loops come from the root conftest: a test that takes ``loop``,
``loop_factory`` or ``loop_name`` runs once per loop (the stdlib's selector
loop and tideloop with each poller), and the same test must pass on all of
them. This file adds what several library tests share:

* `tls_ca`: a throwaway certificate authority (`certs`: made with the ``openssl`` tool), and
  `server_ssl_context` (a certificate for localhost / 127.0.0.1 / ::1) and
  `client_ssl_context` (verifying against that CA) built from it.
* `postgres_server` (one per session): a real PostgreSQL server (Debian's
  ``postgresql`` package, ``/usr/lib/postgresql/*/bin``) in a temporary data
  directory, on a free loopback port with ``ssl=on`` (a certificate from
  `tls_ca`, written to files) and on a Unix socket; stopped and removed at
  the end of the session. postgres refuses to run as root, so when the
  tests run as root the server runs as the package's ``postgres`` user (its
  directory is chowned to it). Where the binaries are missing the tests
  skip, unless ``TIDELOOP_REQUIRE_POSTGRES=1`` (CI sets it): then they fail.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from needs import missing

import certs


@pytest.fixture(scope="session")
def tls_ca() -> certs.CA:
    """A throwaway certificate authority, trusted by `client_ssl_context` only."""
    return certs.CA()


@pytest.fixture
def server_ssl_context(tls_ca: certs.CA) -> ssl.SSLContext:
    """Serves a certificate for localhost, 127.0.0.1 and ::1 signed by `tls_ca`."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls_ca.issue_cert("localhost", "127.0.0.1", "::1").configure_cert(ctx)
    return ctx


@pytest.fixture
def client_ssl_context(tls_ca: certs.CA) -> ssl.SSLContext:
    """Verifies certificates (and host names) against `tls_ca`."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    tls_ca.configure_trust(ctx)
    return ctx


@dataclass(frozen=True)
class PostgresServer:
    """A running PostgreSQL server: TCP (TLS on offer) and a Unix socket."""

    host: str
    port: int
    unix_dir: str  # asyncpg: host=unix_dir, port=port
    user: str
    ca: certs.CA

    def client_ssl_context(self) -> ssl.SSLContext:
        """Verifies the server's certificate (issued for 127.0.0.1 and localhost)."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        self.ca.configure_trust(context)
        return context


def _postgres_bindir() -> Path | None:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"),
        key=lambda p: int(Path(p).parent.parent.name) if p.split("/")[4].isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    binary = shutil.which("postgres")
    return Path(binary).parent if binary else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_log(proc: subprocess.Popen[bytes], logfile: Path, marker: str, timeout: float) -> str:
    """The server's log once *marker* is in it (or it exited, or *timeout* passed).

    The log goes to a file, not a pipe: a pipe nobody drains would block the
    server once full. A file cannot be select()ed, so this checks it every 20 ms.
    """
    deadline = time.monotonic() + timeout
    while True:
        log = logfile.read_text(errors="replace") if logfile.exists() else ""
        if marker in log or proc.poll() is not None or time.monotonic() > deadline:
            return log
        time.sleep(0.02)


@pytest.fixture(scope="session")
def postgres_server(tls_ca: certs.CA) -> Iterator[PostgresServer]:
    bindir = _postgres_bindir()
    if bindir is None or not (bindir / "initdb").exists():
        missing(
            "PostgreSQL not found (/usr/lib/postgresql/*/bin): install it (Debian/Ubuntu: "
            "apt-get install -y postgresql) to run the asyncpg integration tests",
            "TIDELOOP_REQUIRE_POSTGRES",
        )

    # postgres will not run as root: drop to the package's user (or fail clearly).
    run_as: dict[str, Any] = {}
    owner: pwd.struct_passwd | None = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail("running as root and there is no 'postgres' user to run PostgreSQL as")
        run_as = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}

    base = Path(tempfile.mkdtemp(prefix="tideloop-pg-"))  # not under pytest's 0700 root dir
    data = base / "data"
    sockdir = base / "sock"
    sockdir.mkdir()
    cert = tls_ca.issue_cert("127.0.0.1", "localhost")
    cert.cert_chain_pems[0].write_to_path(str(base / "server.crt"))
    cert.private_key_pem.write_to_path(str(base / "server.key"))
    (base / "server.key").chmod(0o600)
    if owner is not None:
        for path in (base, sockdir, base / "server.crt", base / "server.key"):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    env.pop("PGDATA", None)
    proc: subprocess.Popen[bytes] | None = None
    try:
        init = subprocess.run(
            [
                str(bindir / "initdb"),
                "-D", str(data),
                "-U", "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            capture_output=True,
            env=env,
            cwd=base,
            check=False,
            **run_as,
        )  # fmt: skip
        if init.returncode != 0:
            pytest.fail(f"initdb failed:\n{init.stdout.decode()}\n{init.stderr.decode()}")
        log = ""
        for _attempt in range(5):  # the free port may be taken before postgres binds it
            port = _free_port()
            logfile = base / f"postgres-{port}.log"
            with logfile.open("wb") as logf:
                if owner is not None:
                    os.chown(logfile, owner.pw_uid, owner.pw_gid)
                proc = subprocess.Popen(
                    [
                        str(bindir / "postgres"),
                        "-D", str(data),
                        "-p", str(port),
                        "-k", str(sockdir),
                        "-c", "listen_addresses=127.0.0.1",
                        "-c", "ssl=on",
                        "-c", f"ssl_cert_file={base / 'server.crt'}",
                        "-c", f"ssl_key_file={base / 'server.key'}",
                        "-c", "fsync=off",
                        "-c", "synchronous_commit=off",
                        "-c", "full_page_writes=off",
                        "-c", "max_connections=100",
                        "-c", "logging_collector=off",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=logf,
                    env=env,
                    cwd=base,
                    **run_as,
                )  # fmt: skip
            log = _wait_for_log(proc, logfile, "database system is ready to accept connections", 30)
            if "database system is ready to accept connections" in log:
                break
            proc.kill()
            proc.wait()
            proc = None
        else:
            pytest.fail(f"postgres did not start:\n{log}")
        yield PostgresServer("127.0.0.1", port, str(sockdir), "postgres", tls_ca)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)  # fast shutdown: disconnects clients
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(base, ignore_errors=True)
