"""Reference-leak check of the native core, on a debug CPython.

    bash .ci/sid run .ci-venvs/sid-3.14d/bin/python tests/memory/refleaks.py [MODULES...]

Runs the core's and the transports' test modules (or the ones named) under
``refleak_plugin`` twice: on the native core, and on the pure-Python core
(``TIDELOOP_PURE=1``). A test leaks when ``sys.gettotalrefcount()`` grew in
every measured run (see the plugin). A leak on both cores is the test's or
the stdlib's (a cache, a leaked fixture), not the native code's, and is
reported but passes; a leak the native core has beyond the pure core's
(every measured native run grew more than any measured pure run of the
same test: tests that start threads or processes, or draw random
examples, grow by different amounts from run to run on either core) fails
the check (exit status 1). Prints one line per leaking test and a summary.

``--self-test`` first checks the checker: a planted test that keeps
objects alive on the native core only must be reported, and nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The core's modules (the native code is the core's): every test of them
#: runs several times on a debug build, so the list stays short.
MODULES = [
    "tests/unit/test_native.py",
    "tests/unit/test_core_with_fakes.py",
    "tests/unit/test_handles.py",
    "tests/unit/test_timers.py",
    "tests/conformance/test_callbacks.py",
    "tests/conformance/test_errors.py",
    "tests/conformance/test_debug.py",
    "tests/conformance/test_tasks.py",
    "tests/conformance/test_fd_callbacks.py",
]
#: ... and the transports', which valgrind.py adds (one run each, no debug build).
TRANSPORT_MODULES = [
    "tests/conformance/test_net_stream.py",
    "tests/conformance/test_datagram.py",
    "tests/conformance/test_pipes.py",
    "tests/conformance/test_run.py",
    "tests/conformance/test_threads.py",
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


PLANTED = """
import tideloop

KEPT = []


def test_keeps_objects_on_the_native_core_only():
    if tideloop.NATIVE:
        KEPT.append([object() for _ in range(10)])


def test_keeps_nothing():
    [object() for _ in range(10)]
"""


def self_test() -> None:
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        planted = Path(tmp) / "test_planted_leak.py"
        planted.write_text(PLANTED)
        rel = str(planted.relative_to(ROOT))
        native, pure = run([rel], pure=False), run([rel], pure=True)
    found = {t.rsplit("::", 1)[1] for t, d in leaks(native).items() if min(d) > max(pure[t])}
    assert found == {"test_keeps_objects_on_the_native_core_only"}, (native, pure)
    print("self-test: the planted native-only leak is found, and nothing else")


def main() -> int:
    if not hasattr(sys, "gettotalrefcount"):
        print("refleaks.py needs a debug CPython (sys.gettotalrefcount)", file=sys.stderr)
        return 2
    args = sys.argv[1:]
    if args[:1] == ["--self-test"]:
        self_test()
        args = args[1:]
    modules = args or MODULES
    native = run(modules, pure=False)
    pure = run(modules, pure=True)
    native_leaks, pure_leaks = leaks(native), leaks(pure)
    only = []
    for test, deltas in sorted(native_leaks.items()):
        baseline = pure.get(test)
        excess = not baseline or min(deltas) > max(baseline)
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
