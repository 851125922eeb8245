"""Searches: the strategies a search can run, by name, and how each makes its schedules.

Layer: top (``tideloop.testing``; above ``_strategy``, below ``_explore``,
the pytest plugin and the command line). A *search* runs a scenario under
many schedules until one fails: `explore` (``_explore``), the plugin's
``--tideloop-seeds`` and ``python -m tideloop.testing explore``. Each of
them takes a strategy by name from `STRATEGIES`, the one registry, and
asks it everything that differs between strategies: the names and help
texts the options offer, the error for a name it does not know, and the
*recipe*, a `Recipe`:

- a **seeded** strategy makes the schedule of seed *s* by itself
  (``make(s, options, length)``): a search runs seeds ``s, s + 1, ...``,
  the command line splits them over processes (``-j``) and resumes them
  (``--state``). *measure*: the search runs the unperturbed schedule first,
  and *length* is the most decisions a run of it met so far (at least 1;
  worker processes keep the first run's): PCT spreads its change points
  over it. *by_seed*: the schedule of seed *s* is the one a loop given
  ``seed=s`` runs (``RandomStrategy``), so the plugin runs and names it by
  its seed (``--tideloop-seed=S`` replays it);
- an **enumerating** strategy walks a space (``enumerate(options)``: an
  `Enumeration`, whose ``next(last)`` makes the next schedule from the last
  run's log) until it runs out, and says in words what that space is
  (``space(options)``) for the report that it was exhausted. An unbounded
  one (``coverage``: ``_coverage.Coverage``, which learns from what each
  run reached and mutates the schedules that reached something new) has
  no space and never runs out; a search that ends early calls its
  ``close`` (`Search.close`), if it has one.

Shrinking and tapes are the same for every strategy (a failure is its
deviations, replayed by ``ReplayStrategy``), so a recipe says nothing of
them. `Search` is the one driver of a recipe, for the searches that run
schedules one after another.

Adding a strategy is one class and one entry:

1. its `Strategy` subclass in ``_strategy`` (``choose``, ``describe``);
2. a `Recipe` in `STRATEGIES` below: its name, the class, a few words for
   help texts, and ``make`` (seeded, with ``measure`` if it needs the
   decision count) or ``enumerate`` and ``space`` (enumerating), and
   ``learns`` for an enumeration that is a `Learning` (it then runs over
   an executor too), and ``uses``, the `Options` fields it reads (the plugin and the command line
   refuse one given to a strategy that ignores it). Options it needs beyond
   `Options` (*depth*, *bound*) are a field there, and an option of the
   plugin and of the command line.

``explore(strategy=NAME)``, ``--tideloop-strategy=NAME`` and ``--strategy
NAME`` then offer it, with its words in their help.

Invariants:
- Every consumer of a strategy name goes through `STRATEGIES`: no code
  outside this module compares a strategy's name.
- A recipe is seeded or enumerating, never both (`Recipe.__post_init__`).
- Every driver of a `Search` closes it when it stops (`Search.close`), so
  an enumeration that measures its runs never measures anything else.
- A `Search` makes the same schedules as the recipe's parts make on their
  own: the same seed and what was learned (*length*, the last log) give the
  same strategy, in a process of its own too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ._coverage import Coverage
from ._strategy import (
    LOG_LIMIT,
    Decision,
    DecisionLog,
    PCTStrategy,
    Point,
    RandomStrategy,
    ReplayStrategy,
    Strategy,
)


@dataclass(frozen=True)
class Options:
    """What a search's strategies are given beyond a seed."""

    #: pct: change points (deviations) per schedule.
    depth: int = 2
    #: systematic: at most this many deviations per schedule.
    bound: int = 2
    #: coverage: the seed of its mutations (a search's first seed).
    seed: int = 0


class Enumeration(Protocol):
    """The space an enumerating strategy walks, one schedule at a time."""

    #: True once it ran out having run every schedule of its space.
    exhausted: bool

    def next(self, last: DecisionLog | None) -> Strategy | None:
        """The next schedule, after the run whose log is *last* (None: no run
        yet, or it built no perturbed loop); None when the space has run out."""
        ...


