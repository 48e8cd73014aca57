"""Which of the API's connections to close so that slow clients cannot take it (issue 29).

Pure bookkeeping, time a parameter: api/server.py tells it of each connection's steps
from the event loop and closes what it says. A connection is *unfinished* from its
accept until its first request head is in (the TLS handshake included), and again from
the first byte of each later request on it until that head is in. Then:
  - an unfinished connection has `head_seconds` (from its accept, or from its request's
    first byte) and `head_bytes`; past either it is closed (`expired`);
  - one address holds at most `per_address` unfinished connections: past that, its
    oldest unfinished one is closed for the new one (a slowloris makes room for the
    other clients behind its address: local users on 127.0.0.1, a proxy's clients);
  - at most `connections` are open at once: past that the oldest unfinished one is
    closed to make room for the new one; with none unfinished, the new one is refused.
A finished connection (a request being served, or idle between two, which uvicorn closes
after its keep-alive timeout) is never closed for room: it is a client being served.
So a slowloris holds at most `per_address` connections per address, each for at most
`head_seconds`, and a client whose head comes at once is served beside it: a
connection is closed for room only when it is the oldest unfinished one.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

# Why a connection was closed or refused (the counts in `Guard.closed_since`).
SLOW = "request head not in within the time allowed"
LARGE = "request head too large"
ADDRESS = "closed for a newer one, too many unfinished from its address"
ROOM = "closed for a newer connection, all connections in use"
FULL = "refused, all connections in use by requests"


class Closable(Protocol):
    """A connection the guard keeps account of (api/server.py's GuardedHttp)."""

    def drop(self, why: str) -> None:
        """Close it for `why`, one of this module's reasons."""


@dataclass(frozen=True)
class GuardLimits:
    """The limits on unfinished connections (`gbatch api serve`'s, see docs/http-api.md)."""

    head_seconds: float = 5.0
    per_address: int = 32
    connections: int = 1024
    head_bytes: int = 64 * 1024


@dataclass
class Guard:
    """The open connections and the unfinished ones, in the order their phases began."""

    limits: GuardLimits = field(default_factory=GuardLimits)
    _open: dict[Closable, str] = field(default_factory=dict)  # connection -> its address
    # connection -> its deadline, oldest first (a phase begins later than every earlier one)
    _unfinished: OrderedDict[Closable, float] = field(default_factory=OrderedDict)
    # address -> its unfinished connections, oldest first
    _by_address: dict[str, OrderedDict[Closable, None]] = field(default_factory=dict)
    # why -> how many, since the last look (`took_counts`)
    _counts: Counter[str] = field(default_factory=Counter)

    def opened(self, conn: Closable, address: str, now: float) -> tuple[bool, list[Closable]]:
        """A connection accepted from `address`: (may it go on, the ones to close for it).

        When it may not, it was never taken in: close it and say nothing more of it.
        """
        evicted = self._room_for(address)
        if len(self._open) >= self.limits.connections:
            if not self._unfinished:
                self._counts[FULL] += 1
                return False, evicted
            oldest = next(iter(self._unfinished))
            self.closed(oldest)
            self._counts[ROOM] += 1
            evicted.append(oldest)
        self._open[conn] = address
        self._begin(conn, address, now)
        return True, evicted

    def head_started(self, conn: Closable, now: float) -> list[Closable]:
        """The first byte of a request on a kept-alive `conn`: the connections to close
        for it (its address's oldest unfinished one, when it has too many)."""
        address = self._open.get(conn)
        if address is None or conn in self._unfinished:
            return []
        evicted = self._room_for(address)
        self._begin(conn, address, now)
        return evicted

    def head_done(self, conn: Closable) -> None:
        """`conn`'s request head is in: it is finished until its next request begins."""
        if self._unfinished.pop(conn, None) is None:
            return
        address = self._open[conn]
        mine = self._by_address[address]
        del mine[conn]
        if not mine:
            del self._by_address[address]

    def closed(self, conn: Closable) -> None:
        """`conn` is closed (or about to be): forget it."""
        self.head_done(conn)
        self._open.pop(conn, None)

    def expired(self, now: float) -> list[Closable]:
        """The unfinished connections whose time is out, forgotten: close each."""
        late: list[Closable] = []
        for conn, deadline in self._unfinished.items():
            if deadline > now:
                break
            late.append(conn)
        for conn in late:
            self.closed(conn)
        self._counts[SLOW] += len(late)
        return late

    def too_large(self, size: int) -> bool:
        """Whether an unfinished request head of `size` bytes so far must be closed."""
        if size <= self.limits.head_bytes:
            return False
        self._counts[LARGE] += 1
        return True

    def took_counts(self) -> dict[str, int]:
        """How many connections were closed or refused, by why, since the last call."""
        counts = {why: n for why, n in self._counts.items() if n}
        self._counts.clear()
        return counts

    def _room_for(self, address: str) -> list[Closable]:
        """Forget `address`'s oldest unfinished connection when it has its most: the
        connections to close (none or that one)."""
        mine = self._by_address.get(address)
        if mine is None or len(mine) < self.limits.per_address:
            return []
        oldest = next(iter(mine))
        self.closed(oldest)
        self._counts[ADDRESS] += 1
        return [oldest]

    def _begin(self, conn: Closable, address: str, now: float) -> None:
        self._unfinished[conn] = now + self.limits.head_seconds
        self._by_address.setdefault(address, OrderedDict())[conn] = None

    @property
    def open_count(self) -> int:
        return len(self._open)

    @property
    def unfinished_count(self) -> int:
        return len(self._unfinished)
