"""The documentation site, built and read in a real browser (headless chromium).

Needs the ``docs`` extra (mkdocs, mkdocstrings, playwright) and Debian's
chromium; without them the tests skip, unless ``TIDELOOP_REQUIRE_DOCS=1``
(CI's 3.11 docs step), where they fail. The site is built once with
``mkdocs build --strict`` and served from 127.0.0.1 on a free port; every
page loads with no console error, no script error and no request outside
the site, shows its title, and its navigation reaches every other page;
the search finds what the pages say.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from needs import chromium, missing

from blocks import ROOT


def need(what: str, present: bool) -> None:
    if not present:
        missing(f"the docs site tests need {what}", "TIDELOOP_REQUIRE_DOCS")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The built site, served on 127.0.0.1: its base URL."""
    need("mkdocs (the docs extra)", importlib.util.find_spec("mkdocs") is not None)
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=120,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    handler = functools.partial(QuietHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        shutil.rmtree(out, ignore_errors=True)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium("TIDELOOP_REQUIRE_DOCS", "the docs site tests") as browser:
        yield browser


def pages(root: Path = ROOT / "docs") -> list[str]:
    """Every page's path on the site, from the Markdown files."""
    out = []
    for md in sorted(root.rglob("*.md")):
        rel = md.relative_to(root).with_suffix("").as_posix()
        out.append("" if rel == "index" else rel.removesuffix("/index") + "/")
    return out


class Visit:
    """A page loaded in the browser, with what went wrong while it loaded; closed at the
    end of its ``with`` block."""

    def __init__(self, browser: Any, base: str, path: str) -> None:
        self.page = browser.new_page()
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on(
            "request",
            lambda r: (
                None if r.url.startswith((base, "data:", "blob:")) else self.outside.append(r.url)
            ),
        )
        response = self.page.goto(base + path)
        assert response is not None and response.status == 200, path
        self.page.wait_for_load_state("networkidle")

    def __enter__(self) -> Visit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.page.close()


@pytest.mark.parametrize("path", pages())
def test_every_page_loads_cleanly(site: str, browser: Any, path: str) -> None:
    with Visit(browser, site, path) as visit:
        assert visit.errors == [], visit.errors
        assert visit.outside == [], f"{path} fetched from outside the site: {visit.outside}"
        title = visit.page.locator("article h1").first.inner_text()
        assert title.strip(), path
        # The navigation names every page of the site.
        hrefs = visit.page.eval_on_selector_all(
            "nav.md-nav--primary a.md-nav__link[href]", "els => els.map(e => e.href)"
        )
        reached = {h.removeprefix(site).split("#")[0] for h in hrefs if h.startswith(site)}
        assert set(pages()) <= reached, set(pages()) - reached


def test_the_reference_shows_the_api_from_the_docstrings(site: str, browser: Any) -> None:
    with Visit(browser, site, "reference/tideloop/") as visit:
        text = visit.page.locator("article").inner_text()
        for name in ("tideloop.run", "tideloop.new_event_loop", "tideloop.Loop", "metrics"):
            assert name in text, name
        assert "A consistent snapshot of the loop's metrics" in text  # Loop.metrics' docstring
    with Visit(browser, site, "reference/testing/") as visit:
        text = visit.page.locator("article").inner_text()
        for name in ("SimNetwork", "explore", "VirtualClock", "Deadlock", "replay"):
            assert name in text, name


def test_the_search_finds_what_the_pages_say(site: str, browser: Any) -> None:
    with Visit(browser, site, "") as visit:
        page = visit.page
        page.keyboard.press("s")  # Material's shortcut: open the search
        page.keyboard.type("loop_factory")
        page.wait_for_selector(".md-search-result__item", timeout=15_000)
        hrefs = page.eval_on_selector_all(
            ".md-search-result__item a", "els => els.map(e => e.href)"
        )
        assert any(re.search(r"/(quickstart|how-to/uvloop)/", h) for h in hrefs), hrefs
        assert visit.errors == []


def test_code_blocks_have_a_copy_button_and_file_titles(site: str, browser: Any) -> None:
    with Visit(browser, site, "quickstart/") as visit:
        page = visit.page
        assert page.locator("button.md-code__button").count() >= 5
        titles = page.locator(".highlight .filename").all_inner_texts()
        assert visit.errors == []
        assert {"hello.py", "pyproject.toml", "test_app.py"} <= set(titles), titles
