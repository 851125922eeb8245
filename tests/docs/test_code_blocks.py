"""Every code block of the README and docs/ runs, verbatim (the rules: ``blocks.py``).

One test per block, named by its file and line (``README.md:35``). A python
block runs as a script in a fresh directory, with the page's earlier file
blocks (``title="app.py"``) written beside it; a shell block runs in bash
there, with this interpreter's environment first on PATH (so ``python``,
``pytest`` and ``uvicorn`` are the ones under test) and each command's exit
status checked. Pages added later (docs/**/*.md) are picked up by
themselves; a block that cannot run in CI says why in a ``<!-- not run:
REASON -->`` comment, and is listed in `OPT_OUTS`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import tomllib
import urllib.error
import urllib.request
from configparser import ConfigParser
from pathlib import Path

import pytest

from children import run, run_python
from needs import missing

from blocks import (
    DATA,
    DOCTEST,
    NOT_CODE,
    PYTHON,
    ROOT,
    RULES,
    SHELL,
    Block,
    all_blocks,
    parse,
    problems,
    shell_commands,
)

#: The blocks that are not run, by (file, first line of the block): each
#: with the reason its ``not run:`` comment gives in the page.
OPT_OUTS: dict[tuple[str, str], str] = {
    (
        "README.md",
        "bash .ci/run" + " " * 35 + "# install the test dependencies, run all tests",
    ): "is CI itself",
    (
        "README.md",
        "bash .ci/run                                  # everything CI runs",
    ): "starts CI itself",
    ("README.md", 'pip install "tideloop @ git+https://github.com/tideloop/tideloop"'): (
        "installs from GitHub, which CI cannot reach"
    ),
    ("docs/quickstart.md", "git clone https://github.com/tideloop/tideloop && cd tideloop"): (
        "clones from GitHub, which CI cannot reach"
    ),
    (
        "docs/reliability.md",
        "python -m bench.soak --loop tideloop,asyncio,uvloop --duration 600 \\",
    ): "three ten-minute soaks",
    (
        "docs/findings.md",
        "python tests/peers/run.py --jobs 2 --explore 10                 # real time",
    ): "explores four suites, about 35 minutes of both cores",
}

BLOCKS = all_blocks()
PAGES = {b.path: [c for c in BLOCKS if c.path == b.path] for b in BLOCKS}
#: Blocks that run (not data, not text, not opted out).
RUN = [
    b
    for b in BLOCKS
    if b.not_run is None and b.title is None and b.language in PYTHON + DOCTEST + SHELL
]
TIMEOUT = 120.0
SLOW_TIMEOUT = 600.0


def env_for_blocks() -> dict[str, str]:
    """This process's environment without pytest's and tideloop's own settings.

    ``python`` and the tools installed beside it come first on PATH. The
    core under test stays what it is (``TIDELOOP_PURE``); the source tree's
    tideloop is imported, as in every subprocess of the suite.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "COV_", "COVERAGE_"))
        and not (k.startswith("TIDELOOP_") and k != "TIDELOOP_PURE")
    }
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def page_files(block: Block, where: Path) -> None:
    """Write the page's file blocks that come before *block* into *where*."""
    for earlier in PAGES[block.path]:
        if earlier.line < block.line and earlier.title and earlier.not_run is None:
            target = where / earlier.title
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(earlier.code, encoding="utf-8")


def copy_of_repository(where: Path) -> Path:
    """The repository's tracked files (or, without git, its tree less build products)."""
    dest = where / "repo"
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode == 0 and listed.stdout:
        for name in listed.stdout.decode().split("\0"):
            if name and (ROOT / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, dest / name)
    else:
        ignore = shutil.ignore_patterns(".venv*", ".ci-venvs", ".git", "__pycache__", "*.so")
        shutil.copytree(ROOT, dest, ignore=ignore)
    return dest


