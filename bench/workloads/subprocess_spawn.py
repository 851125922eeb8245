"""Subprocess spawn + communicate: ``echo`` with stdout piped, 4 children at a time.

Each op is one child: ``create_subprocess_exec(echo, ...)`` with stdout a
pipe, ``communicate()`` reading its few bytes of output until EOF and
reaping it. ``echo`` (an absolute path, looked up once) rather than
``python -c`` keeps the child's own start-up small, so what differs between
loops is their share: the pipes, the child watcher, the wake-ups. Both the
fork/exec and the child's run count, so expect hundreds, not thousands, per
second.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess

from bench.api import Primitive, Sample

BATCH = 4
MESSAGE = b"tideloop"


async def _one(program: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        program, MESSAGE.decode(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    out, _ = await proc.communicate()
    if out != MESSAGE + b"\n" or proc.returncode != 0:
        raise RuntimeError(f"unexpected child result: {out!r}, returncode {proc.returncode}")


async def run(n: int) -> Sample:
    program = shutil.which("echo")
    if program is None:
        raise RuntimeError("no echo program on PATH")
    batches = max(1, n // BATCH)
    for _ in range(batches):
        await asyncio.gather(*(_one(program) for _ in range(BATCH)))
    return Sample(batches * BATCH)


WORKLOAD = Primitive(
    name="subprocess_spawn",
    title=f"subprocess spawn + communicate (echo, {BATCH} at a time)",
    unit="processes",
    run=run,
    quick_n=400,
    full_n=2_000,
    needs=("subprocess",),
)
