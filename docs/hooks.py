"""Links that leave the page's home: absolute GitHub URLs, for the package index and the site.

Not part of the package: build tooling, used twice.

- ``setup.py`` gives the package index README.md with every relative link
  made absolute (`absolute_links`): on PyPI a relative link has no
  repository to resolve against.
- MkDocs loads this file as a hook (``hooks:`` in mkdocs.yml): a page of
  docs/ that links a file outside docs/ (``../tests/divergences.py``, a
  benchmark's JSON) gets that file's GitHub URL, and a link to a file that
  does not exist in the repository is a warning, so ``mkdocs build
  --strict`` fails on it.

Invariants: only Markdown link and image targets change, never text inside
code (fenced blocks and inline code spans); a target with a scheme, an
anchor of the same page or an absolute path stays as it is. Files link to
``blob/BRANCH/...``, directories to ``tree/BRANCH/...``, images to the raw
file (a ``blob`` page is HTML, not an image). The repository's URL is the
``Repository`` entry of pyproject.toml's ``[project.urls]``.
"""

from __future__ import annotations

import logging
import posixpath
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BRANCH = "main"
IMAGE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg", ".gif", ".webp")

# A fence opens with 3+ backticks or tildes (up to 3 spaces of indent) and
# closes with the same character, at least as many.
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target "title") and ![alt](target); [id]: target definitions.
_INLINE = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>]*>|[^)\s]+)([^)]*)\)")
_DEFINITION = re.compile(r"^( {0,3}\[[^\]]+\]:\s*)(\S+)(.*)$")


def repository(root: Path = ROOT) -> str:
    """The repository's web address, from pyproject.toml."""
    with (root / "pyproject.toml").open("rb") as f:
        url: str = tomllib.load(f)["project"]["urls"]["Repository"]
    return url.rstrip("/")


def is_relative(target: str) -> bool:
    return not (
        not target
        or target.startswith(("#", "/", "mailto:"))
        or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target)
    )


def github_url(path: str, fragment: str, repo: str, *, image: bool, is_dir: bool) -> str:
    """The URL of *path* (relative to the repository's root) on GitHub."""
    if image:
        owner_name = repo.removeprefix("https://github.com/")
        return f"https://raw.githubusercontent.com/{owner_name}/{BRANCH}/{path}"
    kind = "tree" if is_dir else "blob"
    return f"{repo}/{kind}/{BRANCH}/{path}" + (f"#{fragment}" if fragment else "")


def rewrite_links(markdown: str, rewrite: Callable[[str, bool], str]) -> str:
    """*markdown* with each link target passed through ``rewrite(target, is_image)``.

    Fenced code blocks and inline code spans are left alone.
    """
    out: list[str] = []
    fence: str | None = None
    for line in markdown.splitlines(keepends=True):
        opener = _FENCE.match(line)
        if fence is not None:
            if opener and opener.group(1)[0] == fence[0] and len(opener.group(1)) >= len(fence):
                fence = None
            out.append(line)
            continue
        if opener:
            fence = opener.group(1)
            out.append(line)
            continue
        definition = _DEFINITION.match(line)
        if definition:
            head, target, rest = definition.groups()
            out.append(
                f"{head}{rewrite(target, False)}{rest}" + ("\n" if line.endswith("\n") else "")
            )
            continue
        out.append(_rewrite_outside_code(line, rewrite))
    return "".join(out)


def _rewrite_outside_code(line: str, rewrite: Callable[[str, bool], str]) -> str:
    """The links of *line* rewritten, but none that starts inside an inline code span."""
    spans = [m.span() for m in _CODE_SPAN.finditer(line)]

    def one(match: re.Match[str]) -> str:
        if any(start <= match.start() < end for start, end in spans):
            return match.group(0)
        bang, label, target, title = match.groups()
        bracketed = target.startswith("<")
        new = rewrite(target[1:-1] if bracketed else target, bool(bang))
        if bracketed:
            new = f"<{new}>"
        return f"{bang}[{label}]({new}{title})"

    return _INLINE.sub(one, line)


