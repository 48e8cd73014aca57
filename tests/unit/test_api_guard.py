"""The API's guard against slow clients (gbatch/api/guard.py) on a clock the test sets:
what it closes, and what it never closes."""

from __future__ import annotations

from gbatch.api import guard as guards
from gbatch.api.guard import Guard, GuardLimits


class Conn:
    def __init__(self, name: str) -> None:
        self.name = name
        self.dropped: list[str] = []

    def drop(self, why: str) -> None:
        self.dropped.append(why)

    def __repr__(self) -> str:
        return self.name


def test_a_head_that_comes_in_time_is_never_closed_and_a_late_one_is() -> None:
    guard = Guard(GuardLimits(head_seconds=5))
    quick, slow = Conn("quick"), Conn("slow")
    assert guard.opened(quick, "10.0.0.1", 0.0) == (True, [])
    assert guard.opened(slow, "10.0.0.2", 1.0) == (True, [])
    guard.attached(quick)
    guard.head_done(quick)
    assert guard.expired(5.9) == []
    assert guard.expired(6.0) == [slow]
    assert guard.unfinished_count == 0 and guard.open_count == 1
    # A kept-alive connection's next request has its own time from its first byte.
    assert guard.head_started(quick, 100.0) == []
    assert guard.expired(104.9) == [] and guard.expired(105.0) == [quick]
    assert guard.took_counts() == {guards.SLOW: 2} and guard.took_counts() == {}


def test_an_address_past_its_share_closes_its_own_oldest_head_never_a_fresh_handshake() -> None:
    guard = Guard(GuardLimits(per_address=3))
    slow = [Conn(f"slow{i}") for i in range(3)]
    for i, conn in enumerate(slow):
        guard.opened(conn, "127.0.0.1", float(i))
        guard.attached(conn)  # handshake done; its head trickles
    other = Conn("other")  # another address: not its business
    assert guard.opened(other, "10.0.0.9", 3.0) == (True, [])
    newcomer = Conn("newcomer")  # a user on the same address, in its handshake
    assert guard.opened(newcomer, "127.0.0.1", 4.0) == (True, [slow[0]])
    # The slowloris opens again, and again: its own connections make the room.
    again = [Conn(f"again{i}") for i in range(3)]
    evicted = []
    for conn in again:
        admitted, closed = guard.opened(conn, "127.0.0.1", 5.0)
        assert admitted
        evicted += closed
        guard.attached(conn)
    assert evicted == [slow[1], slow[2], again[0]] and newcomer not in evicted
    guard.attached(newcomer)
    guard.head_done(newcomer)  # its request is in: it is a client being served
    assert guard.took_counts() == {guards.ADDRESS: 4}


def test_with_every_connection_open_the_oldest_unfinished_makes_room_else_the_new_is_refused() -> (
    None
):
    guard = Guard(GuardLimits(connections=2, per_address=10))
    served, slow = Conn("served"), Conn("slow")
    guard.opened(served, "10.0.0.1", 0.0)
    guard.attached(served)
    guard.head_done(served)
    guard.opened(slow, "10.0.0.2", 1.0)
    fresh = Conn("fresh")
    assert guard.opened(fresh, "10.0.0.3", 2.0) == (True, [slow])
    guard.attached(fresh)
    guard.head_done(fresh)
    assert guard.opened(Conn("late"), "10.0.0.4", 3.0) == (False, [])  # none to close
    assert guard.open_count == 2
    guard.closed(served)
    guard.closed(served)  # closing twice (evicted, then its connection_lost) is no harm
    assert guard.opened(Conn("next"), "10.0.0.4", 4.0)[0]
    assert guard.took_counts() == {guards.ROOM: 1, guards.FULL: 1}


def test_a_head_past_its_size_is_too_large() -> None:
    guard = Guard(GuardLimits(head_bytes=100))
    assert not guard.too_large(100)
    assert guard.too_large(101)
    assert guard.took_counts() == {guards.LARGE: 1}
