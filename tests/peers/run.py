"""Other projects' test suites, on the stdlib loop and on tideloop: the peer runner.

For each peer (`PEERS`): take its released sdist from PyPI (cached under
``.peers/``, which git ignores; no third-party code is copied into this
repository), install it with its test requirements into a virtual environment
of its own next to tideloop (editable, from this checkout), run its suite with
``--tideloop``, and run on the stdlib loop what did not pass there. The run
fails when a test that passes on the stdlib loop does not pass on tideloop (a
skip counts as not passing), unless `KNOWN` names it with a reason, or when the
``--tideloop`` run made no tideloop loop (`tideloop_peer_check` counts the
loops each run made).

The stdlib loop's side is run only for the tests that did not pass on tideloop
(the question is only ever asked of them), after a ``--collect-only`` on the
stdlib loop shows that the tideloop run ran every test the stdlib loop would. When
that cannot be shown (a test id pytest cannot be given back, a collection that
differs), the whole suite runs on the stdlib loop too, as ``--both`` always does.

    python tests/peers/run.py                       # every peer, this Python
    python tests/peers/run.py anyio --jobs 2        # one peer, two xdist workers
    python tests/peers/run.py aiohttp -- -k client  # extra pytest arguments
    python tests/peers/run.py --both                # whole suites on both loops

Exit status 0 when every peer passes on tideloop wherever it passes on the stdlib
loop; a table per peer either way.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".peers"
HERE = Path(__file__).resolve().parent


@dataclasses.dataclass(frozen=True)
class Peer:
    name: str
    version: str
    #: Test requirements (the peer's own, less what needs a network, Docker,
    #: another loop or a Rust toolchain here).
    requirements: tuple[str, ...]
    #: pytest options (the peer's own configuration is set aside where it
    #: would add coverage, xdist or doctests of its own).
    pytest_args: tuple[str, ...]
    #: What pytest collects.
    paths: tuple[str, ...] = ("tests",)
    #: Environment for installing and testing.
    env: tuple[tuple[str, str], ...] = ()
    #: Install the release's wheel rather than build the sdist (C extensions
    #: that need headers this machine lacks); the tests still come from the
    #: sdist, which must not shadow the package (a src layout).
    from_wheel: bool = False
    #: At most this many xdist workers (a suite whose servers use fixed ports
    #: cannot run in parallel).
    max_jobs: int = 64

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


PEERS: dict[str, Peer] = {
    "anyio": Peer(
        "anyio",
        "4.16.0",
        requirements=(
            "blockbuster>=1.5.29",
            "hypothesis>=4.18.2",
            "psutil>=5.9",
            "pytest>=9.0",
            "pytest-mock>=3.14",
            "pytest-timeout>=2.4.0",
            "pytest-xdist>=3.5",
            "trustme>=1.0.0",
            "truststore>=0.9.1",
        ),
        # The asyncio backend only (trio and uvloop are other loops); tests
        # that need the Internet are deselected, and the IPv6 ones (their
        # fixture resolves "localhost" to ::1, which CI machines' /etc/hosts
        # may lack: they error on both loops, and the sockets they leave
        # behind warn at random in later tests).
        pytest_args=("-m", "not network", "-k", "not trio and not uvloop and not ipv6"),
    ),
    "aiohttp": Peer(
        "aiohttp",
        "3.14.5",
        requirements=(
            "blockbuster",
            "coverage",  # its pytest.ini's warning filters name a coverage class
            "freezegun",
            "pkgconfig",
            "proxy.py>=2.4.4rc5",
            "pytest>=8.4",
            "pytest-mock",
            "pytest-timeout",
            "pytest-xdist",
            "re-assert",
            "setuptools-git",
            "trustme",
            "gunicorn",
            "aiodns>=3.3.0",
            "Brotli>=1.2; platform_python_implementation == 'CPython'",
            "brotlicffi>=1.2; platform_python_implementation != 'CPython'",
            "zlib_ng",
        ),
        # aiohttp's pytest.ini adds coverage, xdist and doctests: replaced by
        # its marker selection and ours.
        pytest_args=(
            "-o",
            "addopts=",
            "--strict-markers",
            "-m",
            "not dev_mode and not autobahn and not internal",
            "-p",
            "no:cov",
        ),
        env=(("AIOHTTP_NO_EXTENSIONS", "1"),),
    ),
    # An HTTP client on anyio and httpcore, tested against uvicorn servers
    # it starts in threads.
    "httpx": Peer(
        "httpx",
        "0.28.1",
        requirements=(
            "pytest>=8",
            "pytest-xdist",
            "trustme",
            "cryptography",
            "uvicorn",
            "trio",  # its tests' helpers import it; they run on asyncio here
            "chardet",
            # httpx's extras: brotli, cli, http2, socks, zstd.
            "brotli; platform_python_implementation == 'CPython'",
            "brotlicffi; platform_python_implementation != 'CPython'",
            "click",
            "pygments",
            "rich",
            "h2",
            "socksio",
            "zstandard",
        ),
        pytest_args=("-m", "not network"),
        max_jobs=1,  # its uvicorn fixtures listen on fixed ports
    ),
    # QUIC over UDP: clients and servers on loopback datagram endpoints.
    "aioquic": Peer(
        "aioquic",
        "1.7.2",
        requirements=("pytest>=8", "pytest-xdist"),
        pytest_args=(),
        from_wheel=True,
    ),
}

#: Tests that read the stdlib loop's internals, reviewed one by one:
#: (peer, test id) -> why it cannot pass on another loop.
KNOWN: dict[tuple[str, str], str] = {}

#: Re-runs, one test at a time, of what failed on tideloop but passed on
#: the stdlib loop, before it counts as a regression.
RERUNS = 5


def log(message: str) -> None:
    print(f"== {message}", flush=True)


def run(cmd: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    subprocess.run(cmd, cwd=cwd, env=env, check=True)


def sdist(peer: Peer, python: str) -> Path:
    folder = CACHE / "sdists"
    folder.mkdir(parents=True, exist_ok=True)
    found = list(folder.glob(f"{peer.name}-{peer.version}.tar.gz"))
    if not found:
        log(f"{peer.name} {peer.version}: downloading its sdist from PyPI")
        pip = [python, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
        run([*pip, "--no-deps", "--no-binary", ":all:", "--dest", str(folder), peer.pin])
        found = list(folder.glob(f"{peer.name}-{peer.version}.tar.gz"))
    if not found:
        raise SystemExit(f"no sdist for {peer.name} {peer.version}")
    return found[0]


def source(peer: Peer, archive: Path, tag: str) -> Path:
    """A fresh copy of the sdist's tree (its tests write next to themselves)."""
    target = CACHE / "src" / tag / f"{peer.name}-{peer.version}"
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(target.parent, filter="data")
    if not has_pytest_config(target):
        # Else pytest would take this repository's configuration (the tree
        # is under .peers/): the peer's suite runs with pytest's defaults.
        (target / "pytest.ini").write_text("[pytest]\n")
    return target


