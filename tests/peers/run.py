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
    python tests/peers/run.py --explore 10 --explore-runs 5   # exploration

Exit status 0 when every peer passes on tideloop wherever it passes on the stdlib
loop; a table per peer either way.

Exploration (``--explore N``): the tideloop run explores each async test under
N schedules (``--tideloop-seeds=N``, shrunk and taped in
``.peers/tapes/<interpreter>/<peer>/``), and ``--explore-runs K`` runs the
whole suite K times more under seeds 1..K (``--tideloop-seed``: the only way a
sync test that runs its own loop, such as aioquic's, meets another schedule).
A test that fails so, and not unperturbed, is a finding: a tape the plugin
classified (ordering, timing, latent), or a seed that fails the test again
when it runs alone. `REVIEWED` holds each finding's class, ordering race or
timing assumption, with its reason (docs/findings.md has each, with a
reproduction on the stdlib loop); a finding not there fails the run, and so
would a false alarm (a schedule asyncio cannot produce), which is fixed in
tideloop rather than listed. The stdlib loop never gets the exploration's
options.
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

#: Exploration findings, reviewed one by one: (peer, test id) -> (class, why).
#: The class is "ordering race" (a legal order of callbacks breaks it),
#: "timing assumption" (it needs an operation to finish within a timer's
#: delay) or "collateral" (it fails only after an earlier finding of the
#: same run, for what that one left behind, and passes alone);
#: docs/findings.md has each, with a reproduction on the stdlib loop.
#: There is no "false alarm" class: a schedule asyncio cannot produce is a
#: bug in tideloop, fixed there.
REVIEWED: dict[tuple[str, str], tuple[str, str]] = {
    (
        "anyio",
        "tests/test_from_thread.py::TestBlockingPortal::test_aexit_with_exception[asyncio]",
    ): (
        "timing assumption",
        "the test's two threads must reach portal.call() within its sleep(0.1); a thread "
        "that takes longer finds the portal's task group closed (RuntimeError, not the "
        "CancelledError the test expects)",
    ),
    (
        "anyio",
        "tests/test_from_thread.py::TestBlockingPortal::test_aexit_without_exception[asyncio]",
    ): (
        "timing assumption",
        "as test_aexit_with_exception: a thread that reaches portal.call() after the "
        "test's sleep(0.1) finds the portal closed",
    ),
    (
        "anyio",
        "tests/test_subprocesses.py::test_wait_returns_on_process_exit_with_open_stdout[asyncio]",
    ): (
        "timing assumption",
        "its child must start and exit within the test's fail_after(5): the minimal "
        "schedule has tideloop's spawn thread take longer than that timer",
    ),
    (
        "anyio",
        "tests/test_subprocesses.py::test_close_with_stdout_blocked_subprocess[asyncio]",
    ): (
        "timing assumption",
        "as test_wait_returns_on_process_exit_with_open_stdout: the child's start taking "
        "longer than the test's fail_after(5)",
    ),
    (
        "anyio",
        "tests/test_to_thread.py::test_asyncio_run_does_not_leak_event_loop",
    ): (
        "timing assumption",
        "it asserts the loop is freed right after anyio.run() returns, but anyio's worker "
        "thread holds it until it ends, a moment later; on virtual time the run ends "
        "sooner and the main thread gets there first (a late worker fails it on asyncio)",
    ),
    (
        "anyio",
        "tests/test_synchronization.py::TestLock::test_contextmanager[asyncio]",
    ): (
        "collateral",
        "a ResourceWarning for the pipes an earlier failing subprocess test left open, "
        "collected during it; it passes alone",
    ),
    (
        "anyio",
        "tests/test_taskgroups.py::test_propagate_native_cancellation_from_taskgroup[asyncio]",
    ): (
        "collateral",
        "as TestLock::test_contextmanager: an earlier subprocess test's pipes, collected "
        "during it; it passes alone",
    ),
}

CLASSES = ("ordering race", "timing assumption", "collateral")

#: Tests that talk to a peer the loop cannot watch, given the autojump
#: threshold docs/testing.md prescribes for them ("Which threshold"), as a
#: user would mark them: (peer, "file::function") -> (seconds, the peer).
#: Virtual time at the default 0 jumps to the next timer as soon as the
#: loop is idle, before such a peer answers; tideloop holds the clock for
#: its own threads and the loop's children, not for another process's
#: server or a DNS server elsewhere. The peer check plugin marks them
#: ``@pytest.mark.tideloop(autojump_threshold=seconds)`` on virtual time.
THRESHOLDS: dict[tuple[str, str], tuple[float, str]] = {
    ("aiohttp", "tests/test_proxy_functional.py::test_secure_https_proxy_absolute_path"): (
        0.5,
        "a proxy.py server, run by a fixture in processes of its own (its work is in "
        "threads procfs shows no state for without a directory read)",
    ),
    ("aiohttp", "tests/test_client_functional.py::test_aiohttp_request_ctx_manager_not_found"): (
        0.5,
        "aiodns asks the machine's DNS server (another host) for a name that does not exist",
    ),
}


def thresholds(peer: str) -> dict[str, float]:
    """*peer*'s `THRESHOLDS`, for the peer check plugin: test -> seconds."""
    return {test: seconds for (name, test), (seconds, _) in THRESHOLDS.items() if name == peer}


@dataclasses.dataclass(frozen=True)
class Finding:
    """A test that failed under exploration, and not unperturbed."""

    test_id: str
    #: "seed 3" (the plugin's exploration) or "whole run, seed 2".
    found_by: str
    #: The plugin's class of its minimal schedule (ordering, timing, latent),
    #: "seed" for a whole run's seed (not shrunk: the test is sync),
    #: "virtual time" for a test that fails unperturbed on virtual time and
    #: passes on real time, or "collateral" for one that passes alone on
    #: virtual time too (`virtual_time_findings`).
    kind: str
    summary: str
    replay: str


def tape_findings(folder: Path) -> tuple[list[Finding], dict[str, Finding]]:
    """The findings among a run's tapes, and the tests whose tapes say deterministic.

    A deterministic tape is a test that fails unperturbed: not a finding, it
    goes through the comparison with the stdlib loop like any failure (on
    virtual time, one that passes on real time is a finding of virtual
    time's: `virtual_time_findings`).
    """
    found: dict[str, Finding] = {}
    deterministic: dict[str, Finding] = {}
    for path in sorted(folder.glob("*.json")) if folder.exists() else []:
        tape = json.loads(path.read_text())
        test_id = tape["scenario"]
        kind = tape.get("kind", "?")
        replay = f"pytest '{test_id}' --tideloop-tape={path}"
        if tape.get("virtual_time"):
            replay += " --tideloop-virtual-time"
        text = tape.get("failure") if kind == "deterministic" else tape.get("summary")
        lines = (text or tape.get("failure") or "").splitlines()
        finding = Finding(
            test_id, tape.get("found_by", "?"), kind, lines[0] if lines else "", replay
        )
        (deterministic if kind == "deterministic" else found).setdefault(test_id, finding)
    return list(found.values()), deterministic


def classify(peer: str, finding: Finding, findings: list[Finding]) -> tuple[str, str] | None:
    """*finding*'s class and why: its `REVIEWED` entry; or, for one of kind
    ``collateral`` (it passes alone, on real and on virtual time) in a run
    that has a finding of another kind too (what left it something behind:
    a subprocess test's pipes, collected during a later test, in whichever
    test the collector ran), "collateral" without one; else None."""
    entry = REVIEWED.get((peer, finding.test_id))
    if entry is not None:
        return entry
    if finding.kind == "collateral" and any(f.kind != "collateral" for f in findings):
        return ("collateral", "it passes alone; the run had an earlier finding")
    return None


def review(peer: str, findings: list[Finding]) -> list[str]:
    """The problems with a peer's findings: each one not reviewed."""
    problems = []
    for finding in findings:
        entry = classify(peer, finding, findings)
        if entry is None:
            problems.append(
                f"{finding.test_id}: not reviewed ({finding.kind}, {finding.found_by}): "
                f"{finding.summary}"
            )
        elif entry[0] not in CLASSES:
            problems.append(f"{finding.test_id}: class {entry[0]!r} is not one of {CLASSES}")
    return problems


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
    marks = json.dumps(thresholds(peer.name))
    return {**os.environ, **dict(peer.env), "PYTHONPATH": path, "TIDELOOP_PEER_THRESHOLDS": marks}


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


#: A test's outcome on tideloop when exploration found it failing (it is
#: reviewed, not compared: unperturbed, it passes).
FINDING = "finding"


def compare(peer: Peer, stdlib: dict[str, str], tide: dict[str, str]) -> list[str]:
    regressions = []
    for test_id, outcome in sorted(stdlib.items()):
        lost = outcome == "passed" and tide.get(test_id) not in ("passed", FINDING)
        if lost and (peer.name, test_id) not in KNOWN:
            regressions.append(f"{test_id}: {tide.get(test_id, 'not run')}")
    return regressions


def tape_dir(tag: str, peer: Peer) -> Path:
    """Where the explored run's tapes go (emptied before each run)."""
    return CACHE / "tapes" / tag / peer.name


def explore_options(args: argparse.Namespace, tag: str, peer: Peer) -> list[str]:
    """The tideloop run's exploration options (none without ``--explore``)."""
    if not args.explore:
        return []
    tapes = tape_dir(tag, peer)
    if tapes.exists():
        shutil.rmtree(tapes)  # the findings are this run's tapes
    tapes.mkdir(parents=True)
    options = [
        f"--tideloop-seeds={args.explore}",
        f"--tideloop-seeds-budget={args.explore_budget}",
        f"--tideloop-tape-dir={tapes}",
    ]
    if args.explore_virtual_time:
        options.append("--tideloop-virtual-time")
    return options


def explore(
    peer: Peer,
    place: Place,
    args: argparse.Namespace,
    tide: dict[str, str],
    *,
    extra: list[str],
    explored: list[str],
    unperturbed: dict[str, Finding],
) -> list[Finding]:
    """The findings: the explored run's tapes, then the seeded whole runs'.

    A test a finding names has its outcome set to `FINDING` in ``tide``;
    the tests whose tapes fail unperturbed go in *unperturbed*.
    """
    findings, deterministic = tape_findings(tape_dir(place.tag, peer))
    for finding in findings:
        tide[finding.test_id] = FINDING
    unperturbed.update(deterministic)
    virtual = ["--tideloop-virtual-time"] if args.explore_virtual_time else []
    for seed in range(1, args.explore_runs + 1):
        fresh = Place(place.venv, source(peer, sdist(peer, args.python), place.tag), place.tag)
        seeded_args = [*extra, *virtual, f"--tideloop-seed={seed}"]
        seeded, _, _ = run_suite(peer, fresh, f"tideloop-seed{seed}", args.jobs, seeded_args)
        new = sorted(
            test_id
            for test_id, outcome in seeded.items()
            if outcome in ("failed", "error") and tide.get(test_id) == "passed"
        )
        if not new:
            continue
        # Alone, under the same seed: a failure the whole run's load made
        # (a subprocess's timeout) passes here, and is not a finding.
        fresh = Place(place.venv, source(peer, sdist(peer, args.python), place.tag), place.tag)
        alone, _, _ = run_suite(peer, fresh, f"tideloop-seed{seed}-alone", 1, seeded_args, only=new)
        for test_id in new:
            if alone.get(test_id) not in ("failed", "error"):
                log(f"{peer.name}: under seed {seed}, {test_id} failed in the whole run, not alone")
                continue
            replay = f"pytest '{test_id}' {' '.join(virtual)} --tideloop-seed={seed}".replace(
                "  ", " "
            )
            findings.append(Finding(test_id, f"whole run, seed {seed}", "seed", "", replay))
            tide[test_id] = FINDING
    return findings


def virtual_time_findings(
    peer: Peer,
    place: Place,
    regressions: list[str],
    unperturbed: dict[str, Finding],
    *,
    extra: list[str],
) -> list[Finding]:
    """The tests that fail unperturbed on virtual time and pass on real time.

    Of *regressions* (they pass on the stdlib loop), those whose tape says
    the unperturbed schedule fails: each is run again alone on real time
    (without the exploration's options). One that passes there is a finding
    of virtual time's (a real duration the test depends on, or a false
    alarm), reviewed like the others, not taken for a flaky test; unless it
    also passes alone on virtual time: then it failed for what an earlier
    test of the run left behind (a finding's child pipes, collected in it),
    and its kind says so (``collateral``).
    """
    ids = [line.split(": ")[0] for line in regressions]
    ids = [test_id for test_id in ids if test_id in unperturbed]
    if not ids:
        return []
    real, _, _ = run_suite(peer, place, "tideloop-real-time", 1, extra, only=ids)
    ids = [test_id for test_id in ids if real.get(test_id) == "passed"]
    if not ids:
        return []
    virtual = [*extra, "--tideloop-virtual-time"]
    alone, _, _ = run_suite(peer, place, "tideloop-virtual-alone", 1, virtual, only=ids)
    return [
        dataclasses.replace(
            unperturbed[test_id],
            found_by="unperturbed",
            kind="collateral" if alone.get(test_id) == "passed" else "virtual time",
        )
        for test_id in ids
    ]


def finding_rows(peer: Peer, findings: list[Finding], stdlib: dict[str, str]) -> list[str]:
    rows = []
    for finding in findings:
        entry = classify(peer.name, finding, findings)
        reviewed = entry[0] if entry else "NOT REVIEWED"
        rows.append(
            f"| {peer.name} | `{finding.test_id}` | {finding.found_by} | {finding.kind} "
            f"| {stdlib.get(finding.test_id, 'not run')} | {reviewed} |"
        )
    return rows


def save_findings(peer: Peer, tag: str, findings: list[Finding], stdlib: dict[str, str]) -> None:
    """``.peers/results/<interpreter>/<peer>-explore.json``: the findings, for a later look."""
    results = CACHE / "results" / tag
    results.mkdir(parents=True, exist_ok=True)
    data = [
        {
            **dataclasses.asdict(finding),
            "stdlib": stdlib.get(finding.test_id, "not run"),
            "reviewed": classify(peer.name, finding, findings),
        }
        for finding in findings
    ]
    (results / f"{peer.name}-explore.json").write_text(json.dumps(data, indent=2) + "\n")


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
    parser.add_argument(
        "--explore",
        type=int,
        default=0,
        metavar="N",
        help="explore each async test under N schedules on tideloop (--tideloop-seeds=N)",
    )
    parser.add_argument(
        "--explore-runs",
        type=int,
        default=0,
        metavar="K",
        help="and run the whole suite K times more, under seeds 1..K (sync tests too)",
    )
    parser.add_argument(
        "--explore-budget",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="real time a test's exploration may take (default 20)",
    )
    parser.add_argument(
        "--explore-virtual-time",
        action="store_true",
        help="explore on virtual time (--tideloop-virtual-time)",
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
    explored_rows: list[str] = []
    for name in names:
        peer = PEERS[name]
        src = source(peer, sdist(peer, args.python), tag)
        venv = environment(peer, args.python, tag, src)
        place = Place(venv, src, tag)
        explored = explore_options(args, tag, peer)
        tide, tide_loops, t2 = run_suite(peer, place, "tideloop", args.jobs, extra + explored)
        findings: list[Finding] = []
        unperturbed: dict[str, Finding] = {}
        if args.explore:
            findings = explore(
                peer, place, args, tide, extra=extra, explored=explored, unperturbed=unperturbed
            )
        stdlib, stdlib_loops, t1, place = stdlib_side(
            peer, place, args.python, tide, jobs=args.jobs, extra=extra, both=args.both
        )
        regressions = compare(peer, stdlib, tide)
        if args.explore_virtual_time:
            for finding in virtual_time_findings(
                peer, place, regressions, unperturbed, extra=extra
            ):
                findings.append(finding)
                tide[finding.test_id] = FINDING
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
            # On the run's clock: a sync test (no tape) that fails on virtual
            # time every time is no flaky one.
            clock = ["--tideloop-virtual-time"] if args.explore_virtual_time else []
            again, _, _ = run_suite(peer, place, label, 1, [*extra, *clock], only=ids)
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
        if args.explore:
            explored_rows.extend(finding_rows(peer, findings, stdlib))
            save_findings(peer, tag, findings, stdlib)
            problems = review(peer.name, findings)
            if problems:
                failed = True
                log(f"{peer.name}: {len(problems)} findings of the exploration need a review:")
                for line in problems:
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
    if args.explore:
        print()
        print(
            f"Exploration: {args.explore} schedules a test, {args.explore_runs} seeded whole runs"
        )
        print("| suite | test | found by | kind | on the stdlib loop | class (REVIEWED) |")
        print("|---|---|---|---|---|---|")
        for row in explored_rows:
            print(row)
        if not explored_rows:
            print("| (none) | | | | | |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
