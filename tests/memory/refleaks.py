"""Reference-leak check of the native core, on a debug CPython.

    bash .ci/sid run .ci-venvs/sid-3.14d/bin/python tests/memory/refleaks.py [MODULES...]

Runs the core's and the transports' test modules (or the ones named) under
``refleak_plugin`` twice: on the native core, and on the pure-Python core
(``TIDELOOP_PURE=1``). A test leaks when ``sys.gettotalrefcount()`` grew in
every measured run (see the plugin). A leak on both cores is the test's or
the stdlib's (a cache, a leaked fixture), not the native code's, and is
reported but passes; a leak the native core has beyond the pure core's
(at least one reference per measured run more than the same test gained
on the pure core) fails the check (exit status 1). Prints one line per
leaking test and a summary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULES = [
    "tests/unit/test_native.py",
    "tests/unit/test_core_with_fakes.py",
    "tests/unit/test_handles.py",
    "tests/unit/test_timers.py",
    "tests/unit/test_metrics.py",
    "tests/conformance/test_callbacks.py",
    "tests/conformance/test_errors.py",
    "tests/conformance/test_debug.py",
    "tests/conformance/test_tasks.py",
    "tests/conformance/test_run.py",
    "tests/conformance/test_threads.py",
    "tests/conformance/test_asyncgens.py",
    "tests/conformance/test_fd_callbacks.py",
    "tests/conformance/test_net_stream.py",
    "tests/conformance/test_datagram.py",
    "tests/conformance/test_pipes.py",
]


def run(modules: list[str], pure: bool) -> dict[str, list[int]]:
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=False) as out:
        path = out.name
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "memory"), str(ROOT / "src")]),
        "TIDELOOP_REFLEAK_OUT": path,
    }
    env.pop("TIDELOOP_PURE", None)
    if pure:
        env["TIDELOOP_PURE"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "refleak_plugin"]
    cmd += ["-p", "no:randomly", "-x", "--timeout", "600", *modules]
    status = subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode
    results: dict[str, list[int]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            entry = json.loads(line)
            results[entry["test"]] = entry["deltas"]
    os.unlink(path)
    if status not in (0, 5):
        raise SystemExit(f"pytest failed on the {'pure' if pure else 'native'} core ({status})")
    return results


def leaks(results: dict[str, list[int]]) -> dict[str, list[int]]:
    return {t: d for t, d in results.items() if d and all(x > 0 for x in d)}


def main() -> int:
    if not hasattr(sys, "gettotalrefcount"):
        print("refleaks.py needs a debug CPython (sys.gettotalrefcount)", file=sys.stderr)
        return 2
    modules = sys.argv[1:] or MODULES
    native = run(modules, pure=False)
    pure = run(modules, pure=True)
    native_leaks, pure_leaks = leaks(native), leaks(pure)
    only = []
    for test, deltas in sorted(native_leaks.items()):
        baseline = pure.get(test)
        excess = baseline is None or sum(deltas) - sum(baseline) >= len(deltas)
        where = "NATIVE ONLY" if excess else "both cores"
        print(f"leak ({where}): {test} native {deltas}, pure {baseline}")
        if excess:
            only.append(test)
    print(
        f"{len(native)} tests on the native core, {len(pure)} on the pure core; "
        f"{len(native_leaks)} grew on every measured native run, "
        f"{len(only)} of them more than on the pure core; "
        f"{len(pure_leaks)} grew on every measured pure run"
    )
    return 1 if only else 0


if __name__ == "__main__":
    raise SystemExit(main())