class Learning(Enumeration, Protocol):
    """An enumeration that can hand out many schedules before it learns from
    their runs (``coverage``): a search over an executor (``_scale``) runs
    them in other processes and feeds back what each reached."""

    #: The schedules kept so far (empty: nothing to mutate yet).
    corpus: list[Any]

    def propose(self) -> dict[Point, int]:
        """The next schedule's deviations, from what it has learned so far."""
        ...

    def learn(
        self,
        deviations: dict[Point, int],
        features: Iterable[int],
        points: list[tuple[Point, int]] | None = None,
    ) -> bool:
        """A run of *deviations* reached *features*, meeting *points*."""
        ...

    def to_json(self) -> dict[str, Any]:
        """What it learned, for a state file."""
        ...

    def load_json(self, data: dict[str, Any]) -> None:
        """Take up what a state file says it learned."""
        ...


@dataclass(frozen=True)
class Recipe:
    """A strategy a search can run: its name, class and recipe (see the module docstring)."""

    name: str
    #: The `Strategy` its schedules run under.
    cls: type[Strategy]
    #: A few words for help texts ("a seed each").
    summary: str
    #: Seeded: the strategy of seed *s*, given the options and the *length*.
    make: Callable[[int, Options, int], Strategy] | None = None
    #: Seeded: run the unperturbed schedule first, to measure *length*.
    measure: bool = False
    #: Seeded: the schedule of seed *s* is what a loop given ``seed=s`` runs.
    by_seed: bool = False
    #: Enumerating: the space, walked from the unperturbed schedule.
    enumerate: Callable[[Options], Enumeration] | None = None
    #: Enumerating: the space in words ("every schedule with at most 2
    #: deviation(s)"); None for an unbounded one (coverage), never exhausted.
    space: Callable[[Options], str] | None = None
    #: Enumerating: its enumeration is a `Learning` (runs over an executor).
    learns: bool = False
    #: The `Options` fields its schedules read ("depth", "bound"): a search
    #: given another one refuses it (`Registry.unused`), rather than ignore it.
    uses: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if (self.make is None) == (self.enumerate is None):
            raise ValueError(f"strategy {self.name!r}: give one of make (seeded) and enumerate")

    @property
    def seeded(self) -> bool:
        """Whether each schedule is a function of its seed (see the module docstring)."""
        return self.make is not None

    def first(self) -> Strategy | None:
        """What a search runs before the seeded schedules (None: nothing)."""
        return ReplayStrategy({}) if self.measure else None

    def strategy(self, seed: int, options: Options, length: int = 0) -> Strategy:
        """A seeded strategy's schedule of *seed*, *length* decisions measured."""
        assert self.make is not None, f"{self.name} is not seeded"
        return self.make(seed, options, max(length, 1))

    def search(self, options: Options) -> Search:
        return Search(self, options)


class Search:
    """One search's schedules under *recipe*, one after another.

    `first` (if not None) runs first; then `next` makes each schedule from
    its seed and the last run's log, until it returns None (an enumerating
    strategy ran out: `exhausted` says whether it ran all of its space).
    """

    __slots__ = ("_enumeration", "_options", "exhausted", "length", "recipe", "space")

    def __init__(self, recipe: Recipe, options: Options) -> None:
        self.recipe = recipe
        self._options = options
        #: The most decisions a run of this search met (seeded strategies).
        self.length = 0
        self.exhausted = False
        self._enumeration = None if recipe.enumerate is None else recipe.enumerate(options)
        #: The bounded space in words (None: a seeded search has no end).
        self.space = None if recipe.space is None else recipe.space(options)

    def first(self) -> Strategy | None:
        return self.recipe.first()

    def close(self) -> None:
        """The search ended (a failure, its budget): an enumeration that
        measures its runs (coverage) stops measuring."""
        close = getattr(self._enumeration, "close", None)
        if close is not None:
            close()

    def next(self, seed: int, last: DecisionLog | None) -> Strategy | None:
        """The next schedule's strategy: seed *seed*'s, after the run whose log is
        *last* (None: none yet, or it built no perturbed loop); None: the end."""
        if self._enumeration is not None:
            strategy = self._enumeration.next(last)
            if strategy is None:
                self.exhausted = self._enumeration.exhausted
            return strategy
        if last is not None:
            self.length = max(self.length, last.count)
        return self.recipe.strategy(seed, self._options, self.length)


