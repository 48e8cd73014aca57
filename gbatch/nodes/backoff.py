"""Delays for retry loops (an SSH reconnect, a crashed agent's restart)."""

from __future__ import annotations

from collections.abc import Callable


class Backoff:
    """Delays for a reconnect loop: initial, initial*factor, ... capped at maximum.

    With `random` (a function returning [0, 1)), each delay is drawn from [d/2, d) so that
    nodes lost together do not reconnect in lockstep. Pure: it never sleeps or reads time.
    """

    def __init__(
        self,
        initial: float = 0.5,
        factor: float = 2.0,
        maximum: float = 30.0,
        random: Callable[[], float] | None = None,
    ) -> None:
        if initial <= 0 or factor < 1 or maximum < initial:
            raise ValueError("need initial > 0, factor >= 1 and maximum >= initial")
        self._initial = initial
        self._factor = factor
        self._maximum = maximum
        self._random = random
        self._next = initial

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * self._factor, self._maximum)
        if self._random is None:
            return delay
        return delay / 2 + self._random() * delay / 2

    def reset(self) -> None:
        """Call after a successful connect."""
        self._next = self._initial