def absolute_links(
    markdown: str, source: str, *, root: Path = ROOT, keep: Callable[[str], bool] | None = None
) -> str:
    """*markdown* (the file *source*, relative to *root*) with relative links made absolute.

    *keep(path)* says which resolved repository paths stay relative (the
    site's own pages); by default none do.
    """
    repo = repository(root)
    base = posixpath.dirname(source)

    def rewrite(target: str, image: bool) -> str:
        if not is_relative(target):
            return target
        path, _, fragment = target.partition("#")
        resolved = posixpath.normpath(posixpath.join(base, path)) if path else source
        if keep is not None and keep(resolved):
            return target
        is_dir = path.endswith("/") or (root / resolved).is_dir()
        image = image or resolved.lower().endswith(IMAGE_SUFFIXES)
        return github_url(resolved, fragment, repo, image=image, is_dir=is_dir)

    return rewrite_links(markdown, rewrite)


def missing_targets(markdown: str, source: str, *, root: Path = ROOT) -> list[str]:
    """The relative link targets of *markdown* that name no file or directory of *root*."""
    base = posixpath.dirname(source)
    missing: list[str] = []

    def check(target: str, image: bool) -> str:
        path = target.partition("#")[0]
        if is_relative(target) and path:
            resolved = posixpath.normpath(posixpath.join(base, path))
            if resolved.startswith("..") or not (root / resolved).exists():
                missing.append(target)
        return target

    rewrite_links(markdown, check)
    return missing


# -- the MkDocs hooks ------------------------------------------------------------------------------

log = logging.getLogger("mkdocs.hooks.links")

#: Where images from outside docs/ are copied in the site (the site fetches
#: nothing from elsewhere, so a chart of bench/results/ ships with it).
REPO_FILES = "_repo"


def _outside_images(docs_dir: Path) -> set[str]:
    """Repository paths of the images outside docs/ that docs/ pages show."""
    prefix = docs_dir.relative_to(ROOT).as_posix()
    found: set[str] = set()
    for md in docs_dir.rglob("*.md"):
        source = md.relative_to(ROOT).as_posix()
        base = posixpath.dirname(source)

        def collect(target: str, image: bool, base: str = base) -> str:
            path = target.partition("#")[0]
            if image and is_relative(target) and path:
                resolved = posixpath.normpath(posixpath.join(base, path))
                if not resolved.startswith(f"{prefix}/") and (ROOT / resolved).is_file():
                    found.add(resolved)
            return target

        rewrite_links(md.read_text(encoding="utf-8"), collect)
    return found


def on_files(files: Any, config: Any) -> Any:
    """The images outside docs/ that pages show join the site, under ``_repo/``."""
    from mkdocs.structure.files import File

    for path in sorted(_outside_images(Path(config["docs_dir"]).resolve())):
        files.append(File.generated(config, f"{REPO_FILES}/{path}", abs_src_path=str(ROOT / path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Links from a page to files outside docs/ become GitHub URLs; broken ones warn.

    An image outside docs/ is shown from the site's own copy (`on_files`).
    """
    docs_dir = Path(config["docs_dir"]).resolve()
    prefix = docs_dir.relative_to(ROOT).as_posix()
    source = f"{prefix}/{page.file.src_uri}"
    for target in missing_targets(markdown, source):
        log.warning("%s links to %r, which is not in the repository", source, target)
    base = posixpath.dirname(source)

    def on_site(path: str) -> bool:
        return path == prefix or path.startswith(f"{prefix}/")

    def images_from_the_site(target: str, image: bool) -> str:
        path = target.partition("#")[0]
        if not (image and is_relative(target) and path):
            return target
        resolved = posixpath.normpath(posixpath.join(base, path))
        if on_site(resolved) or not (ROOT / resolved).is_file():
            return target
        copy = f"{prefix}/{REPO_FILES}/{resolved}"
        return posixpath.relpath(copy, base)

    return absolute_links(rewrite_links(markdown, images_from_the_site), source, keep=on_site)


def _named_pages(nav: Any) -> set[str]:
    """Every page path the nav names, at any depth."""
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, dict):
        return set().union(*(_named_pages(v) for v in nav.values()))
    if isinstance(nav, list):
        return set().union(*(_named_pages(v) for v in nav))
    return set()


def on_config(config: Any) -> Any:
    """A top-level page of docs/ that the nav does not name joins its "In depth" section.

    Pages are added to docs/ by more than one change at a time; a page the
    nav forgot is still on the site, after the ones it names.
    """
    nav = config.get("nav")
    if not nav:
        return config
    named = _named_pages(nav)
    docs_dir = Path(config["docs_dir"])
    extra = sorted(p.name for p in docs_dir.glob("*.md") if p.name not in named)
    if extra:
        for section in nav:
            if isinstance(section, dict) and "In depth" in section:
                section["In depth"].extend(extra)
                break
        else:
            nav.append({"In depth": extra})
    return config
