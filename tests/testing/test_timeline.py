"""The timeline page, in a real headless browser, and its text twin.

tideloop.testing's own output (nothing of asyncio's to compare with). The
page a tape's timeline writes is loaded from a file in Debian's chromium,
driven by playwright (``executable_path=/usr/bin/chromium``; no browser of
playwright's own): it must load with no console error and request nothing
but itself, show the run's hosts and tasks as lanes, its deviations and its
failure, the details of a mark on hover, and zoom. Few and fast: two pages,
one browser.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_reports import recorded_sim_tape

from scenarios.races import two_clients_in_order
from tideloop import testing
from tideloop.testing import Tape
from tideloop.testing._timeline import render_html, render_text

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def race_tape() -> Tape:
    found = testing.explore(two_clients_in_order, schedules=50, name="races:two_clients_in_order")
    assert found.tape is not None and found.tape.timeline is not None
    return found.tape


@pytest.fixture(scope="module")
def sim_tape() -> Tape:
    base = recorded_sim_tape({})
    assert base.timeline is not None
    return base


def test_the_page_is_self_contained(race_tape: Tape) -> None:
    page = render_html(race_tape)
    # Nothing loaded from elsewhere: no src/href, no @import, no url() but a
    # fragment, no fetch of any kind.
    assert not re.search(r"\b(src|href)\s*=", page)
    assert "@import" not in page and "<link" not in page
    assert not re.search(r"url\((?!#)", page)
    for call in ("fetch(", "XMLHttpRequest", "WebSocket", "EventSource", "import("):
        assert call not in page
    # The data cannot close its <script>: a failure text with "</script>" in it.
    race_tape.failure = "AssertionError: </script><script>alert(1)</script>"
    try:
        assert "</script><script>alert(1)" not in render_html(race_tape)
    finally:
        race_tape.failure = "AssertionError"


def test_the_text_trace_speaks_the_same_terms(race_tape: Tape) -> None:
    text = render_text(race_tape)
    lines = text.splitlines()
    assert lines[2].startswith("ordering: ")
    (deviation,) = [line for line in lines if line.startswith("* ")]
    assert "read by task" in deviation and "reported 1 poll late" in deviation
    (failure,) = [line for line in lines if line.startswith("! ")]
    assert "fails: AssertionError" in failure and "scenarios/races.py:" in failure
    assert any("then waits at scenarios/races.py:" in line for line in lines)


@pytest.fixture(scope="module")
def browser(race_tape: Tape, sim_tape: Tape) -> Iterator[Any]:
    # The tapes are made first: playwright's sync API runs an event loop in
    # this thread while the browser is open.
    required = os.environ.get("TIDELOOP_REQUIRE_CHROMIUM") == "1"
    why = ""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        why = "playwright is not installed (the test extra installs it on CPython)"
    if not why and not (os.path.exists(CHROMIUM) and shutil.which(CHROMIUM)):
        why = (
            f"no {CHROMIUM}: Debian's chromium is installed by .ci/run on the machine, "
            "not in the Debian root (it runs the Pythons of its own, without a browser)"
        )
    if why:
        if required:
            pytest.fail(why + " (TIDELOOP_REQUIRE_CHROMIUM=1: required here)")
        pytest.skip(why)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def _open(browser: Any, path: Path) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    return page, errors, requests


def test_a_race_in_the_browser(browser: Any, race_tape: Tape, tmp_path: Path) -> None:
    path = race_tape.save_timeline(tmp_path / "race.html")
    page, errors, requests = _open(browser, path)
    try:
        assert requests == [path.as_uri()]
        # The verdict, the failure, the deviation in words.
        assert page.inner_text("#tl-verdict").startswith("ordering: ")
        assert "AssertionError" in page.inner_text("#tl-failure")
        (item,) = page.query_selector_all("#tl-devlist li")
        assert "read by task" in item.inner_text()
        # One lane per task: the server's handlers and the test itself.
        labels = [el.inner_text() for el in page.query_selector_all(".lane-label")]
        assert sum("_Server._handle" in label for label in labels) == 2, labels
        assert any("two_clients_in_order" in label for label in labels), labels
        # Steps, I/O, the deviation highlighted across the lanes, the failure line.
        for selector in (".ev-step", ".ev-io", ".ev-deferred", ".ev-deviation", ".devband"):
            assert page.query_selector(selector) is not None, selector
        assert "AssertionError" in page.text_content(".faillabel")
        # Details on hover.
        assert page.is_hidden("#tl-tip")
        page.hover(".ev-deviation")
        tip = page.inner_text("#tl-tip")
        assert page.is_visible("#tl-tip") and "deviation" in tip and "read by task" in tip
        page.hover(".ev-step")
        assert "step" in page.inner_text("#tl-tip") and "then waits at" in page.inner_text(
            "#tl-tip"
        )
        # Zoom: twice as wide, and back.
        width = float(page.get_attribute("#tl-svg", "width") or 0)
        page.click("#tl-zoom-in")
        assert float(page.get_attribute("#tl-svg", "width") or 0) > 1.8 * width - 30
        page.click("#tl-zoom-out")
        assert abs(float(page.get_attribute("#tl-svg", "width") or 0) - width) < 2
        # A deviation listed is a click away.
        item.click()
        assert page.query_selector(".devband.hot") is not None
        assert errors == []
    finally:
        page.close()


def test_hosts_and_messages_in_the_browser(browser: Any, sim_tape: Tape, tmp_path: Path) -> None:
    path = sim_tape.save_timeline(tmp_path / "sim.html")
    page, errors, requests = _open(browser, path)
    try:
        assert requests == [path.as_uri()]
        hosts = [el.inner_text() for el in page.query_selector_all(".lane-label.host")]
        assert {"host db", "host app0", "host app1"} <= set(hosts), hosts
        # Messages between hosts are arrows, ending at a mark on the receiving
        # host's lane; hovering it says where the message left.
        arrows = page.query_selector_all("line.arrow")
        assert len(arrows) >= 4
        seq = arrows[0].get_attribute("data-seq")
        page.hover(f'.ev-message[data-seq="{seq}"]')
        tip = page.inner_text("#tl-tip")
        assert "message" in tip and "sent at event #" in tip and " -> " in tip, tip
        assert "none: the unperturbed schedule" in page.inner_text("#tl-devlist")
        assert errors == []
    finally:
        page.close()
