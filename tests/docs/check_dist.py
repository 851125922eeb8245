"""Build the sdist and the wheel, and check what a package index and an old pip see.

Run by ``.ci/run`` on 3.11 (it needs the ``dist`` extra: build, twine)::

    python tests/docs/check_dist.py [--keep DIR]

1. ``python -m build``: the sdist, then the wheel built from the sdist (so the
   sdist is complete enough to build from);
2. ``twine check --strict`` on both (the long description renders, the
   metadata is valid for upload);
3. the metadata: ``License: MIT`` and no ``License-Expression`` beside it,
   the long description's links all absolute, the project URLs;
4. the sdist holds docs/, mkdocs.yml, tests/ and what the tests import
   (scenarios/, examples/, bench/), and no build products;
5. an old pip shows the license: the wheel installed into a fresh virtual
   environment whose pip is the interpreter's bundled one (23.2.1 on CPython
   3.11.7), and ``pip show tideloop`` must print ``License: MIT``.

Exits non-zero with the first failed check. Not a pytest module: it builds
the package, which the suite on every interpreter need not do.
"""

from __future__ import annotations

import argparse
import email.parser
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from blocks import ROOT, load_hooks

SDIST_MUST_HOLD = (
    "docs/index.md",
    "docs/hooks.py",
    "mkdocs.yml",
    "tests/conftest.py",
    "tests/docs/test_code_blocks.py",
    "scenarios/races.py",
    "examples/prometheus_exporter.py",
    "bench/__init__.py",
    "CHANGELOG.md",
    "LICENSE",
)


def run(*cmd: str, env: dict[str, str] | None = None) -> str:
    print("$", " ".join(cmd), flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        raise SystemExit(f"check_dist: failed: {' '.join(cmd)}")
    return out.stdout


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"check_dist: {what}")
    print(f"ok: {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="build into DIR and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp) / "dist"
        run(sys.executable, "-m", "build", "--outdir", str(out), str(ROOT))
        sdists = sorted(out.glob("tideloop-*.tar.gz"))
        wheels = sorted(out.glob("tideloop-*.whl"))
        check(len(sdists) == 1 and len(wheels) == 1, "one sdist and one wheel were built")
        run(sys.executable, "-m", "twine", "check", "--strict", str(sdists[0]), str(wheels[0]))
        check(True, "twine check --strict passes on both")

        with zipfile.ZipFile(wheels[0]) as whl:
            [name] = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
            metadata = email.parser.Parser().parsestr(whl.read(name).decode())
        check(metadata["License"] == "MIT", "the wheel's metadata says License: MIT")
        check("License-Expression" not in metadata, "no License-Expression beside it")
        urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL") or [])
        check(urls.get("Documentation", "").startswith("https://"), "a Documentation project URL")
        description = metadata.get_payload()
        assert isinstance(description, str)
        check("tideloop" in description, "the long description is the README")
        relative: list[str] = []
        links = load_hooks()
        links.rewrite_links(
            description,
            lambda target, image: relative.append(target) if links.is_relative(target) else target,
        )
        check(relative == [], f"every link of the long description is absolute {relative}")

        with tarfile.open(sdists[0]) as tar:
            names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        for path in SDIST_MUST_HOLD:
            check(path in names, f"the sdist holds {path}")
        built = [n for n in names if n.endswith((".so", ".pyc")) or "__pycache__" in n]
        check(built == [], f"the sdist holds no build products {built[:3]}")

        venv = Path(tmp) / "oldpip"
        run(sys.executable, "-m", "venv", str(venv))
        pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
        version = run(*pip, "--version").split()[1]
        run(*pip, "install", "--quiet", "--no-index", "--no-deps", str(wheels[0]))
        shown = run(*pip, "show", "tideloop").splitlines()
        check("License: MIT" in shown, f"pip {version}'s `pip show tideloop` prints License: MIT")


if __name__ == "__main__":
    main()