def check_requirements(block: Block) -> None:
    needed = block.directive("run: requires")
    if not needed:
        return
    import importlib.util

    if importlib.util.find_spec(needed) is None:
        message = f"{block.id} needs {needed} (the docs extra: pip install -e '.[docs]')"
        missing(message, "TIDELOOP_REQUIRE_DOCS")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def explain(block: Block, out: subprocess.CompletedProcess[str] | None, why: str) -> str:
    text = f"{block.id} ({block.language} block starting {block.first_line!r}): {why}"
    if out is not None:
        text += f"\n--- stdout\n{out.stdout[-4000:]}\n--- stderr\n{out.stderr[-4000:]}"
    return text


def run_python_block(block: Block, cwd: Path, env: dict[str, str]) -> None:
    script = cwd / "block.py"
    script.write_text(block.code, encoding="utf-8")
    out = run_python(script.name, cwd=cwd, env=env, timeout=TIMEOUT)
    expected = block.directive("run: fails with")
    if expected:
        last = out.stderr.strip().splitlines()[-1:] or [""]
        assert out.returncode == 1 and last[0].startswith(expected), explain(
            block, out, f"should end with an uncaught {expected}"
        )
    else:
        assert out.returncode == 0, explain(block, out, f"exit status {out.returncode}")


def run_doctest_block(block: Block, cwd: Path, env: dict[str, str]) -> None:
    runner = textwrap.dedent(
        """
        import doctest, sys
        text = open(sys.argv[1], encoding="utf-8").read()
        test = doctest.DocTestParser().get_doctest(text, {}, sys.argv[2], sys.argv[2], 0)
        result = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(test)
        sys.exit(1 if result.failed else 0)
        """
    )
    (cwd / "block.txt").write_text(block.code, encoding="utf-8")
    (cwd / "run_doctest.py").write_text(runner, encoding="utf-8")
    out = run_python("run_doctest.py", "block.txt", block.id, cwd=cwd, env=env, timeout=TIMEOUT)
    assert out.returncode == 0, explain(block, out, "the doctest failed")


def run_shell_block(block: Block, cwd: Path, env: dict[str, str], timeout: float) -> None:
    commands = shell_commands(block.code)
    statuses = block.directive("run: exit statuses")
    expected = [int(s) for s in statuses.split(",")] if statuses else [0] * len(commands)
    assert len(expected) == len(commands), explain(
        block, None, f"{len(commands)} commands, {len(expected)} expected exit statuses"
    )
    # Each command, then its exit status into a file: one bash, so cd and
    # variables carry over from one command to the next.
    fd, name = tempfile.mkstemp(prefix="block-statuses-")
    os.close(fd)
    record = Path(name)
    script = "".join(f'{c}\necho $? >> "$BLOCK_STATUSES"\n' for c in commands)
    env = {**env, "BLOCK_STATUSES": str(record)}
    try:
        proc = run(["bash", "-c", script], cwd=cwd, env=env, timeout=timeout)
        got = [int(line) for line in record.read_text().split()]
    except subprocess.TimeoutExpired as exc:
        out = subprocess.CompletedProcess([], -9, str(exc.stdout or ""), str(exc.stderr or ""))
        raise AssertionError(explain(block, out, "timed out")) from None
    finally:
        record.unlink()
    stdout, stderr = proc.stdout, proc.stderr
    out = subprocess.CompletedProcess(["bash"], proc.returncode, stdout, stderr)
    assert got == expected, explain(
        block, out, f"exit statuses {got} for {commands}, expected {expected}"
    )


def run_server_block(
    block: Block, cwd: Path, env: dict[str, str], path: str, wait: float = 30
) -> None:
    port = free_port()
    env = {**env, "PORT": str(port), "UVICORN_PORT": str(port)}
    if block.language in PYTHON:
        (cwd / "block.py").write_text(block.code, encoding="utf-8")
        argv = [sys.executable, "block.py"]
    else:
        [command] = shell_commands(block.code)
        argv = ["bash", "-c", f"exec {command}"]
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + wait
        answer = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                    answer = (r.status, r.read())
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        assert answer is not None, "no answer"
        assert answer[0] == 200, answer
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    except BaseException:
        proc.kill()
        stdout, stderr = proc.communicate()
        out = subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
        raise AssertionError(
            explain(block, out, f"did not serve GET {path} on port {port}")
        ) from None
    out = subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
    assert proc.returncode == 0, explain(block, out, f"exit status {proc.returncode} on SIGINT")


