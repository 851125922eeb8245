"""Programs the tests and the benchmarks both run: planted races and a simulated store.

`races` holds asyncio programs with a real ordering bug (and a correct
control) that ``tideloop.testing``'s strategies must find;
`sim_store` a replicated key-value store with a planted stale read, run on
a simulated network. The tests (``tests/testing/``) check that the bugs are
found and replay; ``bench/races.py`` and ``bench/sim_store*.py`` measure how
fast, on tideloop and on other simulators. Both import this package as
``scenarios`` from the repository root (pytest's ``pythonpath = ["."]``;
``python -m bench...`` runs from there), so it names no test or benchmark
module and holds no test of its own.
"""
