"""The package's metadata (pyproject.toml) matches what is tested and what ships.

Checked without building anything: the trove classifiers name every Python
that ``.ci/run`` tests (and only the implementations it tests), the license
and the changelog exist and are referenced where the build and the package
index read them.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = "https://github.com/tideloop/tideloop"


def pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def ci_interpreters() -> list[str]:
    """The interpreters ``.ci/run`` tests by default: ``3.11``, ..., ``pypy``.

    Read from its ``*_pythons=${TIDELOOP_..._PYTHONS-"3.11 3.12"}`` lines.
    """
    text = (ROOT / ".ci" / "run").read_text()
    lists = re.findall(r'^\w+_pythons=\$\{TIDELOOP_\w*PYTHONS-"([^"]*)"\}', text, re.MULTILINE)
    assert lists, ".ci/run names no interpreter lists in the form this test reads"
    return [name for names in lists for name in names.split()]


def test_ci_runs_what_the_test_expects() -> None:
    # A guard against the checks below passing on an empty or misread list.
    found = ci_interpreters()
    assert "3.11" in found
    assert all(re.fullmatch(r"3\.\d+|pypy", name) for name in found), found


def test_classifiers_name_every_tested_python_and_implementation() -> None:
    project = pyproject()["project"]
    classifiers: list[str] = project["classifiers"]
    tested = ci_interpreters()
    minors = sorted({n for n in tested if n != "pypy"}, key=lambda v: int(v.split(".")[1]))
    for minor in minors:
        assert f"Programming Language :: Python :: {minor}" in classifiers
    # No classifier for a Python that is not tested.
    claimed = {
        c.rpartition(" :: ")[2]
        for c in classifiers
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    assert claimed == set(minors)
    implementations = {
        c.rpartition(" :: ")[2]
        for c in classifiers
        if c.startswith("Programming Language :: Python :: Implementation :: ")
    }
    assert implementations == {"CPython"} | ({"PyPy"} if "pypy" in tested else set())
    assert project["requires-python"] == f">={minors[0]}"


def setup_py_function(name: str) -> Any:
    """A function of setup.py, without importing setuptools (3.12+ venvs lack it).

    setup.py runs setup() only as __main__; its function *name* is compiled
    from its own source and run with the names it uses.
    """
    import ast
    import importlib.util

    path = ROOT / "setup.py"
    tree = ast.parse(path.read_text(), str(path))
    [node] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    namespace: dict[str, Any] = {"importlib": importlib, "Path": Path, "__file__": str(path)}
    assert importlib.util  # setup.py's function uses importlib.util
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


def test_license_is_the_field_every_pip_reads_with_its_file() -> None:
    """``License: MIT`` (pip 23 shows no other field), set by setup.py, and the file.

    Not also a PEP 639 ``License-Expression``: a package index disregards
    ``License`` beside one. tests/docs/check_dist.py builds the wheel and
    reads what pip 23 shows.
    """
    project = pyproject()["project"]
    assert "license" not in project and "license" in project["dynamic"]
    assert "LICENSE" in project["license-files"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License")
    assert "Copyright (c) 2026 the tideloop authors" in text
    assert 'license="MIT"' in (ROOT / "setup.py").read_text()
    # setuptools warns on License classifiers (deprecated by PEP 639).
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]
    requires = [Requirement(r) for r in pyproject()["build-system"]["requires"]]
    (setuptools,) = [r for r in requires if r.name == "setuptools"]
    assert setuptools.specifier.contains("77.0")


def test_the_long_description_is_the_readme_with_absolute_links() -> None:
    project = pyproject()["project"]
    assert "readme" not in project and "readme" in project["dynamic"]
    assert "long_description=long_description()," in (ROOT / "setup.py").read_text()
    text = setup_py_function("long_description")()
    readme = (ROOT / "README.md").read_text()
    assert text != readme and len(text.splitlines()) == len(readme.splitlines())
    assert f"]({REPOSITORY}/blob/main/docs/quickstart.md)" in text
    assert f"]({REPOSITORY}/blob/main/tests/divergences.py)" in text
    assert "](docs/" not in text and "](tests/" not in text


def test_the_sdist_ships_the_docs_and_the_tests() -> None:
    manifest = (ROOT / "MANIFEST.in").read_text().splitlines()
    for line in ("graft docs", "graft tests", "include mkdocs.yml", "graft scenarios"):
        assert line in manifest, line
    assert "prune tests" not in manifest


def test_the_docs_and_dist_extras_hold_their_tools() -> None:
    extras = pyproject()["project"]["optional-dependencies"]
    docs = {Requirement(r).name for r in extras["docs"]}
    assert {"mkdocs", "mkdocs-material", "mkdocstrings"} <= docs
    assert {Requirement(r).name for r in extras["dist"]} >= {"build", "twine"}
    assert pyproject()["project"]["dependencies"] == []


def test_changelog_exists_ships_and_is_linked() -> None:
    changelog = ROOT / "CHANGELOG.md"
    text = changelog.read_text()
    version = pyproject()["project"]["version"]
    assert "## Unreleased" in text or f"## {version}" in text
    manifest = (ROOT / "MANIFEST.in").read_text().splitlines()
    assert "include CHANGELOG.md" in manifest
    urls: dict[str, str] = pyproject()["project"]["urls"]
    assert urls["Changelog"] == f"{REPOSITORY}/blob/main/CHANGELOG.md"


def test_project_urls_point_at_the_repository_and_its_files() -> None:
    urls: dict[str, str] = pyproject()["project"]["urls"]
    assert urls["Repository"] == REPOSITORY
    for url in urls.values():
        assert url.startswith(REPOSITORY), url
        path = url.removeprefix(f"{REPOSITORY}/blob/main/")
        if path != url:
            assert (ROOT / path).is_file(), url


def test_the_package_ships_its_type_marker() -> None:
    config = pyproject()["tool"]["setuptools"]
    assert "py.typed" in config["package-data"]["tideloop"]
    assert (ROOT / "src" / "tideloop" / "py.typed").is_file()