def is_slow(block: Block) -> bool:
    return "slow" in (block.directive("run: in") or "")


@pytest.mark.timeout(SLOW_TIMEOUT + 30)
@pytest.mark.parametrize(
    "block",
    [pytest.param(b, id=b.id, marks=[pytest.mark.slow] if is_slow(b) else []) for b in RUN],
)
def test_block_runs(block: Block, tmp_path: Path) -> None:
    assert not problems(block, PAGES[block.path]), "\n".join(problems(block, PAGES[block.path]))
    check_requirements(block)
    env = env_for_blocks()
    timeout = TIMEOUT
    where = block.directive("run: in")
    if block.directive("run: from the repository root") is not None:
        cwd = ROOT
    elif where is not None and where.startswith("a copy of the repository"):
        if is_slow(block) and os.environ.get("TIDELOOP_DOCS_SLOW") != "1":
            pytest.skip(
                f"{block.id} installs tideloop afresh (a minute, both CPUs): "
                ".ci/run's docs step runs it (TIDELOOP_DOCS_SLOW=1)"
            )
        cwd = copy_of_repository(tmp_path)
        env.pop("PYTHONPATH")  # the copy's own install, not the source tree
        timeout = SLOW_TIMEOUT
    else:
        cwd = tmp_path / "work"
        cwd.mkdir()
        page_files(block, cwd)
    serves = block.directive("run: serves")
    if serves is not None:
        run_server_block(block, cwd, env, serves)
    elif block.language in PYTHON:
        run_python_block(block, cwd, env)
    elif block.language in DOCTEST:
        run_doctest_block(block, cwd, env)
    else:
        run_shell_block(block, cwd, env, timeout)


DATA_BLOCKS = [b for b in BLOCKS if b.not_run is None and b.language in DATA]


@pytest.mark.parametrize("block", DATA_BLOCKS, ids=[b.id for b in DATA_BLOCKS])
def test_data_block_parses(block: Block) -> None:
    if block.language == "toml":
        tomllib.loads(block.code)
    elif block.language == "json":
        json.loads(block.code)
    elif block.language in ("ini", "cfg"):
        ConfigParser().read_string(block.code)
    else:
        yaml = pytest.importorskip("yaml", reason="a yaml block needs PyYAML to be checked")
        yaml.safe_load(block.code)


def test_every_block_follows_the_rules() -> None:
    broken = [
        f"{b.id}: {p}" for path, page in PAGES.items() for b in page for p in problems(b, page)
    ]
    assert not broken, "\n".join(broken) + "\n\nThe rules (tests/docs/blocks.py):\n" + RULES


def test_opt_outs_are_the_listed_ones() -> None:
    found = {(b.path, b.first_line): b.not_run for b in BLOCKS if b.not_run is not None}
    assert found == OPT_OUTS, (
        "a block's `not run:` comment and OPT_OUTS in tests/docs/test_code_blocks.py "
        "disagree: add or remove it in both, with the same reason"
    )


def test_text_blocks_hold_no_code() -> None:
    # `text` is for output and prose, not for code that would escape the runner.
    text = [b for b in BLOCKS if b.language in NOT_CODE]
    for b in text:
        assert not b.first_line.startswith(("import ", "from ", "async def ", "$ ", "pip ")), (
            f"{b.id} looks like code in a text block: {b.first_line!r}"
        )


