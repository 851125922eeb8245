"""OpenTelemetry metrics for tideloop loops: ``tideloop.otel.instrument()``.

Layer: top. Needs ``opentelemetry-api`` (the ``otel`` extra:
``pip install 'tideloop[otel]'``); the SDK, or any other implementation of
the API, is the application's choice::

    import tideloop.otel
    tideloop.otel.instrument()                  # every tideloop loop made from now on
    tideloop.otel.instrument(loop)              # one loop
    tideloop.otel.instrument(meter_provider=mp) # not the global provider

The instruments (meter ``tideloop``; every data point has the attribute
``tideloop.loop.id``, the loop's number in the process). Names follow
OpenTelemetry's naming rules for a system's own metrics
(``{system}.{area}.{name}``, the ``.utilization``/``.time``/``.count``
suffixes, units in UCUM), modelled on the conventions for Node.js's event
loop (``nodejs.eventloop.utilization``, ``nodejs.eventloop.time`` with a
state attribute, ``nodejs.eventloop.delay.*``):

- ``tideloop.eventloop.utilization`` (ObservableGauge, ``1``): the busy
  share of the time since the previous collection;
- ``tideloop.eventloop.time`` (ObservableCounter, ``s``): seconds run, by
  ``tideloop.eventloop.state`` (``active``, ``idle``);
- ``tideloop.eventloop.delay`` (Histogram, ``s``, buckets
  ``tideloop.LAG_BOUNDS``): how late timers fired;
- ``tideloop.eventloop.iterations`` (ObservableCounter, ``{iteration}``);
- ``tideloop.eventloop.callbacks`` (ObservableCounter, ``{callback}``):
  callbacks run;
- ``tideloop.eventloop.slow_callbacks`` (Counter, ``{callback}``): callbacks
  that ran the slow threshold or longer, by ``tideloop.task.name`` (the
  task's name, or the callback's description);
- ``tideloop.task.count`` (ObservableUpDownCounter, ``{task}``): tasks not
  done;
- ``tideloop.timer.count`` (ObservableUpDownCounter, ``{timer}``): timers
  pending;
- ``tideloop.fd.count`` (ObservableUpDownCounter, ``{fd}``): fds registered
  (readers plus writers, the loop's own included);
- ``tideloop.transport.count`` (ObservableUpDownCounter, ``{transport}``):
  open transports, by ``tideloop.transport.kind`` (``socket``,
  ``datagram``, ``pipe``, ``other``);
- ``tideloop.executor.job.count`` (ObservableUpDownCounter, ``{job}``):
  executor jobs submitted and not finished (queued or running).

How each is measured, and what it costs:

- Everything but the two below is read at collection time (in the
  exporter's thread) from ``loop.metrics()`` and the loop's components:
  nothing per callback, nothing on the loop's thread.
- ``tideloop.eventloop.delay``: the loop keeps its own histogram of timer
  lags (always on). At each collection, the timers that fired since the
  previous one are recorded into the OpenTelemetry histogram, each at the
  upper bound of its bucket (``max_lag`` for the last one, or when lower),
  so bucket counts are exact and the sum is an upper bound (the API has no
  way to hand over a histogram already aggregated, and a record per timer
  as it fires would put the SDK, about 5 us a record, on the loop's
  thread). At most `MAX_DELAY_RECORDS` records a collection per loop:
  beyond that each bucket's new count is scaled down in proportion, so the
  distribution stays right and the count is a lower bound.
- ``tideloop.eventloop.slow_callbacks``: a slow-callback hook (with the
  task's name) on each instrumented loop, so callbacks run on the timed
  path (one clock read each). A hook the program set before is kept and
  called after ours; one it sets after replaces ours.

Invariants: the instrumentation holds its loops weakly (a closed loop is
dropped at the next collection); `Instrumentation.uninstrument` restores
each loop's slow-callback hook and stops watching new loops.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Iterable
from typing import Any, Final

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from . import __version__
from ._core.metrics import LAG_BOUNDS, LoopMetrics, SlowCallback, SlowCallbackHook
from ._loop import NEW_LOOP_OBSERVERS, Loop

__all__ = ["MAX_DELAY_RECORDS", "Instrumentation", "instrument"]

#: The most timer lags recorded into the delay histogram per loop and
#: collection (about 5 us each with the SDK).
MAX_DELAY_RECORDS: Final = 10_000

#: The slow-callback threshold of an instrumented loop (seconds).
SLOW_THRESHOLD: Final = 0.1

_LOOP_ID: Final = "tideloop.loop.id"


def _transport_kind(transport: asyncio.BaseTransport) -> str:
    if isinstance(transport, asyncio.DatagramTransport):
        return "datagram"
    if isinstance(transport, (asyncio.ReadTransport, asyncio.WriteTransport)):
        extra = transport.get_extra_info("socket")
        if extra is not None:
            return "socket"
        if transport.get_extra_info("pipe") is not None:
            return "pipe"
    return "other"


class _Watched:
    """One instrumented loop: what the previous collection saw of it."""

    __slots__ = (
        "attributes",
        "hook",
        "last_busy",
        "last_lag_counts",
        "last_run",
        "loop",
        "previous_hook",
        "previous_threshold",
    )

    def __init__(self, loop: Loop, number: int) -> None:
        self.loop: weakref.ref[Loop] = weakref.ref(loop)
        self.attributes = {_LOOP_ID: str(number)}
        first = loop.metrics()
        self.last_busy = first.busy_time
        self.last_run = first.run_time
        self.last_lag_counts = first.lag_counts
        instruments = loop._instruments
        self.previous_hook: SlowCallbackHook | None = instruments.slow_hook
        self.previous_threshold = instruments.slow_hook_threshold
        #: The slow-callback hook set on the loop.
        self.hook: SlowCallbackHook | None = None


class Instrumentation:
    """The instruments `instrument` made; `uninstrument` stops them."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None,
        meter_provider: metrics.MeterProvider | None,
        slow_threshold: float,
    ) -> None:
        if loop is not None and not isinstance(loop, Loop):
            raise TypeError(f"a tideloop loop is expected, got {loop!r}")
        if slow_threshold < 0:
            raise ValueError(f"slow_threshold must be >= 0, got {slow_threshold!r}")
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        self.meter = provider.get_meter("tideloop", __version__)
        self.slow_threshold = float(slow_threshold)
        self._lock = threading.Lock()
        self._loops: list[_Watched] = []
        self._numbers = 0
        self._closed = False
        meter = self.meter
        self.delay = _histogram(meter)
        self.slow = meter.create_counter(
            "tideloop.eventloop.slow_callbacks",
            unit="{callback}",
            description="Callbacks that ran the slow-callback threshold or longer",
        )
        meter.create_observable_gauge(
            "tideloop.eventloop.utilization",
            callbacks=[self._utilization],
            unit="1",
            description="Share of the time since the previous collection the loop was busy",
        )
        meter.create_observable_counter(
            "tideloop.eventloop.time",
            callbacks=[self._time],
            unit="s",
            description="Seconds the loop ran, busy (active) or blocked in a poll (idle)",
        )
        meter.create_observable_counter(
            "tideloop.eventloop.iterations",
            callbacks=[self._counter("iterations")],
            unit="{iteration}",
            description="Loop iterations",
        )
        meter.create_observable_counter(
            "tideloop.eventloop.callbacks",
            callbacks=[self._counter("callbacks")],
            unit="{callback}",
            description="Callbacks run",
        )
        meter.create_observable_up_down_counter(
            "tideloop.task.count",
            callbacks=[self._tasks],
            unit="{task}",
            description="Tasks of the loop not done yet",
        )
        meter.create_observable_up_down_counter(
            "tideloop.timer.count",
            callbacks=[self._counter("timers")],
            unit="{timer}",
            description="Timers pending",
        )
        meter.create_observable_up_down_counter(
            "tideloop.fd.count",
            callbacks=[self._counter("fds")],
            unit="{fd}",
            description="File descriptors registered with the loop (readers plus writers)",
        )
        meter.create_observable_up_down_counter(
            "tideloop.transport.count",
            callbacks=[self._transports],
            unit="{transport}",
            description="Open transports, by kind",
        )
        meter.create_observable_up_down_counter(
            "tideloop.executor.job.count",
            callbacks=[self._counter("executor_pending")],
            unit="{job}",
            description="Executor jobs submitted and not finished",
        )
        self._watching = loop is None
        if loop is None:
            NEW_LOOP_OBSERVERS.append(self.add)
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if isinstance(running, Loop):
                self.add(running)
        else:
            self.add(loop)

    # ------------------------------------------------------------------

    def add(self, loop: Loop) -> None:
        """Instrument one more loop (every loop made, when instrumenting all)."""
        with self._lock:
            if self._closed or any(w.loop() is loop for w in self._loops):
                return
            self._numbers += 1
            watched = _Watched(loop, self._numbers)
            self._loops.append(watched)
        previous = watched.previous_hook
        attributes = watched.attributes
        counter = self.slow

        def on_slow(slow: SlowCallback) -> None:
            counter.add(1, {**attributes, "tideloop.task.name": slow.name})
            if previous is not None and slow.duration >= watched.previous_threshold:
                previous(slow)

        threshold = self.slow_threshold
        if previous is not None:
            threshold = min(threshold, watched.previous_threshold)
        watched.hook = on_slow
        loop.set_slow_callback_hook(on_slow, threshold)

    def loops(self) -> list[Loop]:
        """The loops instrumented and still open."""
        with self._lock:
            watched = list(self._loops)
        return [loop for loop in (w.loop() for w in watched) if loop is not None]

    def uninstrument(self) -> None:
        """Stop: restore the loops' slow-callback hooks, stop watching new loops.
        The instruments stay registered with the meter but report nothing more."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            watched = list(self._loops)
            self._loops.clear()
        if self._watching and self.add in NEW_LOOP_OBSERVERS:
            NEW_LOOP_OBSERVERS.remove(self.add)
        for w in watched:
            loop = w.loop()
            if loop is None or loop.is_closed():
                continue
            if loop._instruments.slow_hook is w.hook:
                loop.set_slow_callback_hook(w.previous_hook, w.previous_threshold)

    # ------------------------------------------------------------------
    # Collection (the exporter's thread)

    def _snapshots(self) -> list[tuple[_Watched, Loop, LoopMetrics]]:
        with self._lock:
            watched = list(self._loops)
        found = []
        gone = []
        for w in watched:
            loop = w.loop()
            if loop is None or loop.is_closed():
                gone.append(w)
                continue
            found.append((w, loop, loop.metrics()))
        if gone:
            with self._lock:
                self._loops = [w for w in self._loops if w not in gone]
        return found

    def _utilization(self, _options: CallbackOptions) -> Iterable[Observation]:
        observations = []
        for w, _loop, m in self._snapshots():
            run = m.run_time - w.last_run
            busy = m.busy_time - w.last_busy
            w.last_run = m.run_time
            w.last_busy = m.busy_time
            self._record_delay(w, m)
            observations.append(Observation(busy / run if run > 0 else 0.0, w.attributes))
        return observations

    def _record_delay(self, w: _Watched, m: LoopMetrics) -> None:
        """The timers fired since the last collection, into the delay histogram."""
        new = [now - before for now, before in zip(m.lag_counts, w.last_lag_counts, strict=True)]
        w.last_lag_counts = m.lag_counts
        total = sum(new)
        if not total:
            return
        scale = min(1.0, MAX_DELAY_RECORDS / total)
        record = self.delay.record
        for i, count in enumerate(new):
            if not count:
                continue
            bound = LAG_BOUNDS[i] if i < len(LAG_BOUNDS) else m.max_lag
            value = min(bound, m.max_lag)
            n = count if scale == 1.0 else max(1, round(count * scale))
            for _ in range(n):
                record(value, w.attributes)

    def _time(self, _options: CallbackOptions) -> Iterable[Observation]:
        observations = []
        for w, _loop, m in self._snapshots():
            observations.append(
                Observation(m.busy_time, {**w.attributes, "tideloop.eventloop.state": "active"})
            )
            observations.append(
                Observation(m.idle_time, {**w.attributes, "tideloop.eventloop.state": "idle"})
            )
        return observations

    def _counter(self, field: str) -> Any:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(getattr(m, field), w.attributes) for w, _loop, m in self._snapshots()
            ]

        return observe

    def _tasks(self, _options: CallbackOptions) -> Iterable[Observation]:
        observations = []
        for w, loop, _m in self._snapshots():
            count = sum(1 for t in asyncio.all_tasks(loop) if not t.done())
            observations.append(Observation(count, w.attributes))
        return observations

    def _transports(self, _options: CallbackOptions) -> Iterable[Observation]:
        observations: list[Observation] = []
        for w, loop, _m in self._snapshots():
            counts = {"socket": 0, "datagram": 0, "pipe": 0, "other": 0}
            for transport in _open_transports(loop):
                counts[_transport_kind(transport)] += 1
            observations.extend(
                Observation(n, {**w.attributes, "tideloop.transport.kind": kind})
                for kind, n in counts.items()
            )
        return observations


def _open_transports(loop: Loop) -> list[asyncio.BaseTransport]:
    """The loop's transports that are not closing (any thread: a copy, retried)."""
    refs = loop._fds.transports
    for _ in range(5):
        try:
            found = list(refs.values())
            break
        except RuntimeError:  # changed during the copy: again
            continue
    else:
        return []
    unique = {id(t): t for t in found}
    return [t for t in unique.values() if not t.is_closing()]


def _histogram(meter: metrics.Meter) -> metrics.Histogram:
    name = "tideloop.eventloop.delay"
    unit = "s"
    description = "How late timers fired (seconds after their deadline)"
    try:
        return meter.create_histogram(
            name, unit=unit, description=description, explicit_bucket_boundaries_advisory=LAG_BOUNDS
        )
    except TypeError:  # an API from before bucket advice (< 1.23)
        return meter.create_histogram(name, unit=unit, description=description)


def instrument(
    loop: asyncio.AbstractEventLoop | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    *,
    slow_threshold: float = SLOW_THRESHOLD,
) -> Instrumentation:
    """Report *loop*'s metrics (None: every tideloop loop ``tideloop.new_event_loop``
    makes from now on, and the running one) through OpenTelemetry.

    *meter_provider*: None means the global one. *slow_threshold*: a callback
    running this long is counted in ``tideloop.eventloop.slow_callbacks``.
    Returns the `Instrumentation`; its ``uninstrument()`` stops it.
    """
    return Instrumentation(loop, meter_provider, slow_threshold)