class Systematic:
    """Every schedule with at most *bound* deviations, fewest first.

    Driven by the runs themselves: `next` takes the log of the run it
    handed out last and returns the strategy of the next run (the first is
    the unperturbed schedule), or None when every schedule of the bounded
    space has run. Each deviation is a point met by the run it deviates
    from, after that run's last deviation, so no set is tried twice in
    another order. `exhausted` is then True unless a run met more points
    than a log keeps (`LOG_LIMIT`): those points were never enumerated.
    """

    def __init__(self, bound: int = 2) -> None:
        if bound < 0:
            raise ValueError(f"bound must not be negative, not {bound!r}")
        self.bound = bound
        self.complete = True
        self.exhausted = False
        self._frontier: deque[tuple[dict[Point, int], list[Decision]]] = deque()
        self._pending: tuple[dict[Point, int], Point] | None = None
        self._started = False
        self._runs = 0
        self._children = self._enumerate()

    def _enumerate(self) -> Iterator[tuple[dict[Point, int], Point]]:
        frontier = self._frontier
        while frontier:
            devs, after = frontier.popleft()
            for decision in after:
                for value in range(1, decision.n):
                    yield {**devs, decision.point: value}, decision.point

    def next(self, last: DecisionLog | None) -> ReplayStrategy | None:
        if not self._started:
            self._started = True
            self._runs = 1
            return ReplayStrategy({}, label=f"systematic (bound {self.bound}), schedule 1")
        if last is not None:
            self.complete &= last.count <= LOG_LIMIT
            pending = self._pending
            if pending is None:
                if self.bound:
                    self._frontier.append(({}, last.decisions))
            else:
                devs, point = pending
                met = last.deviations.get(point)
                if met is not None and len(devs) < self.bound:
                    self._frontier.append((devs, last.decisions[met.index + 1 :]))
        child = next(self._children, None)
        if child is None:
            self._pending = None
            self.exhausted = self.complete
            return None
        self._pending = child
        self._runs += 1
        label = f"systematic (bound {self.bound}), schedule {self._runs}"
        return ReplayStrategy(child[0], label=label)


class Registry:
    """The strategies searches know, by name, in the order help texts list them."""

    __slots__ = ("_by_name",)

    def __init__(self, *recipes: Recipe) -> None:
        self._by_name = {recipe.name: recipe for recipe in recipes}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def seeded_names(self) -> tuple[str, ...]:
        """The strategies whose searches split over processes by seed."""
        return tuple(name for name, recipe in self._by_name.items() if recipe.seeded)

    def parallel_names(self) -> tuple[str, ...]:
        """The strategies a search runs over processes (seeded, or learning)."""
        return tuple(
            name for name, recipe in self._by_name.items() if recipe.seeded or recipe.learns
        )

    def learning(self, name: str, options: Options) -> Learning:
        """Strategy *name*'s enumeration, to run over an executor."""
        recipe = self.get(name)
        assert recipe.enumerate is not None and recipe.learns, f"{name} does not learn"
        enumeration: Any = recipe.enumerate(options)
        learning: Learning = enumeration
        return learning

    def get(self, name: str) -> Recipe:
        """The strategy named *name*; ValueError naming the known ones if none is."""
        recipe = self._by_name.get(name)
        if recipe is None:
            raise ValueError(f"strategy must be one of {', '.join(self.names)}, not {name!r}")
        return recipe

    def unused(self, name: str, given: set[str]) -> list[tuple[str, str]]:
        """The options among *given* (`Options` field names) that strategy
        *name* ignores, each with the strategies that take it."""
        recipe = self.get(name)
        return [
            (option, ", ".join(r.name for r in self._by_name.values() if option in r.uses))
            for option in sorted(given - recipe.uses)
        ]

    def described(self) -> str:
        """Every strategy with its words, for a help text: "a (...), b (...), or c (...)"."""
        parts = [f"{recipe.name} ({recipe.summary})" for recipe in self._by_name.values()]
        if len(parts) < 3:
            return " or ".join(parts)
        return f"{', '.join(parts[:-1])}, or {parts[-1]}"


STRATEGIES: Final = Registry(
    Recipe(
        "random",
        RandomStrategy,
        "a seed each",
        make=lambda seed, options, length: RandomStrategy(seed),
        by_seed=True,
    ),
    Recipe(
        "pct",
        PCTStrategy,
        "a seed each, depth change points over an unperturbed run's decisions",
        make=lambda seed, options, length: PCTStrategy(seed, depth=options.depth, length=length),
        measure=True,
        uses=frozenset({"depth"}),
    ),
    Recipe(
        "systematic",
        ReplayStrategy,
        "every schedule with at most bound deviations, fewest first",
        enumerate=lambda options: Systematic(options.bound),
        space=lambda options: f"every schedule with at most {options.bound} deviation(s)",
        uses=frozenset({"bound"}),
    ),
    Recipe(
        "coverage",
        ReplayStrategy,
        "mutates the schedules that reached new code, orderings or sometimes() sites, rarest first",
        enumerate=lambda options: Coverage(options.seed),
        learns=True,
    ),
)
