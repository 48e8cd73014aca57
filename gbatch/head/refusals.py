"""How fast one user's refusals may grow gbatchd.log.

Every refused request (and refused connection) is worth an audit line, but 50 refused
requests with 4 MB names once grew the log by 200 MB within seconds. Strings in log lines are
cut (core/loglines.loggable); on top of that, each party (a uid; for a token gbatchd could
not verify, the address the HTTP API saw it from) gets at most LINES refusal lines per
operation (connect, request, cancel, ...) in a window of WINDOW_SECONDS, opened by its
first such refusal. The refusals past that are counted, and when the window has ended
one line says how many:

    audit: user=bob uid=1002 op=connect -> and 4,812 more refusals in 10 s, not logged
    one by one (at most 10 lines per user and operation per 10 s)

So a flood adds at most LINES + 1 lines per party and operation per window, whatever
its rate; one user's flood does not hold back the lines of another, nor a flood of one
kind (refused connections) the lines of another kind (a slow request closed). The
budget is core/loglines.LineBudget, the one throttle of the daemon's log, which also
bounds the lines of bugs (InternalErrors).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gbatch.core.loglines import LINES, WINDOW_SECONDS, LineBudget

log = logging.getLogger("gbatchd")
__all__ = ["LINES", "WINDOW_SECONDS", "RefusalLines"]
# Client addresses with a refusal budget of their own at once; the others share one.
MAX_CLIENTS = 4
OTHER_CLIENTS = "client=(others)"


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
        self._budget: LineBudget[tuple[str, str]] = LineBudget(
            monotonic, self._summarize, lines, window
        )
        # Client addresses come from the HTTP API, or from whoever sends with_token: at
        # most MAX_CLIENTS of them have windows of their own at once, so that made-up
        # addresses cannot multiply the lines.
        self._clients: LineBudget[tuple[str, str]] = LineBudget(
            monotonic,
            self._summarize,
            lines,
            window,
            max_keys=MAX_CLIENTS,
            overflow=lambda key: (OTHER_CLIENTS, key[1]),
        )

    def admit(self, party: str, op: str) -> bool:
        """Whether this refusal of `op` to `party` gets its line; if not, it is counted.

        `party` is who the line is charged to as the line names them, loggable already:
        `user=bob uid=1002`, or `client=203.0.113.9` for a token nobody signed. The
        count goes into the window's summary.
        """
        budget = self._clients if party.startswith("client=") else self._budget
        return budget.admit((party, op))

    def close_ended(self) -> None:
        """Write the summary of every window that has ended.

        The loop calls this each tick, so a flood that stopped is still counted in the log.
        """
        self._budget.close_ended()
        self._clients.close_ended()

    def _summarize(self, key: tuple[str, str], unlogged: int) -> None:
        party, op = key
        window = self._budget.window
        log.warning(
            "audit: %s op=%s -> and %s more refusals in %g s, not logged one by one (at "
            "most %d lines per user and operation per %g s)",
            party,
            op,
            f"{unlogged:,}",
            window,
            self._budget.lines,
            window,
        )