def test_the_readme_opens_with_the_two_commands() -> None:
    """The repository's contract: install and run the demo; run every test."""
    first, second = [b for b in BLOCKS if b.path == "README.md"][:2]
    assert first.language == second.language == "sh"
    [demo] = shell_commands(first.code)
    assert "pip install ." in demo and "python -m tideloop.demo" in demo
    assert first.directive("run: in") == "a copy of the repository; slow"
    [ci] = shell_commands(second.code)
    assert ci.split("#")[0].strip() == "bash .ci/run"
    readme = (ROOT / "README.md").read_text()
    assert readme.index("```sh") < readme.index("\n## "), "the commands come first"


# -- the runner's own tests: a broken block is caught ------------------------------------------


def planted(markdown: str) -> list[Block]:
    return parse(textwrap.dedent(markdown), "planted.md")


def test_the_parser_reads_languages_titles_directives_and_indents() -> None:
    blocks = planted(
        """
        Text.

        <!-- run: exit statuses 1 -->
        ```sh
        false
        ```

        - item

            ```python title="app.py"
            print("hi")
            ```

        ````text
        ```python
        not a block of its own
        ```
        ````
        """
    )
    assert [(b.language, b.title, b.directives) for b in blocks] == [
        ("sh", None, ["run: exit statuses 1"]),
        ("python", "app.py", []),
        ("text", None, []),
    ]
    assert blocks[1].code == 'print("hi")\n'
    assert "not a block of its own" in blocks[2].code


def test_rule_breakers_are_named() -> None:
    blocks = planted(
        """
        ```
        x = 1
        ```

        ```c
        int x;
        ```

        <!-- not run: -->
        ```python
        x = 1
        ```

        ```python title="lonely.py"
        x = 1
        ```

        <!-- run exit statuses 1 -->
        ```sh
        true
        ```
        """
    )
    found = [problems(b, blocks) for b in blocks]
    assert "names no language" in found[0][0]
    assert "does not know how to check 'c'" in found[1][0]
    assert found[2] == ["`not run:` needs a reason"]
    assert found[3] == ["no later block of the page uses the file 'lonely.py'"]
    assert "misspelt" in found[4][0]


def test_a_failing_python_block_fails(tmp_path: Path) -> None:
    [block] = planted("```python\nraise SystemExit(3)\n```\n")
    with pytest.raises(AssertionError, match="exit status 3"):
        run_python_block(block, tmp_path, env_for_blocks())
    [block] = planted("<!-- run: fails with AssertionError -->\n```python\nraise ValueError\n```\n")
    with pytest.raises(AssertionError, match="should end with an uncaught AssertionError"):
        run_python_block(block, tmp_path, env_for_blocks())


def test_a_shell_blocks_statuses_are_checked_per_command(tmp_path: Path) -> None:
    [block] = planted("```sh\ntrue\nfalse  # fails\nx=3; test $x = 3\n```\n")
    with pytest.raises(AssertionError, match=r"exit statuses \[0, 1, 0\]"):
        run_shell_block(block, tmp_path, env_for_blocks(), 30)
    [block] = planted(
        "<!-- run: exit statuses 0, 1, 0 -->\n```sh\ntrue\nfalse\ncd / && \\\n  test -d tmp\n```\n"
    )
    run_shell_block(block, tmp_path, env_for_blocks(), 30)


def test_a_failing_doctest_fails(tmp_path: Path) -> None:
    [block] = planted("```pycon\n>>> 1 + 1\n3\n```\n")
    with pytest.raises(AssertionError, match="the doctest failed"):
        run_doctest_block(block, tmp_path, env_for_blocks())
    [block] = planted("```pycon\n>>> 1 + 1\n2\n```\n")
    run_doctest_block(block, tmp_path, env_for_blocks())


def test_a_server_that_never_answers_fails(tmp_path: Path) -> None:
    [block] = planted("```python\nimport time\ntime.sleep(60)\n```\n")
    started = time.monotonic()
    with pytest.raises(AssertionError, match="did not serve GET / on port"):
        run_server_block(block, tmp_path, env_for_blocks(), "/", wait=2)
    assert time.monotonic() - started < 30
