"""Which of the API's connections to close so that slow clients cannot take it (issue 29).

Pure bookkeeping, time a parameter: api/server.py tells it of each connection's steps
from the event loop and closes what it says. A connection is *unfinished* from its
accept until its first request head is in (the TLS handshake included), and again from
the first byte of each later request on it until that head is in. Then:
  - an unfinished connection has `head_seconds` (from its accept, or from its request's
    first byte) and `head_bytes`; past either it is closed (`expired`, `too_large`);
  - one address holds at most `per_address` unfinished connections: past that, one of
    them is closed for the new one (a slowloris makes room for the other clients
    behind its address: local users on 127.0.0.1, a proxy's clients);
  - at most `connections` are open at once: past that an unfinished one is closed for
    the new one; with none unfinished, the new one is refused.
The one closed for room is the oldest that has had its TLS handshake and still sends
its head, else the oldest still in its handshake: a client that sends its head as soon
as its handshake is done is never the one, however fast a slowloris behind the same
address opens new connections. A finished connection (a request being served, or idle
between two, which uvicorn closes after its keep-alive timeout) is never closed for
room: it is a client being served.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

# Why a connection was closed or refused (the counts `took_counts` gives).
SLOW = "request head not in within the time allowed"
LARGE = "request head too large"
ADDRESS = "closed for a newer one, too many unfinished from its address"
ROOM = "closed for a newer connection, all connections in use"
FULL = "refused, all connections in use by requests"

OPENING, HEAD = 0, 1  # an unfinished connection's stage: in its TLS handshake, or after


class Closable(Protocol):
    """A connection the guard keeps account of (api/server.py's Entry)."""

    def drop(self, why: str) -> None:
        """Close it for `why`, one of this module's reasons."""


@dataclass(frozen=True)
class GuardLimits:
    """The limits on unfinished connections (docs/http-api.md, "Slow clients")."""

    head_seconds: float = 5.0
    per_address: int = 32
    connections: int = 1024
    head_bytes: int = 64 * 1024


def _stages() -> tuple[OrderedDict[Closable, None], OrderedDict[Closable, None]]:
    return OrderedDict(), OrderedDict()


@dataclass
class Guard:
    """The open connections, and the unfinished ones oldest first, by stage."""

    limits: GuardLimits = field(default_factory=GuardLimits)
    _open: dict[Closable, str] = field(default_factory=dict)  # connection -> its address
    # connection -> its deadline, oldest first (a phase begins later than every earlier one)
    _unfinished: OrderedDict[Closable, float] = field(default_factory=OrderedDict)
    _stage: dict[Closable, int] = field(default_factory=dict)
    _everyone: tuple[OrderedDict[Closable, None], ...] = field(default_factory=_stages)
    # address -> its unfinished connections by stage, oldest first
    _by_address: dict[str, tuple[OrderedDict[Closable, None], ...]] = field(default_factory=dict)
    _counts: Counter[str] = field(default_factory=Counter)  # why -> how many, till took_counts

    def opened(self, conn: Closable, address: str, now: float) -> tuple[bool, list[Closable]]:
        """A connection accepted from `address`: (may it go on, the ones to close for it).

        When it may not, it was never taken in: close it and say nothing more of it.
        """
        evicted = self._room_for(address)
        if len(self._open) >= self.limits.connections:
            oldest = _oldest(self._everyone)
            if oldest is None:
                self._counts[FULL] += 1
                return False, evicted
            self.closed(oldest)
            self._counts[ROOM] += 1
            evicted.append(oldest)
        self._open[conn] = address
        self._begin(conn, address, OPENING, now)
        return True, evicted

    def attached(self, conn: Closable) -> None:
        """`conn`'s TLS handshake is done (or it has none): its head comes next."""
        if self._stage.get(conn) == OPENING:
            self._set_stage(conn, HEAD)

    def head_started(self, conn: Closable, now: float) -> list[Closable]:
        """The first byte of a request on a kept-alive `conn`: the connections to close.

        None, or one of its address's unfinished ones when it has too many.
        """
        address = self._open.get(conn)
        if address is None or conn in self._unfinished:
            return []
        evicted = self._room_for(address)
        self._begin(conn, address, HEAD, now)
        return evicted

    def head_done(self, conn: Closable) -> None:
        """`conn`'s request head is in: it is finished until its next request begins."""
        if self._unfinished.pop(conn, None) is None:
            return
        stage = self._stage.pop(conn)
        del self._everyone[stage][conn]
        address = self._open[conn]
        mine = self._by_address[address]
        del mine[stage][conn]
        if not any(mine):
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

    @property
    def open_count(self) -> int:
        return len(self._open)

    @property
    def unfinished_count(self) -> int:
        return len(self._unfinished)

    def _room_for(self, address: str) -> list[Closable]:
        """Forget one of `address`'s unfinished connections when it has its most: the
        connections to close (none, or that one)."""
        mine = self._by_address.get(address)
        if mine is None or sum(map(len, mine)) < self.limits.per_address:
            return []
        oldest = _oldest(mine)
        assert oldest is not None
        self.closed(oldest)
        self._counts[ADDRESS] += 1
        return [oldest]

    def _begin(self, conn: Closable, address: str, stage: int, now: float) -> None:
        self._unfinished[conn] = now + self.limits.head_seconds
        self._stage[conn] = stage
        self._everyone[stage][conn] = None
        self._by_address.setdefault(address, _stages())[stage][conn] = None

    def _set_stage(self, conn: Closable, stage: int) -> None:
        before = self._stage[conn]
        self._stage[conn] = stage
        del self._everyone[before][conn]
        self._everyone[stage][conn] = None
        mine = self._by_address[self._open[conn]]
        del mine[before][conn]
        mine[stage][conn] = None


def _oldest(stages: tuple[OrderedDict[Closable, None], ...]) -> Closable | None:
    """The one to close for room: the oldest sending its head, else the oldest opening."""
    for stage in (HEAD, OPENING):
        if stages[stage]:
            return next(iter(stages[stage]))
    return None
