"""The native core's tests under valgrind memcheck: no invalid access, no definite leak.

    bash .ci/sid run .ci-venvs/sid-3.15/bin/python tests/memory/valgrind.py [MODULES...]

Runs pytest on the core's and the transports' test modules (those of
``refleaks.py``, or the ones named) in one process under ``valgrind
--tool=memcheck`` with ``PYTHONMALLOC=malloc`` (so that every Python object
is a malloc block valgrind tracks), and reads valgrind's report of that
process: it fails (exit status 1) on any error (invalid read or write, use
of uninitialised memory, a bad free) and on any definitely lost block.
Child processes the tests start are not traced (the native core runs in
the test process). Prints valgrind's summary lines.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# Run as a script: this folder is on sys.path.
from refleaks import MODULES, ROOT, TRANSPORT_MODULES  # type: ignore[import-not-found]


def main() -> int:
    modules = sys.argv[1:] or [*MODULES, *TRANSPORT_MODULES]
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "memcheck.log"
        cmd = [
            "valgrind",
            "--tool=memcheck",
            "--leak-check=full",
            "--show-leak-kinds=definite",
            "--errors-for-leak-kinds=definite",
            "--num-callers=40",
            f"--log-file={log}",
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "--timeout",
            "900",
            *modules,
        ]
        env = {**os.environ, "PYTHONMALLOC": "malloc", "PYTHONPATH": str(ROOT / "src")}
        status = subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode
        text = log.read_text()
    summary = [
        line
        for line in text.splitlines()
        if re.search(r"ERROR SUMMARY|definitely lost|Invalid", line)
    ]
    print("\n".join(summary))
    errors = re.search(r"ERROR SUMMARY: (\d+) errors", text)
    lost = re.search(r"definitely lost: ([\d,]+) bytes", text)
    if errors is None:
        print("valgrind wrote no summary", file=sys.stderr)
        return 1
    failed = int(errors.group(1)) > 0 or (lost is not None and lost.group(1) != "0")
    if failed:
        print(text[-20000:], file=sys.stderr)
    if status not in (0, 5):
        print(f"pytest under valgrind exited {status}", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
