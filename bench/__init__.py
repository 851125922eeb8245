"""tideloop's benchmark suite: the stdlib loop, uvloop and tideloop side by side.

Run ``python -m bench --help`` from the repository root; see ``bench/README.md``.
"""
