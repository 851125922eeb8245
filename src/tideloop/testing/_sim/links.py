"""Links: what a message from one simulated host to another goes through.

Layer: testing (the simulation's lowest part: it knows hosts by name only,
and nothing of sockets). `Links` is the state of the wire between hosts that
a test author sets (``SimNetwork.set_link``, ``partition``, ``heal``) and
the kernel model reads as it delivers (``kernel``):

- a `Link` per direction of a pair of hosts: a latency range, a bandwidth
  (its ``busy_until`` queues messages behind each other), UDP loss and
  duplication, and *split* (the probability that a TCP send arrives in
  pieces). A pair nobody configured has the network's defaults;
- the partitions: the (from, to) pairs whose messages are held (TCP) or
  dropped (UDP) until healed.

Nothing here draws a random number: the kernel model draws each latency,
loss, duplication and split from the network's one generator, in the order
messages are sent, so that a seed replays.

Invariants:
- A built link (``_built``) is a copy of its pair's configuration, or of
  the defaults, taken on first use; configuring a pair drops its built
  links, so the next message uses the new values (and a fresh bandwidth
  queue).
- Every value a link holds was validated when it was set: a latency
  ``0 <= low <= high``, probabilities in ``0 .. 1``, a bandwidth > 0 or None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

#: Seconds a message takes, drawn uniformly from this range per message.
DEFAULT_LATENCY: Final = (0.0005, 0.002)

Pair = tuple[str, str]


class Link:
    """What messages from one host to another go through (one direction)."""

    __slots__ = ("bandwidth", "busy_until", "duplicate", "latency", "loss", "split")

    def __init__(self, template: Link | None = None) -> None:
        self.latency: tuple[float, float] = DEFAULT_LATENCY
        self.loss = 0.0
        self.duplicate = 0.0
        self.split = 0.0
        self.bandwidth: float | None = None
        if template is not None:
            self.latency = template.latency
            self.loss = template.loss
            self.duplicate = template.duplicate
            self.split = template.split
            self.bandwidth = template.bandwidth
        self.busy_until = 0.0

    def set(
        self,
        latency: tuple[float, float] | None,
        loss: float | None,
        duplicate: float | None,
        split: float | None,
        bandwidth: float | None,
    ) -> None:
        """Set what is given (not None), each value checked as it is set."""
        if latency is not None:
            self.latency = _check_latency(latency)
        if loss is not None:
            self.loss = _check_probability("loss", loss)
        if duplicate is not None:
            self.duplicate = _check_probability("duplicate", duplicate)
        if split is not None:
            self.split = _check_probability("split", split)
        if bandwidth is not None:
            if bandwidth < 0:
                raise ValueError(f"bandwidth must be >= 0 bytes a second, not {bandwidth!r}")
            self.bandwidth = float(bandwidth) or None


def _check_latency(value: tuple[float, float]) -> tuple[float, float]:
    low, high = float(value[0]), float(value[1])
    if not 0 <= low <= high:
        raise ValueError(f"latency must be 0 <= low <= high, not {value!r}")
    return low, high


def _check_probability(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability (0 to 1), not {value!r}")
    return value


class Links:
    """Every link between hosts, and the partitions (see the module docstring)."""

    __slots__ = ("_built", "_config", "_cut", "_default")

    def __init__(self, default: Link) -> None:
        #: What a pair nobody configured goes through.
        self._default = default
        self._config: dict[Pair, Link] = {}
        self._built: dict[Pair, Link] = {}
        self._cut: set[Pair] = set()

    def link(self, src: str, dst: str) -> Link:
        """The link messages from host *src* to host *dst* go through."""
        pair = (src, dst)
        link = self._built.get(pair)
        if link is None:
            link = self._built[pair] = Link(self._config.get(pair, self._default))
        return link

    def configure(self, pairs: list[Pair], change: Callable[[Link], None]) -> None:
        """Apply *change* to the configuration of each of *pairs* (the defaults',
        copied, for a pair not configured yet)."""
        for pair in pairs:
            config = self._config.get(pair)
            if config is None:
                config = self._config[pair] = Link(self._default)
            change(config)
            self._built.pop(pair, None)  # rebuilt from the configuration on next use

    # -- partitions ----------------------------------------------------------

    @property
    def partitions(self) -> frozenset[Pair]:
        """The (from, to) pairs of hosts whose messages are held now."""
        return frozenset(self._cut)

    def is_cut(self, src: str, dst: str) -> bool:
        return (src, dst) in self._cut

    def partition(self, a: str, b: str, *, oneway: bool) -> None:
        self._cut.add((a, b))
        if not oneway:
            self._cut.add((b, a))

    def heal(self, a: str | None, b: str | None, *, oneway: bool) -> None:
        """End partitions: between *a* and *b* (one way if *oneway*), every one
        of *a*'s if *b* is None, every one if *a* is None too."""
        if a is None:
            self._cut.clear()
        elif b is None:
            self._cut = {pair for pair in self._cut if a not in pair}
        else:
            self._cut.discard((a, b))
            if not oneway:
                self._cut.discard((b, a))
