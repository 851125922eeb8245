"""What a test needs from the machine, and the headless browser.

Not a test module. A test that needs something outside Python (a server
binary, tmux, the docs extra, Debian's chromium) and does not find it
calls `missing`: it skips, so that a developer's machine without the tool
runs everything else, except where the variable that CI sets says the
thing is required there (``TIDELOOP_REQUIRE_REDIS=1``...): then it fails,
and a CI machine that lost the tool cannot pass by skipping.

`chromium` opens Debian's chromium (``/usr/bin/chromium``, no browser of
playwright's own) headless through playwright's sync API, with the
switches every browser test uses: no sandbox (tests may run as root), no
GPU, no traffic of the browser's own (component updates, sync, background
networking), so a page's requests are only its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def missing(message: str, required_by: str) -> NoReturn:
    """Skip the test for *message*, or fail it where the variable *required_by* is 1."""
    __tracebackhide__ = True  # the skip's location is the caller's line, not this one
    if os.environ.get(required_by) == "1":
        pytest.fail(f"{message} ({required_by}=1: required here)")
    pytest.skip(message)


@contextlib.contextmanager
def chromium(required_by: str, who: str = "this test") -> Iterator[Any]:
    """Debian's chromium, headless, as a playwright ``Browser``; closed at the end.

    Without playwright or the browser, `missing` (with *required_by*): *who*
    names what needs them in the message. Playwright's sync API runs an
    event loop in this thread while the browser is open: make what needs
    a loop of your own first.
    """
    __tracebackhide__ = True
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing(f"{who} needs playwright (the test and docs extras install it)", required_by)
    if not (os.path.exists(CHROMIUM) and shutil.which(CHROMIUM)):
        missing(
            f"{who} needs Debian's chromium at {CHROMIUM} (apt-get install chromium; "
            ".ci/run installs it on the machine, not in the Debian root, whose "
            "Pythons run without a browser)",
            required_by,
        )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
