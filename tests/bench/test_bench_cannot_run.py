"""A loop that lacks what a workload needs is reported as ``cannot run``, with the reason.

rloop 0.5 has no Unix sockets and no TLS: its ``create_unix_server`` and
``create_server(ssl=...)`` raise ``NotImplementedError``. Such a case is a
``cannot_run`` result (not an error, not a crash of the suite, not a
missing row) that names what the workload needs and which function raised;
the run does not try that loop again for the case, and the table, the JSON
and the markdown show it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from bench_support import quick_config

from bench import _worker, api, harness, report, run
from bench.api import Primitive, Sample, Server
from bench.workloads import all_workloads, get

# -- what a workload needs --


def test_workloads_declare_what_they_need(capsys: pytest.CaptureFixture[str]) -> None:
    needs = {w.name: tuple(w.needs) for w in all_workloads() if w.needs}
    assert needs == {
        "subprocess_spawn": ("subprocess",),
        "udp_pingpong": ("udp",),
        "unix_echo": ("unix",),
        "tls_echo_protocol": ("tls",),
        "https_minimal": ("tls",),
    }
    assert run.main(["--list", "--only", "unix_echo,call_soon"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].endswith("call_soon throughput (batches of 1000)")
    assert listed[1].endswith("Unix-socket echo, asyncio.Protocol  (needs Unix sockets)")


async def _start(address: api.Address, params: api.Params) -> asyncio.AbstractServer:
    raise AssertionError("not started")


def test_a_unix_or_tls_server_must_say_it_needs_them() -> None:
    with pytest.raises(ValueError, match=r"needs \['unix'\]: say so in needs"):
        Server("u", "u", client="echo", family="unix", start=_start, full=[], quick=[])
    with pytest.raises(ValueError, match=r"needs \['tls'\]"):
        Server("t", "t", client="https", family="tcp", start=_start, full=[], quick=[])
    with pytest.raises(ValueError, match="unknown needs"):
        Server("x", "x", "echo", "tcp", _start, full=[], quick=[], needs=("quic",))
    assert api.needs_text(("tls", "udp")) == "TLS and UDP"


# -- the worker says why --


class NoUdp(asyncio.SelectorEventLoop):
    """A loop without UDP, after its first run (so the measured part is where it fails)."""

    calls = 0

    async def create_datagram_endpoint(self, *args: Any, **kwargs: Any) -> Any:
        NoUdp.calls += 1
        if NoUdp.calls > 1:
            raise NotImplementedError
        return None


async def use_udp(n: int) -> Sample:
    await asyncio.get_running_loop().create_datagram_endpoint(asyncio.DatagramProtocol)
    return Sample(n)


def test_a_primitive_the_loop_cannot_run_says_what_it_needs_and_what_raised(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = Primitive("fake", "fake", "ops", use_udp, quick_n=10, full_n=10, needs=("udp",))
    NoUdp.calls = 0
    monkeypatch.setattr(_worker.loops, "factory", lambda name: NoUdp)
    _worker.run_primitive(workload, "noudp", 10)
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out == {
        "status": "cannot_run",
        "reason": f"needs UDP: {__name__}.NoUdp.create_datagram_endpoint raises"
        " NotImplementedError",
    }
    assert NoUdp.calls == 2  # the warm-up run went through; the measured one raised


@pytest.mark.parametrize(
    ("workload", "params", "reason"),
    [
        (
            "unix_echo",
            {"size": 1024, "conns": 10},
            "needs Unix sockets: rloop.loop.RLoop.create_unix_server raises NotImplementedError",
        ),
        (
            "tls_echo_protocol",
            {"size": 1024, "conns": 100},
            "needs TLS: rloop.loop.RLoop.create_server raises NotImplementedError",
        ),
    ],
)
def test_rloop_cannot_run_unix_sockets_or_tls(
    workload: str, params: dict[str, int], reason: str, tmp_path: Path
) -> None:
    pytest.importorskip("rloop")
    if workload.startswith("tls") and shutil.which("openssl") is None:
        pytest.skip("the TLS server's certificate is made with the openssl command")
    # No load generator is started for a server that cannot start: none is needed.
    absent = tmp_path / "no-client"
    cfg = quick_config(_echo_client=absent, _tls_echo_client=absent)
    result = harness.run_case(get(workload), params, "rloop", cfg)
    assert result == {"status": "cannot_run", "reason": reason}


# -- the run reports it --


def test_a_run_reports_cannot_run_in_its_table_and_json_and_does_not_try_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tried: list[str] = []
    why = "needs UDP: rloop.loop.RLoop.create_datagram_endpoint raises NotImplementedError"

    def fake_case(workload: Any, params: Any, loop: str, cfg: Any) -> dict[str, Any]:
        tried.append(loop)
        if loop == "rloop":
            return {"status": "cannot_run", "reason": why}
        return harness.finish(1000, seconds=1.0, cpu_user=1.0, cpu_sys=0.0, cpu_wall=1.0, extra={})

    monkeypatch.setattr(harness, "run_case", fake_case)
    monkeypatch.setattr(run.machine, "background_cpu", lambda seconds=1.0: 0.0)
    # The run's workers are faked, so rloop need not be installed here: the
    # run must take it as importable (CI's test venvs do not have it).
    importable = run.loops.unavailable_reason
    monkeypatch.setattr(
        run.loops, "unavailable_reason", lambda name: None if name == "rloop" else importable(name)
    )
    out = tmp_path / "run.json"
    argv = ["--quick", "--only", "udp_pingpong", "--loops", "asyncio,rloop"]
    assert run.main([*argv, "--repeat", "3", "--no-charts", "--out", str(out)]) == 0
    assert tried.count("rloop") == 1 and tried.count("asyncio") == 3
    table = capsys.readouterr().out
    assert f"  rloop     cannot run: {why}" in table
    (case,) = json.loads(out.read_text())["cases"]
    assert case["summary"]["rloop"] == {"status": "cannot_run", "reason": why}
    assert [r["status"] for r in case["runs"] if r["loop"] == "rloop"] == ["cannot_run"]


def test_the_table_has_a_vs_rloop_column_when_rloop_ran() -> None:
    runs = [
        {"loop": loop, "status": "ok", "ops_per_s": ops, "cpu_pct": 100.0}
        for loop, ops in (("asyncio", 100.0), ("rloop", 400.0), ("tideloop", 200.0))
    ]
    case = {"id": "call_soon", "kind": "primitive", "unit": "callbacks"}
    with_rloop = report.table(
        [{**case, "summary": report.summarise(runs, ["asyncio", "rloop", "tideloop"])}],
        ["asyncio", "rloop", "tideloop"],
    )
    assert "vs rloop" in with_rloop.splitlines()[0]
    (tideloop,) = [ln for ln in with_rloop.splitlines() if ln.startswith("  tideloop")]
    assert tideloop.split()[-4:] == ["2.00x", "-", "0.50x", "-"]  # vs asyncio, uvloop, rloop
    without = report.table(
        [{**case, "summary": report.summarise(runs[::2], ["asyncio", "tideloop"])}],
        ["asyncio", "tideloop"],
    )
    assert "vs rloop" not in without
