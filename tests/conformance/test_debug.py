"""Debug mode: switches, checks and diagnostics."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time

import pytest

FACTORY_SNIPPET = {
    "asyncio": "import asyncio; loop = asyncio.SelectorEventLoop()",
    "tideloop": "import tideloop; loop = tideloop.new_event_loop()",
}


def test_set_get_debug(loop: asyncio.AbstractEventLoop) -> None:
    loop.set_debug(True)
    assert loop.get_debug()
    loop.set_debug(False)
    assert not loop.get_debug()


@pytest.mark.parametrize("impl", ["asyncio", "tideloop"])
@pytest.mark.parametrize(
    ("env", "flags", "expected"),
    [
        ({}, [], "False"),
        ({"PYTHONASYNCIODEBUG": "1"}, [], "True"),
        ({}, ["-X", "dev"], "True"),
        ({"PYTHONASYNCIODEBUG": "1"}, ["-E"], "False"),
    ],
)
def test_debug_from_environment(
    impl: str, env: dict[str, str], flags: list[str], expected: str
) -> None:
    code = FACTORY_SNIPPET[impl] + "; print(loop.get_debug()); loop.close()"
    clean = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONASYNCIODEBUG", "PYTHONDEVMODE")
    }
    out = subprocess.run(
        [sys.executable, *flags, "-c", code],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == expected


@pytest.mark.parametrize("method", ["call_soon", "call_later", "call_at", "call_soon_threadsafe"])
def test_debug_rejects_coroutine_callbacks(loop: asyncio.AbstractEventLoop, method: str) -> None:
    loop.set_debug(True)

    async def coro_func() -> None:
        pass

    def schedule(cb: object) -> asyncio.Handle:
        if method in ("call_later", "call_at"):
            return getattr(loop, method)(0, cb)  # type: ignore[no-any-return]
        return getattr(loop, method)(cb)  # type: ignore[no-any-return]

    # asyncio names call_at() for call_later() too (one shares the other's check).
    name = "call_at" if method == "call_later" else method
    with pytest.raises(TypeError, match=f"coroutines cannot be used with {name}\\(\\)"):
        schedule(coro_func)
    coro = coro_func()
    with pytest.raises(TypeError, match=f"coroutines cannot be used with {name}\\(\\)"):
        schedule(coro)
    coro.close()
    with pytest.raises(TypeError, match=f"a callable object was expected by {name}\\(\\), got 42"):
        schedule(42)


def test_debug_rejects_coroutine_in_run_in_executor(loop: asyncio.AbstractEventLoop) -> None:
    loop.set_debug(True)

    async def coro_func() -> None:
        pass

    with pytest.raises(TypeError, match="coroutines cannot be used with run_in_executor"):
        loop.run_in_executor(None, coro_func)


def test_debug_refuses_calls_from_other_threads(loop: asyncio.AbstractEventLoop) -> None:
    loop.set_debug(True)
    errors: list[BaseException] = []
    handles: list[asyncio.Handle] = []

    def other_thread() -> None:
        for call in (
            lambda: loop.call_soon(lambda: None),
            lambda: loop.call_later(1, lambda: None),
            lambda: loop.call_at(1, lambda: None),
        ):
            try:
                call()
            except RuntimeError as exc:
                errors.append(exc)
        # The thread-safe variant is allowed.
        handles.append(loop.call_soon_threadsafe(lambda: None))

    async def main() -> None:
        thread = threading.Thread(target=other_thread)
        thread.start()
        await asyncio.sleep(0.05)
        thread.join()

    loop.run_until_complete(main())
    assert len(handles) == 1
    assert len(errors) == 3
    for exc in errors:
        assert "Non-thread-safe operation invoked on an event loop other than the current one" in (
            str(exc)
        )


def test_non_debug_mode_does_not_check_threads(loop: asyncio.AbstractEventLoop) -> None:
    loop.set_debug(False)
    handles: list[asyncio.Handle] = []

    async def main() -> None:
        thread = threading.Thread(target=lambda: handles.append(loop.call_soon(lambda: None)))
        thread.start()
        thread.join()
        await asyncio.sleep(0)

    loop.run_until_complete(main())
    assert len(handles) == 1


def test_slow_callback_is_logged(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    loop.set_debug(True)
    loop.slow_callback_duration = 0.01

    def slow() -> None:
        time.sleep(0.03)

    loop.call_soon(slow)
    loop.call_soon(loop.stop)
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.run_forever()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        m.startswith("Executing <Handle ") and ".slow() at " in m and m.endswith(" seconds")
        for m in warnings
    ), warnings


def test_slow_task_step_names_the_task(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    loop.set_debug(True)
    loop.slow_callback_duration = 0.01

    async def slow_task() -> None:
        time.sleep(0.03)

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.run_until_complete(loop.create_task(slow_task(), name="the-slow-one"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith("Executing <Task") and "the-slow-one" in m for m in warnings), warnings


def test_debug_handles_record_source_traceback(loop: asyncio.AbstractEventLoop) -> None:
    loop.set_debug(True)
    this_file = __file__

    def where(handle: asyncio.Handle) -> tuple[str, str]:
        frame = handle._source_traceback[-1]  # type: ignore[attr-defined]
        return frame.filename, frame.name

    here = (this_file, "test_debug_handles_record_source_traceback")
    h1 = loop.call_soon(lambda: None)
    h2 = loop.call_later(10, lambda: None)
    h3 = loop.call_at(loop.time() + 10, lambda: None)
    h4 = loop.call_soon_threadsafe(lambda: None)
    for handle in (h1, h2, h3, h4):
        assert where(handle) == here
        assert f"created at {this_file}:" in repr(handle)
        handle.cancel()


@pytest.mark.loop_errors
def test_debug_exception_log_includes_creation_site(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    loop.set_debug(True)

    def fails() -> None:
        raise ValueError("x")

    loop.call_soon(fails)
    loop.call_soon(loop.stop)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.run_forever()
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(messages) == 1
    assert "Object created at (most recent call last):" in messages[0]
    assert "test_debug_exception_log_includes_creation_site" in messages[0]


def test_debug_mode_enables_coroutine_origin_tracking(loop: asyncio.AbstractEventLoop) -> None:
    before = sys.get_coroutine_origin_tracking_depth()
    loop.set_debug(True)
    depths: list[int] = []

    async def main() -> None:
        depths.append(sys.get_coroutine_origin_tracking_depth())

    loop.run_until_complete(main())
    assert depths and depths[0] > 0
    assert sys.get_coroutine_origin_tracking_depth() == before


def test_set_debug_while_running(loop: asyncio.AbstractEventLoop) -> None:
    depths: list[int] = []

    async def main() -> None:
        loop.set_debug(True)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        depths.append(sys.get_coroutine_origin_tracking_depth())
        loop.set_debug(False)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        depths.append(sys.get_coroutine_origin_tracking_depth())

    loop.set_debug(False)
    loop.run_until_complete(main())
    assert depths[0] > 0
    assert depths[1] == 0
