"""How fast one user's refusals may grow gbatchd.log.

Every refused request (and refused connection) is worth an audit line, but 50 refused
requests with 4 MB names once grew the log by 200 MB within seconds. Strings in log lines are
cut (handlers/audit.loggable); on top of that, each uid gets at most LINES refusal lines per
operation (connect, request, cancel, ...) in a window of WINDOW_SECONDS, opened by its
first such refusal. The refusals past that are counted, and when the window has ended
one line says how many:

    audit: user=bob uid=1002 op=connect -> and 4,812 more refusals in 10 s, not logged
    one by one (at most 10 lines per user and operation per 10 s)

So a flood adds at most LINES + 1 lines per user and operation per window, whatever its
rate; one user's flood does not hold back the lines of another, nor a flood of one kind
(refused connections) the lines of another kind (a slow request closed).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("gbatchd")
LINES = 10
WINDOW_SECONDS = 10.0


@dataclass
class _Window:
    opened: float
    user: str
    logged: int = 0
    unlogged: int = 0


class RefusalLines:
    """Decides which refusals get their line; writes the count of the others.

    Thread-safe: the socket's threads ask, the daemon's loop calls `close_ended`.
    """

    def __init__(
        self,
        monotonic: Callable[[], float],
        lines: int = LINES,
        window: float = WINDOW_SECONDS,
    ) -> None:
        self._monotonic = monotonic
        self._lines = lines
        self._window = window
        self._lock = threading.Lock()
        # (uid, operation) -> its window, while open
        self._windows: dict[tuple[int, str], _Window] = {}

    def admit(self, uid: int, user: str, op: str) -> bool:
        """Whether this refusal of `op` to `uid` gets its line; if not, it is counted.

        The count goes into the window's summary. `user` is `uid`'s name, already loggable.
        """
        now = self._monotonic()
        key = (uid, op)
        with self._lock:
            ended = self._pop_if_ended(key, now)
            window = self._windows.setdefault(key, _Window(now, user))
            admitted = window.logged < self._lines
            if admitted:
                window.logged += 1
            else:
                window.unlogged += 1
        if ended is not None:
            self._summarize(key, ended)
        return admitted

    def close_ended(self) -> None:
        """Write the summary of every window that has ended.

        The loop calls this each tick, so a flood that stopped is still counted in the log.
        """
        now = self._monotonic()
        with self._lock:
            ended = [(key, w) for key in list(self._windows) if (w := self._pop_if_ended(key, now))]
        for key, window in ended:
            self._summarize(key, window)

    def _pop_if_ended(self, key: tuple[int, str], now: float) -> _Window | None:
        window = self._windows.get(key)
        if window is None or now - window.opened < self._window:
            return None
        return self._windows.pop(key)

    def _summarize(self, key: tuple[int, str], window: _Window) -> None:
        uid, op = key
        if window.unlogged:
            log.warning(
                "audit: user=%s uid=%d op=%s -> and %s more refusals in %g s, not logged one "
                "by one (at most %d lines per user and operation per %g s)",
                window.user,
                uid,
                op,
                f"{window.unlogged:,}",
                self._window,
                self._lines,
                self._window,
            )
