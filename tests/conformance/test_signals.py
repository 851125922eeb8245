"""add_signal_handler / remove_signal_handler (Unix)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
from collections.abc import Iterator

import pytest

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="Unix signals")


@pytest.fixture(autouse=True)
def restore_signal_state() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT)}
    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)
    signal.set_wakeup_fd(wakeup)


def test_handler_runs_in_the_loop_with_args(loop: asyncio.AbstractEventLoop) -> None:
    calls: list[tuple[str, int, bool]] = []

    def handler(tag: str, n: int) -> None:
        calls.append((tag, n, loop.is_running()))
        loop.stop()

    loop.add_signal_handler(signal.SIGUSR1, handler, "usr1", 7)
    loop.call_soon(os.kill, os.getpid(), signal.SIGUSR1)
    loop.run_forever()
    assert calls == [("usr1", 7, True)]
    assert loop.remove_signal_handler(signal.SIGUSR1) is True


def test_signal_wakes_a_blocked_loop(loop: asyncio.AbstractEventLoop) -> None:
    calls: list[int] = []
    loop.add_signal_handler(signal.SIGUSR1, lambda: (calls.append(1), loop.stop()))
    timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1))
    timer.start()
    try:
        loop.run_forever()  # nothing scheduled: only the signal ends this
    finally:
        timer.join()
    assert calls == [1]
    loop.remove_signal_handler(signal.SIGUSR1)


def test_remove_restores_default_disposition(loop: asyncio.AbstractEventLoop) -> None:
    loop.add_signal_handler(signal.SIGUSR1, lambda: None)
    assert signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, signal.SIG_IGN)
    assert loop.remove_signal_handler(signal.SIGUSR1) is True
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    assert loop.remove_signal_handler(signal.SIGUSR1) is False


def test_remove_sigint_restores_default_int_handler(loop: asyncio.AbstractEventLoop) -> None:
    loop.add_signal_handler(signal.SIGINT, lambda: None)
    assert loop.remove_signal_handler(signal.SIGINT) is True
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_replacing_a_handler(loop: asyncio.AbstractEventLoop) -> None:
    calls: list[str] = []
    loop.add_signal_handler(signal.SIGUSR1, calls.append, "old")
    loop.add_signal_handler(signal.SIGUSR1, lambda: (calls.append("new"), loop.stop()))
    loop.call_soon(os.kill, os.getpid(), signal.SIGUSR1)
    loop.run_forever()
    assert calls == ["new"]
    loop.remove_signal_handler(signal.SIGUSR1)


def test_two_signals(loop: asyncio.AbstractEventLoop) -> None:
    calls: list[str] = []

    def done() -> bool:
        return len(calls) == 2

    def record(name: str) -> None:
        calls.append(name)
        if done():
            loop.stop()

    loop.add_signal_handler(signal.SIGUSR1, record, "usr1")
    loop.add_signal_handler(signal.SIGUSR2, record, "usr2")
    loop.call_soon(os.kill, os.getpid(), signal.SIGUSR1)
    loop.call_soon(os.kill, os.getpid(), signal.SIGUSR2)
    loop.run_forever()
    assert sorted(calls) == ["usr1", "usr2"]
    assert loop.remove_signal_handler(signal.SIGUSR1)
    assert loop.remove_signal_handler(signal.SIGUSR2)


def test_invalid_signals(loop: asyncio.AbstractEventLoop) -> None:
    with pytest.raises(TypeError, match="sig must be an int, not 'x'"):
        loop.add_signal_handler("x", lambda: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="invalid signal number 123456"):
        loop.add_signal_handler(123456, lambda: None)
    with pytest.raises(ValueError, match="invalid signal number -1"):
        loop.remove_signal_handler(-1)
    with pytest.raises(RuntimeError, match=f"sig {int(signal.SIGKILL)} cannot be caught"):
        loop.add_signal_handler(signal.SIGKILL, lambda: None)
    # A failed add leaves nothing installed.
    assert loop.remove_signal_handler(signal.SIGKILL) is False


def test_coroutine_callback_rejected(loop: asyncio.AbstractEventLoop) -> None:
    async def coro() -> None:
        pass

    with pytest.raises(TypeError, match="coroutines cannot be used with add_signal_handler"):
        loop.add_signal_handler(signal.SIGUSR1, coro)


def test_only_from_main_thread(loop: asyncio.AbstractEventLoop) -> None:
    errors: list[BaseException] = []

    def other() -> None:
        try:
            loop.add_signal_handler(signal.SIGUSR1, lambda: None)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert len(errors) == 1
    assert isinstance(errors[0], RuntimeError)
    assert "main thread" in str(errors[0])
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_add_after_close(loop: asyncio.AbstractEventLoop) -> None:
    loop.close()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.add_signal_handler(signal.SIGUSR1, lambda: None)


def test_close_removes_handlers(loop: asyncio.AbstractEventLoop) -> None:
    loop.add_signal_handler(signal.SIGUSR1, lambda: None)
    loop.close()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    current = signal.set_wakeup_fd(-1)
    assert current == -1


def test_handler_exception_goes_to_exception_handler(loop: asyncio.AbstractEventLoop) -> None:
    errors: list[BaseException] = []
    loop.set_exception_handler(lambda lp, ctx: (errors.append(ctx["exception"]), lp.stop()))

    def bad() -> None:
        raise ValueError("in signal handler")

    loop.add_signal_handler(signal.SIGUSR1, bad)
    loop.call_soon(os.kill, os.getpid(), signal.SIGUSR1)
    loop.run_forever()
    assert len(errors) == 1 and isinstance(errors[0], ValueError)
    loop.remove_signal_handler(signal.SIGUSR1)


@pytest.mark.divergence("wakeup-fd-restored")
def test_previous_wakeup_fd_is_restored(loop: asyncio.AbstractEventLoop) -> None:
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        signal.set_wakeup_fd(a.fileno())
        loop.add_signal_handler(signal.SIGUSR1, lambda: None)
        assert signal.set_wakeup_fd(signal.set_wakeup_fd(-1)) != a.fileno()
        loop.remove_signal_handler(signal.SIGUSR1)
        assert signal.set_wakeup_fd(-1) == a.fileno()
        # And on close.
        signal.set_wakeup_fd(a.fileno())
        loop.add_signal_handler(signal.SIGUSR2, lambda: None)
        loop.close()
        assert signal.set_wakeup_fd(-1) == a.fileno()
    finally:
        a.close()
        b.close()
