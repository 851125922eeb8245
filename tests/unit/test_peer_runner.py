"""The peer runner's exploration bookkeeping (``tests/peers/run.py``).

What a run of other projects' suites under exploration counts as a finding,
what it compares with the stdlib loop, and that every reviewed finding is
written up in ``docs/findings.md``. No loop runs here: the runner's own
logic, on tapes and outcomes made for the purpose.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest_plugins = ["pytester"]


def load_runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("peer_run", ROOT / "tests" / "peers" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("peer_run", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


run = load_runner()


def write_tape(folder: Path, name: str, scenario: str, kind: str, summary: str) -> None:
    tape = {
        "tideloop_tape": 1,
        "scenario": scenario,
        "found_by": "seed 4",
        "failure": "E   assert False",
        "kind": kind,
        "summary": summary,
    }
    (folder / f"{name}.json").write_text(json.dumps(tape))
    (folder / f"{name}.html").write_text("<html></html>")  # the timeline beside it


def test_a_deterministic_tape_is_a_plain_failure_and_others_are_findings(tmp_path: Path) -> None:
    write_tape(tmp_path, "a", "tests/t.py::test_a", "timing", "timing: needs a thread\nmore")
    write_tape(tmp_path, "b", "tests/t.py::test_b", "deterministic", "deterministic: ...")
    write_tape(tmp_path, "c", "tests/t.py::test_c", "ordering", "ordering: two tasks")
    findings, deterministic = run.tape_findings(tmp_path)
    assert [f.test_id for f in findings] == ["tests/t.py::test_a", "tests/t.py::test_c"]
    assert set(deterministic) == {"tests/t.py::test_b"}
    assert deterministic["tests/t.py::test_b"].summary == "E   assert False"  # its failure
    first = findings[0]
    assert (first.kind, first.found_by) == ("timing", "seed 4")
    assert first.summary == "timing: needs a thread"  # its first line
    assert first.replay == f"pytest 'tests/t.py::test_a' --tideloop-tape={tmp_path / 'a.json'}"


def test_a_test_taped_twice_is_one_finding(tmp_path: Path) -> None:
    # The plugin never overwrites a tape: a second run's is a.1.json.
    write_tape(tmp_path, "a", "tests/t.py::test_a", "timing", "timing: x")
    write_tape(tmp_path, "a.1", "tests/t.py::test_a", "timing", "timing: x")
    findings, _ = run.tape_findings(tmp_path)
    assert len(findings) == 1


def test_no_tape_folder_is_no_finding(tmp_path: Path) -> None:
    assert run.tape_findings(tmp_path / "absent") == ([], {})


def test_a_finding_is_not_a_regression_but_a_plain_failure_is() -> None:
    peer = run.PEERS["anyio"]
    stdlib = {"t::a": "passed", "t::b": "passed", "t::c": "failed"}
    tide = {"t::a": run.FINDING, "t::b": "failed", "t::c": "failed"}
    assert run.compare(peer, stdlib, tide) == ["t::b: failed"]


def test_an_unreviewed_finding_is_a_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    finding = run.Finding("t::a", "seed 3", "ordering", "ordering: x", "pytest 't::a'")
    problems = run.review("anyio", [finding])
    assert problems == ["t::a: not reviewed (ordering, seed 3): ordering: x"]
    monkeypatch.setitem(run.REVIEWED, ("anyio", "t::a"), ("timing assumption", "why"))
    assert run.review("anyio", [finding]) == []
    # A class outside the two (a "false alarm" is fixed, never listed).
    monkeypatch.setitem(run.REVIEWED, ("anyio", "t::a"), ("false alarm", "why"))
    assert run.review("anyio", [finding]) == [
        "t::a: class 'false alarm' is not one of "
        "('ordering race', 'timing assumption', 'collateral')"
    ]


def test_a_collateral_finding_is_classed_only_beside_another_finding() -> None:
    """It passes alone on both clocks: what an earlier finding left behind
    (collected in whichever test the collector ran) failed it."""
    leftover = run.Finding("t::z", "unperturbed", "collateral", "ResourceWarning", "")
    assert run.review("anyio", [leftover]) == [
        "t::z: not reviewed (collateral, unperturbed): ResourceWarning"
    ]
    cause = run.Finding("t::a", "seed 3", "timing", "timing: x", "")
    assert run.review("anyio", [cause, leftover]) == [
        "t::a: not reviewed (timing, seed 3): timing: x"
    ]
    assert run.classify("anyio", leftover, [cause, leftover]) == (
        "collateral",
        "it passes alone; the run had an earlier finding",
    )
    other = run.Finding("t::y", "unperturbed", "collateral", "ResourceWarning", "")
    assert run.classify("anyio", leftover, [other, leftover]) is None


def test_every_reviewed_finding_is_written_up() -> None:
    findings = (ROOT / "docs" / "findings.md").read_text()
    for (peer, test_id), (klass, why) in run.REVIEWED.items():
        assert peer in run.PEERS or peer == "tideloop"
        assert klass in run.CLASSES
        assert why
        # Named by its file and its function (parameters and classes aside).
        file, function = test_id.split("::")[0], test_id.split("[")[0].split("::")[-1]
        assert file in findings, f"docs/findings.md does not name {file} ({test_id})"
        assert function in findings, f"docs/findings.md does not name {function} ({test_id})"


def test_exploration_options_reach_the_tideloop_run_only(tmp_path: Path) -> None:
    args = run.argparse.Namespace(explore=5, explore_budget=7.0, explore_virtual_time=True)
    original = run.CACHE
    run.CACHE = tmp_path
    try:
        options = run.explore_options(args, "cpython3.11", run.PEERS["aioquic"])
    finally:
        run.CACHE = original
    tapes = tmp_path / "tapes" / "cpython3.11" / "aioquic"
    assert options == [
        "--tideloop-seeds=5",
        "--tideloop-seeds-budget=7.0",
        f"--tideloop-tape-dir={tapes}",
        "--tideloop-virtual-time",
    ]
    assert tapes.is_dir()
    none = run.argparse.Namespace(explore=0, explore_budget=20.0, explore_virtual_time=False)
    assert run.explore_options(none, "cpython3.11", run.PEERS["aioquic"]) == []


def test_every_threshold_is_written_up() -> None:
    findings = (ROOT / "docs" / "findings.md").read_text()
    for (peer, test), (seconds, why) in run.THRESHOLDS.items():
        assert peer in run.PEERS and seconds > 0 and why
        assert "[" not in test and test.count("::") >= 1  # a function, every parameter
        file, function = test.split("::")[0], test.split("::")[-1]
        assert file in findings and function in findings, test
    assert run.thresholds("aiohttp") == {
        test: seconds for (peer, test), (seconds, _) in run.THRESHOLDS.items() if peer == "aiohttp"
    }
    assert run.thresholds("aioquic") == {}


THRESHOLD_SUITE = """\
import asyncio
import pytest