def has_pytest_config(tree: Path) -> bool:
    if (tree / "pytest.ini").exists():
        return True
    pyproject = tree / "pyproject.toml"
    if pyproject.exists() and "[tool.pytest" in pyproject.read_text():
        return True
    for name, section in (("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]")):
        path = tree / name
        if path.exists() and section in path.read_text():
            return True
    return False


def environment(peer: Peer, python: str, tag: str, src: Path) -> Path:
    """The peer's virtual environment, made once per interpreter and spec."""
    venv = CACHE / "venvs" / f"{peer.name}-{tag}"
    stamp = venv / "peer-spec.json"
    spec = json.dumps(dataclasses.asdict(peer), sort_keys=True)
    if stamp.exists() and stamp.read_text() == spec:
        return venv
    log(f"{peer.name}: virtual environment {venv}")
    if venv.exists():
        shutil.rmtree(venv)
    run([python, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    pip += ["--disable-pip-version-check", "--prefer-binary"]
    env = {**os.environ, **dict(peer.env)}
    package = [peer.pin, "--only-binary", peer.name] if peer.from_wheel else [str(src)]
    run([*pip, "-e", str(ROOT), *package, *peer.requirements], env=env)
    stamp.write_text(spec)
    return venv


def node_id(file: str, classname: str, name: str) -> str:
    """pytest's node id, from a JUnit (xunit1) test case's attributes."""
    module = file.removesuffix(".py").replace("/", ".")
    inner = classname.removeprefix(module).lstrip(".")
    return "::".join(part for part in (file or classname, inner, name) if part)


#: The outcome of a module skipped at collection (not a test id pytest lists).
COLLECTION_SKIPPED = "skipped at collection"


def outcomes(report: Path) -> dict[str, str]:
    """test id -> passed / failed / error / skipped, from a JUnit XML report."""
    result: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        test_id = node_id(
            case.get("file") or "", case.get("classname") or "", case.get("name") or ""
        )
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                if child.get("message") == "collection skipped":
                    # A module skipped as a whole (an importorskip): no test
                    # of it was collected, and its entry names no test.
                    outcome = COLLECTION_SKIPPED
                break
        # A test that fails in teardown has two entries: the worst counts.
        if result.get(test_id, "passed") == "passed":
            result[test_id] = outcome
    return result


def loops_made(folder: Path) -> dict[str, int]:
    total = {"tideloop": 0, "stdlib": 0}
    for path in folder.glob("*.json"):
        for key, value in json.loads(path.read_text()).items():
            total[key] += value
    return total


@dataclasses.dataclass(frozen=True)
class Place:
    """Where a peer's run happens: its environment, its tree, the interpreter's tag."""

    venv: Path
    src: Path
    tag: str


def peer_env(peer: Peer) -> dict[str, str]:
    """The environment a peer's pytest runs in (our plugin importable)."""
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    return {**os.environ, **dict(peer.env), "PYTHONPATH": path}


def collected(peer: Peer, place: Place, extra: list[str]) -> set[str] | None:
    """The node ids the suite's run on the stdlib loop would run, or None.

    ``pytest --collect-only -q`` prints one node id a line, then a blank line
    and its summary; None when it fails.
    """
    cmd = [str(place.venv / "bin" / "python"), "-m", "pytest", *peer.paths, *peer.pytest_args]
    cmd += ["-q", "-p", "no:cacheprovider", "--collect-only", *extra]
    done = subprocess.run(
        cmd, cwd=place.src, env=peer_env(peer), check=False, stdout=subprocess.PIPE, text=True
    )
    if done.returncode != 0:
        return None
    ids: set[str] = set()
    for line in done.stdout.splitlines():
        if not line.strip():
            break
        ids.add(line)
    return ids


def run_suite(
    peer: Peer,
    place: Place,
    loop: str,
    jobs: int,
    extra: list[str],
    *,
    only: list[str] | None = None,
) -> tuple[dict[str, str], dict[str, int], float]:
    venv, src, tag = place.venv, place.src, place.tag
    results = CACHE / "results" / tag
    results.mkdir(parents=True, exist_ok=True)
    report = results / f"{peer.name}-{loop}.xml"
    counts = results / f"{peer.name}-{loop}-loops"
    if counts.exists():
        shutil.rmtree(counts)
    counts.mkdir()
    cmd = [str(venv / "bin" / "python"), "-m", "pytest", *(only or peer.paths), *peer.pytest_args]
    cmd += ["-q", "-p", "no:cacheprovider", "-p", "tideloop_peer_check", f"--junitxml={report}"]
    # xunit1 records each test's file: the report's ids are pytest's node ids.
    cmd += ["-o", "junit_family=xunit1"]
    jobs = min(jobs, peer.max_jobs)
    if jobs > 1:
        cmd += ["-n", str(jobs)]
    if loop.startswith("tideloop"):
        cmd.append("--tideloop")
    cmd += extra
    env = {**peer_env(peer), "TIDELOOP_PEER_REPORT": str(counts)}
    shown = " ".join(cmd[3:]) if only is None else f"{len(only)} tests"
    log(f"{peer.name} on the {loop} loop: {shown}")
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=src, env=env, check=False, stdout=subprocess.PIPE, text=True)
    elapsed = time.monotonic() - started
    tail = done.stdout.strip().splitlines()[-1:] if done.stdout else []
    log(f"{peer.name} on the {loop} loop: {' '.join(tail)} ({elapsed:.0f} s)")
    (results / f"{peer.name}-{loop}.log").write_text(done.stdout or "")
    if not report.exists():
        raise SystemExit(f"{peer.name}: pytest wrote no report (exit {done.returncode})")
    return outcomes(report), loops_made(counts), elapsed


def stdlib_side(
    peer: Peer,
    place: Place,
    python: str,
    tide: dict[str, str],
    *,
    jobs: int,
    extra: list[str],
    both: bool,
) -> tuple[dict[str, str], dict[str, int], float, Place]:
    """The stdlib loop's outcomes of what `compare` asks about, and the tree used.

    Only the tests that did not pass on tideloop are asked about, so only they
    run, once the stdlib loop's collection is shown to be the tideloop run's.
    """

    def fresh() -> Place:  # suites write files next to their tests
        return Place(place.venv, source(peer, sdist(peer, python), place.tag), place.tag)

    place = fresh()
    ran = {test_id for test_id, outcome in tide.items() if outcome != COLLECTION_SKIPPED}
    if not both:
        expected = collected(peer, place, extra)
        if expected != ran:
            # The tideloop run did not run what the stdlib loop's would (or
            # the ids cannot be matched): compare whole runs.
            count = "?" if expected is None else len(expected)
            log(f"{peer.name}: {count} tests collected, {len(ran)} run on tideloop")
            both = True
    if not both:
        asked = sorted(test_id for test_id in ran if tide[test_id] != "passed")
        if not asked:
            return {}, {"tideloop": 0, "stdlib": 0}, 0.0, place
        stdlib, loops, elapsed = run_suite(peer, place, "stdlib", jobs, extra, only=asked)
        if set(stdlib) == set(asked):
            return stdlib, loops, elapsed, place
        log(f"{peer.name}: the stdlib loop's run of {len(asked)} tests did not run them all")
        place = fresh()
    stdlib, loops, elapsed = run_suite(peer, place, "stdlib", jobs, extra)
    return stdlib, loops, elapsed, place


def compare(peer: Peer, stdlib: dict[str, str], tide: dict[str, str]) -> list[str]:
    regressions = []
    for test_id, outcome in sorted(stdlib.items()):
        lost = outcome == "passed" and tide.get(test_id) != "passed"
        if lost and (peer.name, test_id) not in KNOWN:
            regressions.append(f"{test_id}: {tide.get(test_id, 'not run')}")
    return regressions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peers", nargs="*", help=f"of {', '.join(PEERS)} (default: all)")
    parser.add_argument("--python", default=sys.executable, help="interpreter (default: this)")
    parser.add_argument("--jobs", type=int, default=1, help="xdist workers per run")
    parser.add_argument(
        "--both",
        action="store_true",
        help="the whole suite on the stdlib loop too (default: what did not pass on tideloop)",
    )
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    names = args.peers or list(PEERS)
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        parser.error(f"unknown peers: {', '.join(unknown)}")
    probe = "import sys; print(sys.implementation.name + '%d.%d' % sys.version_info[:2])"
    tag = subprocess.run(
        [args.python, "-c", probe],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout.strip()
    failed = False
    rows = []
    for name in names:
        peer = PEERS[name]
        src = source(peer, sdist(peer, args.python), tag)
        venv = environment(peer, args.python, tag, src)
        place = Place(venv, src, tag)
        tide, tide_loops, t2 = run_suite(peer, place, "tideloop", args.jobs, extra)
        stdlib, stdlib_loops, t1, place = stdlib_side(
            peer, place, args.python, tide, jobs=args.jobs, extra=extra, both=args.both
        )
        regressions = compare(peer, stdlib, tide)
        for attempt in range(1, RERUNS + 1):
            if not regressions:
                break
            # Again, on their own: a test that passes then failed for the
            # load of a whole run (several suites time their subprocesses:
            # anyio's pytest-plugin tests give a child pytest 3 s, which a
            # two-core machine under load does not always meet).
            ids = [line.split(": ")[0] for line in regressions]
            label = "tideloop-rerun" if attempt == 1 else f"tideloop-rerun{attempt}"
            again, _, _ = run_suite(peer, place, label, 1, extra, only=ids)
            for test_id in ids:
                if again.get(test_id) == "passed":
                    log(f"{peer.name}: flaky: {test_id} passed on re-run {attempt}")
                    tide[test_id] = "passed"
            regressions = compare(peer, stdlib, tide)
        passed_std = sum(o == "passed" for o in stdlib.values())
        passed_tide = sum(o == "passed" for o in tide.values())
        rows.append(
            f"| {peer.name} {peer.version} | {len(tide)} | {passed_tide} | {len(stdlib)} "
            f"| {passed_std} | {len(regressions)} "
            f"| {tide_loops['tideloop']} / {tide_loops['stdlib']} | {t2:.0f} s / {t1:.0f} s |"
        )
        if stdlib_loops["tideloop"]:
            log(f"{peer.name}: the stdlib run made {stdlib_loops['tideloop']} tideloop loops")
            failed = True
        if not tide_loops["tideloop"]:
            log(f"{peer.name}: the --tideloop run made no tideloop loop")
            failed = True
        if regressions:
            failed = True
            log(f"{peer.name}: {len(regressions)} tests pass on the stdlib loop, not on tideloop:")
            for line in regressions:
                print(f"   {line}")
    print()
    print(f"Python: {tag}")
    print(
        "| suite | tests | passed, tideloop | run on stdlib | passed, stdlib | regressions "
        "| loops in the tideloop run (tideloop / stdlib) | time (tideloop / stdlib) |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for row in rows:
        print(row)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
