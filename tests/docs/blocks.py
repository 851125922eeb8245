"""The code blocks of the README and docs/, and how each one is run, verbatim.

Used by ``test_code_blocks.py`` (one test per block). The rules, which
docs/contributing to the docs follow (`RULES` is the text the tests print
when a block breaks one):

- Every fenced block names its language. ``python`` blocks run as a script
  (``python block.py``) in a fresh directory; ``pycon`` blocks are
  doctested; ``sh``/``bash``/``shell`` blocks run in bash, each command's
  exit status checked (0 unless the block says otherwise); ``toml``,
  ``ini``, ``json`` and ``yaml`` blocks must parse; ``text`` blocks are
  output or prose, not code.
- A block with a title (``python title="app.py"``, MkDocs Material's
  syntax) is a file: it is written into the directory of every later block
  of the same page, and some later block must use it (name it).
- HTML comments right before a block say how to run it:

  - ``<!-- not run: REASON -->``: not run at all. Keep these rare: each is
    listed in ``test_code_blocks.OPT_OUTS``, and the tests fail on one that
    is not.
  - ``<!-- run: exit statuses 1, 0 -->``: a shell block's commands exit
    with these statuses, in order.
  - ``<!-- run: fails with AssertionError -->``: a python block ends with
    this exception, uncaught (what it shows is that failure).
  - ``<!-- run: serves /path -->``: the block starts a server and runs until
    stopped: it is started with ``PORT`` and ``UVICORN_PORT`` set to a free
    port, must answer ``GET http://127.0.0.1:$PORT/path`` within 30 s, and
    must then exit cleanly on SIGINT.
  - ``<!-- run: requires MODULE -->``: needs MODULE installed (the ``docs``
    extra); skipped without it, unless ``TIDELOOP_REQUIRE_DOCS=1`` (CI's
    3.11 run), where that fails.
  - ``<!-- run: in a copy of the repository; slow -->``: runs in a fresh
    copy of the repository's files (an install command), and only where
    ``TIDELOOP_DOCS_SLOW=1`` (``.ci/run``'s docs step).
  - ``<!-- run: from the repository root -->``: runs in the repository
    itself (commands that read its files; they must write nothing there).

Beside the blocks, `load_hooks` gives the site's MkDocs hooks
(``docs/hooks.py``, not a package) as a module: the link tests and
``check_dist.py`` check links by its rules.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]

#: Languages and what is done with them.
PYTHON = ("python", "py", "python3")
DOCTEST = ("pycon",)
SHELL = ("sh", "bash", "shell")
DATA = ("toml", "ini", "json", "yaml", "yml", "cfg")
NOT_CODE = ("text", "txt")
#: Files a tool reads by itself (pytest its pyproject.toml): no block names them.
CONFIG_FILES = (".toml", ".ini", ".cfg")

RULES = __doc__ or ""


def load_hooks() -> ModuleType:
    """``docs/hooks.py``, imported from its file (a fresh module each call)."""
    spec = importlib.util.spec_from_file_location("doc_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_FENCE = re.compile(r"^( *)(`{3,}|~{3,})\s*(.*)$")
_COMMENT = re.compile(r"^\s*<!--\s*(.*?)\s*-->\s*$")
_TITLE = re.compile(r"""title=(?:"([^"]*)"|'([^']*)'|(\S+))""")


@dataclass
class Block:
    """One fenced block of a Markdown file."""

    path: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    language: str
    title: str | None
    code: str
    directives: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.code.splitlines() if line.strip()), "")

    def directive(self, prefix: str) -> str | None:
        """The text after *prefix* of the first directive that starts with it."""
        for d in self.directives:
            if d.startswith(prefix):
                return d[len(prefix) :].strip()
        return None

    @property
    def not_run(self) -> str | None:
        return self.directive("not run:")


def markdown_files(root: Path = ROOT) -> list[Path]:
    """README.md and every page under docs/ (new pages are picked up as they come)."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def parse(text: str, path: str) -> list[Block]:
    """The fenced blocks of *text*, with the directives of the comments right above each."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opener = _FENCE.match(lines[i])
        if not opener:
            i += 1
            continue
        indent, fence, info = opener.groups()
        words = info.split()
        language = words[0].lower() if words and "=" not in words[0] else ""
        title_match = _TITLE.search(info)
        title = next((g for g in title_match.groups() if g), None) if title_match else None
        directives: list[str] = []
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        while j >= 0 and (comment := _COMMENT.match(lines[j])):
            directives.insert(0, comment.group(1))
            j -= 1
        body: list[str] = []
        k = i + 1
        while k < len(lines):
            closer = re.match(r"^ *(`{3,}|~{3,})\s*$", lines[k])
            if closer and closer.group(1)[0] == fence[0] and len(closer.group(1)) >= len(fence):
                break
            line = lines[k]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            k += 1
        code = "\n".join(body) + "\n"
        blocks.append(Block(path, i + 1, language, title, code, directives))
        i = k + 1
    return blocks


def all_blocks(root: Path = ROOT) -> list[Block]:
    out: list[Block] = []
    for md in markdown_files(root):
        out.extend(parse(md.read_text(encoding="utf-8"), md.relative_to(root).as_posix()))
    return out


def shell_commands(code: str) -> list[str]:
    """A shell block's commands: one per line, backslash continuations joined, comments dropped."""
    commands: list[str] = []
    pending = ""
    for raw in code.splitlines():
        line = pending + raw
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        if line.strip() and not line.strip().startswith("#"):
            commands.append(line.strip())
    if pending.strip():
        commands.append(pending.strip())
    return commands


def problems(block: Block, blocks_of_page: list[Block]) -> list[str]:
    """What is wrong with *block* by the rules (before running it)."""
    found: list[str] = []
    known = PYTHON + DOCTEST + SHELL + DATA + NOT_CODE
    if block.not_run is not None:
        if not block.not_run:
            found.append("`not run:` needs a reason")
        return found
    if not block.language:
        found.append("the block names no language (```python, ```sh, ```text ...)")
    elif block.language not in known:
        found.append(f"the runner does not know how to check {block.language!r} blocks")
    for d in block.directives:
        if d.startswith("run:") or d.startswith("not run:"):
            continue
        if d.lower().startswith(("run ", "not run", "run-", "norun", "skip")):
            found.append(f"directive {d!r} is misspelt: see tests/docs/blocks.py")
    if block.title is not None and not block.title.endswith(CONFIG_FILES):
        # A module is used by its name (``uvicorn app:app``, ``pytest test_app.py``).
        stem = re.escape(Path(block.title).stem)
        later = [b for b in blocks_of_page if b.line > block.line and b.not_run is None]
        if not any(re.search(rf"\b{stem}\b", b.code) for b in later):
            found.append(f"no later block of the page uses the file {block.title!r}")
    if block.language in SHELL and "<<" in block.code:
        found.append("heredocs are not supported in shell blocks")
    return found
