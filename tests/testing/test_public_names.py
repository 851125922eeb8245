"""What a test sees fail is named as it is imported: ``tideloop.testing.Deadlock``.

The exceptions (and the warning) of ``tideloop.testing`` are public there,
and print, pickle and compare by that name, not by the private module that
defines them.
"""

from __future__ import annotations

import asyncio
import pickle
import traceback

import pytest

from tideloop import testing

PUBLIC = [
    testing.Deadlock,
    testing.PropertyViolation,
    testing.NondeterminismError,
    testing.RunTimeout,
    testing.VirtualTimeWarning,
]


@pytest.mark.parametrize("cls", PUBLIC, ids=lambda c: c.__name__)
def test_public_at_tideloop_testing(cls: type[BaseException]) -> None:
    assert cls.__module__ == "tideloop.testing"
    assert cls.__name__ in testing.__all__
    assert getattr(testing, cls.__name__) is cls
    exc = cls("boom")
    text = "".join(traceback.format_exception_only(exc))
    assert text == f"tideloop.testing.{cls.__name__}: boom\n"
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is cls and again.args == ("boom",)


def test_a_real_deadlock_prints_its_public_name() -> None:
    async def main() -> None:
        await asyncio.Event().wait()  # nothing can ever set it

    with pytest.raises(testing.Deadlock) as info:
        testing.run(main(), virtual_time=True)
    printed = "".join(traceback.format_exception(info.value))
    assert "tideloop.testing.Deadlock: deadlock at virtual time" in printed
    assert "_deadlock.Deadlock" not in printed
