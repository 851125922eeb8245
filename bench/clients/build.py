"""Compile the C load generator at run time (gcc), into ``bench/.build/``.

It is rebuilt when its source is newer than the binary; the binary is not
committed (``bench/.gitignore``). ``echo_client_tls`` is the same source
with its TLS mode compiled in (``-DECHO_TLS``, linked with OpenSSL), a
separate binary so that the plain client needs no OpenSSL.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["echo_client", "echo_client_tls"]

HERE = Path(__file__).resolve().parent
BUILD = HERE.parent / ".build"


def echo_client() -> Path:
    """Path of the compiled echo client; raises RuntimeError if it cannot be built."""
    return _build("echo_client", [], [], "compiling the echo client failed")


def echo_client_tls() -> Path:
    """Path of the echo client with TLS; raises RuntimeError if it cannot be built."""
    return _build(
        "echo_client_tls",
        ["-DECHO_TLS"],
        ["-lssl", "-lcrypto"],
        "compiling the TLS echo client failed (it needs OpenSSL's headers: "
        "apt-get install libssl-dev)",
    )


def _build(name: str, defines: list[str], libs: list[str], failure: str) -> Path:
    """Compile echo_client.c into BUILD/*name*, unless it is up to date."""
    src = HERE / "echo_client.c"
    out = BUILD / name
    if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
        return out
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise RuntimeError("no C compiler (gcc or cc) found: needed for the echo load generator")
    BUILD.mkdir(exist_ok=True)
    # Libraries after the source: the linker resolves left to right.
    cmd = [cc, "-O2", "-Wall", *defines, "-o", str(out), str(src), *libs]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{failure}:\n{proc.stderr}")
    return out