def threshold():
    return getattr(asyncio.get_running_loop().clock, "autojump_threshold", None)

@pytest.mark.parametrize("n", [1, 2])
async def test_far_peer(n):
    return threshold()

async def test_near_peer():
    return threshold()
"""

CONFTEST = """\
import asyncio, json, os
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    loop = asyncio.new_event_loop()
    try:
        kwargs = {n: pyfuncitem.funcargs[n] for n in pyfuncitem._fixtureinfo.argnames}
        seen = loop.run_until_complete(pyfuncitem.obj(**kwargs))
    finally:
        loop.close()
    mark = pyfuncitem.get_closest_marker("tideloop")
    seen = [seen, None if mark is None else mark.kwargs]
    with open(os.environ["SEEN"], "a") as f:
        f.write(json.dumps([pyfuncitem.nodeid, seen]) + "\\n")
    return True
"""


@pytest.mark.parametrize("virtual", [True, False])
def test_the_check_plugin_gives_listed_tests_their_threshold_on_virtual_time(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, virtual: bool
) -> None:
    """As a user's ``@pytest.mark.tideloop(autojump_threshold=...)``: every
    parameter of a listed function, nothing else, and only on virtual time."""
    pytester.makepyfile(test_peer=THRESHOLD_SUITE)
    pytester.makeconftest(CONFTEST)
    seen = pytester.path / "seen.jsonl"
    monkeypatch.setenv("SEEN", str(seen))
    monkeypatch.setenv("TIDELOOP_PEER_THRESHOLDS", json.dumps({"test_peer.py::test_far_peer": 0.5}))
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests" / "peers"))
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    mode = ["--tideloop-virtual-time"] if virtual else ["--tideloop"]
    args = ["-p", "no:cacheprovider", "-p", "tideloop_peer_check", *mode, "-W", "ignore"]
    result = pytester.runpytest_subprocess(*args, timeout=120)
    result.assert_outcomes(passed=3)
    got = dict(json.loads(line) for line in seen.read_text().splitlines())
    far = [0.5, {"autojump_threshold": 0.5}]
    if virtual:
        assert got == {
            "test_peer.py::test_far_peer[1]": far,
            "test_peer.py::test_far_peer[2]": far,
            "test_peer.py::test_near_peer": [0.0, None],
        }
    else:  # real time: no virtual clock, and no mark
        assert got == {
            "test_peer.py::test_far_peer[1]": [None, None],
            "test_peer.py::test_far_peer[2]": [None, None],
            "test_peer.py::test_near_peer": [None, None],
        }
