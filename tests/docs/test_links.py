"""docs/hooks.py: links made absolute for the package index and the site; broken ones found."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from blocks import ROOT, load_hooks

REPO = "https://github.com/tideloop/tideloop"


hooks = load_hooks()


def test_relative_links_become_github_urls() -> None:
    text = textwrap.dedent(
        """
        See [`tests/divergences.py`](tests/divergences.py), [the docs](docs/),
        [a section](docs/testing.md#the-pytest-plugin) and
        ![a chart](bench/results/2026-11-27-soak.png "soak").
        [ref]: CHANGELOG.md
        Unchanged: [here](#status), [web](https://example.org/x), [mail](mailto:a@b.c),
        `[in code](x.md)` and

        ```md
        [in a fence](docs/)
        ```
        """
    )
    out = hooks.absolute_links(text, "README.md")
    assert f"[`tests/divergences.py`]({REPO}/blob/main/tests/divergences.py)" in out
    assert f"[the docs]({REPO}/tree/main/docs)" in out
    assert f"[a section]({REPO}/blob/main/docs/testing.md#the-pytest-plugin)" in out
    raw = "https://raw.githubusercontent.com/tideloop/tideloop/main"
    assert f'![a chart]({raw}/bench/results/2026-11-27-soak.png "soak")' in out
    assert f"[ref]: {REPO}/blob/main/CHANGELOG.md" in out
    for kept in (
        "[here](#status)",
        "[web](https://example.org/x)",
        "[mail](mailto:a@b.c)",
        "`[in code](x.md)`",
        "[in a fence](docs/)",
    ):
        assert kept in out, kept


def test_links_resolve_from_the_pages_directory() -> None:
    out = hooks.absolute_links(
        "[d](../../tests/divergences.py) [p](../testing.md)", "docs/how-to/x.md"
    )
    assert f"[d]({REPO}/blob/main/tests/divergences.py)" in out
    assert f"[p]({REPO}/blob/main/docs/testing.md)" in out
    on_site = hooks.absolute_links(
        "[d](../../tests/divergences.py) [p](../testing.md)",
        "docs/how-to/x.md",
        keep=lambda path: path.startswith("docs/"),
    )
    assert "[p](../testing.md)" in on_site and f"{REPO}/blob/main/tests/" in on_site


def test_missing_targets_are_found() -> None:
    text = "[ok](README.md) [gone](nope.md) [outside](../x) [anchor](#a) [web](https://x.y)"
    assert hooks.missing_targets(text, "README.md") == ["nope.md", "../x"]


@pytest.mark.parametrize(
    "page",
    [
        "README.md",
        "CHANGELOG.md",
        *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")),
    ],
)
def test_no_page_links_a_missing_file(page: str) -> None:
    assert hooks.missing_targets((ROOT / page).read_text(), page) == []


def test_the_site_hook_rewrites_links_out_of_docs_and_warns_on_broken_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    page = SimpleNamespace(file=SimpleNamespace(src_uri="how-to/x.md"))
    config = {"docs_dir": str(ROOT / "docs")}
    out = hooks.on_page_markdown(
        "[d](../../tests/divergences.py) [p](../testing.md) [b](../../nope.py)", page, config, None
    )
    assert f"[d]({REPO}/blob/main/tests/divergences.py)" in out
    assert "[p](../testing.md)" in out
    assert "'../../nope.py', which is not in the repository" in caplog.text


def test_a_page_the_nav_forgets_joins_in_depth(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("index.md", "testing.md", "findings.md"):
        (docs / name).write_text("# x\n")
    nav = [{"Home": "index.md"}, {"In depth": [{"Testing": "testing.md"}]}]
    config = hooks.on_config({"nav": nav, "docs_dir": str(docs)})
    assert config["nav"][1] == {"In depth": [{"Testing": "testing.md"}, "findings.md"]}
