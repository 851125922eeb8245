"""``tideloop.otel``: OpenTelemetry instruments, read with the SDK's in-memory reader
while a real workload runs (a server and clients on loopback, timers, an executor
job, a callback that blocks the loop)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider  # the test extra has the SDK
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricsData

import tideloop
import tideloop.otel
from tideloop import LAG_BOUNDS
from tideloop._loop import NEW_LOOP_OBSERVERS


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    reader.provider = provider  # type: ignore[attr-defined]
    yield reader
    provider.shutdown()


def provider_of(reader: InMemoryMetricReader) -> MeterProvider:
    provider: MeterProvider = reader.provider  # type: ignore[attr-defined]
    return provider


def points(data: MetricsData, name: str) -> list[Any]:
    found = []
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            if scope.scope.name != "tideloop":
                continue
            for metric in scope.metrics:
                if metric.name == name:
                    found.extend(metric.data.data_points)
    return found


def unit_of(data: MetricsData, name: str) -> str:
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    return str(metric.unit)
    raise AssertionError(f"no metric {name}")


def value(data: MetricsData, name: str, **attributes: str) -> float:
    matching = [
        p.value
        for p in points(data, name)
        if all(p.attributes.get(k.replace("_", ".")) == v for k, v in attributes.items())
    ]
    assert len(matching) == 1, (name, attributes, points(data, name))
    return float(matching[0])


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while line := await reader.readline():
        writer.write(line)
        await writer.drain()
    writer.close()
    await writer.wait_closed()


def test_one_loop_under_a_real_workload(reader: InMemoryMetricReader) -> None:
    loop = tideloop.new_event_loop()
    inst = tideloop.otel.instrument(loop, provider_of(reader))
    seen: dict[str, MetricsData] = {}

    async def blocker() -> None:
        await asyncio.sleep(0)
        time.sleep(0.15)  # blocks the loop

    async def main() -> None:
        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        clients = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        for r, w in clients:
            w.write(b"ping\n")
            assert await r.readline() == b"ping\n"
        for _ in range(5):
            await asyncio.sleep(0.002)
        await asyncio.create_task(blocker(), name="blocker")
        # Collected from another thread while the loop runs, connections open
        # (the collecting job is an executor job itself).
        seen["during"] = await loop.run_in_executor(None, reader.get_metrics_data)
        for _, w in clients:
            w.close()
            await w.wait_closed()
        server.close()
        await server.wait_closed()

    try:
        loop.run_until_complete(main())
        loop.run_until_complete(loop.shutdown_default_executor())
        final = loop.metrics()
        seen["after"] = reader.get_metrics_data()
    finally:
        inst.uninstrument()
        loop.close()
    during, after = seen["during"], seen["after"]
    loop_id = {"tideloop.loop.id": "1"}
    # Gauges of the moment, while connections were open.
    assert value(during, "tideloop.transport.count", tideloop_transport_kind="socket") >= 6
    assert value(during, "tideloop.transport.count", tideloop_transport_kind="datagram") == 0
    assert value(during, "tideloop.fd.count") >= 7  # 6 sockets, the listener, the waker
    assert value(during, "tideloop.task.count") >= 4  # main and three handlers
    assert value(during, "tideloop.executor.job.count") >= 1
    assert value(after, "tideloop.transport.count", tideloop_transport_kind="socket") == 0
    assert value(after, "tideloop.task.count") == 0
    # The blocking task, by name.
    slow = points(after, "tideloop.eventloop.slow_callbacks")
    by_task = {p.attributes["tideloop.task.name"]: p.value for p in slow}
    assert by_task.get("blocker") == 1, by_task
    assert all(p.attributes["tideloop.loop.id"] == "1" for p in slow)
    # Time, utilisation, counts.
    active = value(after, "tideloop.eventloop.time", tideloop_eventloop_state="active")
    idle = value(after, "tideloop.eventloop.time", tideloop_eventloop_state="idle")
    assert active >= 0.15 and active + idle == pytest.approx(final.run_time, abs=0.05)
    assert 0 < value(during, "tideloop.eventloop.utilization") <= 1
    assert value(after, "tideloop.eventloop.iterations") >= final.iterations - 5
    assert value(after, "tideloop.eventloop.callbacks") >= 20
    # The delay histogram: every timer that fired, in the loop's own buckets.
    (during_hist,) = points(during, "tideloop.eventloop.delay")
    (hist,) = points(after, "tideloop.eventloop.delay")
    assert tuple(hist.explicit_bounds) == LAG_BOUNDS
    assert hist.count == sum(final.lag_counts) >= 5
    assert list(hist.bucket_counts) == list(final.lag_counts)
    assert during_hist.count <= hist.count
    assert dict(hist.attributes) == loop_id
    # Units as documented.
    assert unit_of(after, "tideloop.eventloop.delay") == "s"
    assert unit_of(after, "tideloop.eventloop.utilization") == "1"
    assert unit_of(after, "tideloop.task.count") == "{task}"


def test_every_loop_and_closed_loops_drop_out(reader: InMemoryMetricReader) -> None:
    inst = tideloop.otel.instrument(meter_provider=provider_of(reader))
    try:
        assert inst.add in NEW_LOOP_OBSERVERS

        async def main() -> None:
            await asyncio.sleep(0.001)

        tideloop.run(main())
        loop = tideloop.new_event_loop()
        loop.run_until_complete(main())
        data = reader.get_metrics_data()
        iterations = points(data, "tideloop.eventloop.iterations")
        ids = {p.attributes["tideloop.loop.id"] for p in iterations}
        assert ids == {"2"}  # the first loop is closed: it dropped out
        assert inst.loops() == [loop]
        loop.close()
    finally:
        inst.uninstrument()
    assert inst.add not in NEW_LOOP_OBSERVERS
    later = tideloop.new_event_loop()
    try:
        assert inst.loops() == []
    finally:
        later.close()


def test_the_running_loop_is_instrumented_when_called_inside_it(
    reader: InMemoryMetricReader,
) -> None:
    async def main() -> list[tideloop.Loop]:
        inst = tideloop.otel.instrument(meter_provider=provider_of(reader))
        try:
            return inst.loops()
        finally:
            inst.uninstrument()

    loop = tideloop.new_event_loop()
    try:
        assert loop.run_until_complete(main()) == [loop]
    finally:
        loop.close()


def test_a_programs_own_slow_hook_is_kept_and_restored(reader: InMemoryMetricReader) -> None:
    theirs: list[str] = []

    def hook(slow: tideloop.SlowCallback) -> None:
        theirs.append(slow.name)

    async def sleepy() -> None:
        time.sleep(0.06)

    async def main() -> None:
        await asyncio.create_task(sleepy(), name="sleepy")

    loop = tideloop.new_event_loop()
    try:
        loop.set_slow_callback_hook(hook, threshold=0.05)
        inst = tideloop.otel.instrument(loop, provider_of(reader), slow_threshold=0.2)
        loop.run_until_complete(main())
        data = reader.get_metrics_data()
        inst.uninstrument()
        assert loop._instruments.slow_hook is hook
        assert loop._instruments.slow_hook_threshold == 0.05
    finally:
        loop.close()
    assert theirs == ["sleepy"]
    # Counted at the lower of the two thresholds, as the hook it joined.
    slow = points(data, "tideloop.eventloop.slow_callbacks")
    assert {p.attributes["tideloop.task.name"] for p in slow} == {"sleepy"}


def test_many_timers_are_recorded_in_proportion(
    reader: InMemoryMetricReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tideloop.otel, "MAX_DELAY_RECORDS", 10)

    async def main() -> None:
        await asyncio.gather(*(asyncio.sleep(0.001) for _ in range(40)))

    loop = tideloop.new_event_loop()
    inst = tideloop.otel.instrument(loop, provider_of(reader))
    try:
        loop.run_until_complete(main())
        fired = sum(loop.metrics().lag_counts)
        (hist,) = points(reader.get_metrics_data(), "tideloop.eventloop.delay")
    finally:
        inst.uninstrument()
        loop.close()
    assert fired >= 40
    assert 1 <= hist.count <= 10 + len(LAG_BOUNDS)


def test_bad_arguments() -> None:
    stdlib = asyncio.SelectorEventLoop()
    try:
        with pytest.raises(TypeError, match="tideloop loop"):
            tideloop.otel.instrument(stdlib)
    finally:
        stdlib.close()
    with pytest.raises(ValueError, match="slow_threshold"):
        tideloop.otel.instrument(slow_threshold=-1)
