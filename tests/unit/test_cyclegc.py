"""The loop's share of CPython's cyclic GC (gbatch/head/cyclegc.py): what lived through a
pass is frozen out of the collector's walks, still freed by reference counts; a cycle
that outlived a pass is freed by the periodic whole collection; nothing happens to a
process whose loop never started it; a loop that submits and cancels keeps no garbage.

Every test that starts a collector thaws the heap again at its end: a frozen heap in
the test process would hide the cycles of the tests after it from their collections."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Iterator

import pytest

from gbatch.core.model import JobSpec
from gbatch.head.cyclegc import LoopCollector
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle

STRANGER = Caller(uid=4321, user="stranger", pid=3)


class Node:
    """A tracked object that can be weak-referenced and put in a cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None
        self.payload: list[Node] = []


def is_walked(obj: object) -> bool:
    """Whether a collection would walk `obj` (gc.get_objects leaves the frozen out)."""
    return any(each is obj for each in gc.get_objects())


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def thawed_after() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_nothing_is_frozen_or_collected_before_start() -> None:
    collector = LoopCollector(full_seconds=0.0)
    frozen = gc.get_freeze_count()
    young = Node()
    collector.after_pass()
    assert collector.full_when_due() is False
    assert gc.get_freeze_count() == frozen
    assert is_walked(young)


def test_what_lived_through_a_pass_is_frozen_and_still_freed_by_its_count(
    thawed_after: None,
) -> None:
    collector = LoopCollector()
    collector.start()
    assert gc.get_freeze_count() > 0  # the start-up's heap
    job = Node()
    assert is_walked(job)
    collector.after_pass()
    assert not is_walked(job)
    gone = weakref.ref(job)
    del job  # no cycle: its reference count frees it, frozen or not
    assert gone() is None


def test_a_cycle_that_outlived_a_pass_is_freed_by_the_periodic_whole_collection(
    thawed_after: None,
) -> None:
    clock = Clock()
    collector = LoopCollector(full_seconds=300.0, monotonic=clock)
    collector.start()
    first, second = Node(), Node()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    collector.after_pass()
    del first, second
    gc.collect()  # the collector's own collections never walk the frozen
    assert gone() is not None
    clock.now += 299.0
    assert collector.full_when_due() is False
    assert gone() is not None
    clock.now += 1.0
    before = collector.collected
    assert collector.full_when_due() is True
    assert gone() is None
    assert collector.collected - before >= 2
    assert collector.full_collections == 1
    survivor = Node()
    collector.after_pass()
    assert not is_walked(survivor)  # frozen again after the whole collection


def test_a_large_cycle_that_outlived_a_pass_is_freed_at_once_the_heap_grew_a_quarter(
    thawed_after: None,
) -> None:
    """As a long listing's reply in a handler thread: much frozen at a pass's end, then
    dropped in a cycle. The next idle moment collects it whole, without waiting for the
    period (CPython's own rule: the long-lived heap grown by a quarter)."""
    clock = Clock()
    collector = LoopCollector(full_seconds=300.0, monotonic=clock)
    collector.start()
    holder = Node()
    holder.other = holder
    holder.payload = [Node() for _ in range(gc.get_freeze_count() // 3)]
    gone = weakref.ref(holder)
    collector.after_pass()
    del holder
    assert gone() is not None
    assert collector.full_when_due(idle=False) is False  # growth waits for an idle loop
    assert collector.full_when_due() is True  # the clock has not moved
    assert gone() is None
    assert collector.full_when_due() is False  # the heap is back to its size


def test_a_loop_never_idle_still_collects_whole_at_twice_the_period(thawed_after: None) -> None:
    clock = Clock()
    collector = LoopCollector(full_seconds=300.0, monotonic=clock)
    collector.start()
    first, second = Node(), Node()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    collector.after_pass()
    del first, second
    clock.now += 300.0
    assert collector.full_when_due(idle=False) is False  # a pass is waiting: not yet
    clock.now += 299.0
    assert collector.full_when_due(idle=False) is False
    clock.now += 1.0
    assert collector.full_when_due(idle=False) is True
    assert gone() is None


def test_young_garbage_cycles_are_still_collected_between_passes(thawed_after: None) -> None:
    collector = LoopCollector()
    collector.start()
    collector.after_pass()
    first, second = Node(), Node()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    del first, second
    gc.collect(0)  # the collector's young collection, after 700 allocations
    assert gone() is None


def test_the_loop_starts_the_collector_freezes_after_each_step_and_collects_when_idle(
    daemon: Daemon, thawed_after: None
) -> None:
    daemon.collector.full_seconds = 0.0  # a whole collection at each idle moment
    loop = threading.Thread(target=daemon.run_loop)
    loop.start()
    try:
        deadline = time.monotonic() + 30
        while daemon.collector.full_collections < 2:
            assert time.monotonic() < deadline, "the idle loop never collected whole"
            daemon.wake.set()  # a pass now, then idle again
            time.sleep(0.01)
    finally:
        daemon.stop()
        loop.join()
    assert daemon.collector.started
    assert gc.get_freeze_count() > 0  # left frozen by the last step or collection


def test_a_daemon_that_never_ran_its_loop_leaves_the_collector_alone(daemon: Daemon) -> None:
    frozen = gc.get_freeze_count()
    daemon.step()
    daemon.step()
    assert gc.get_freeze_count() == frozen
    assert not daemon.collector.started


def test_a_loop_submitting_and_cancelling_for_a_while_keeps_no_garbage(
    daemon: Daemon, thawed_after: None
) -> None:
    """Requests between passes (submits, listings, cancels, a refused cancel, a bad
    request), the heap frozen after each pass: the periodic whole collection finds as
    little after 200 passes as after 10 (neither the loop nor the handlers make cycles
    that outlive a pass), and the frozen heap stops growing."""
    spec = JobSpec(name="churn", command=("true",), gpus=8).to_dict()  # never fits
    for user in range(5):
        handle(daemon, Caller(1000 + user, f"user{user}", 1), {"op": "submit", "spec": spec})
    daemon.collector.start()

    def churn(passes: int) -> tuple[int, int]:
        for n in range(passes):
            caller = Caller(1000 + n % 5, f"user{n % 5}", 1)
            ids = handle(daemon, caller, {"op": "submit", "spec": spec, "count": 2})["ids"]
            # squeue's listing (columns): the brief records' one keeps up to 20,000 of
            # them (listings.BriefRecords), and each pass here lists 2 new jobs.
            handle(daemon, caller, {"op": "jobs", "columns": True})
            handle(daemon, STRANGER, {"op": "cancel", "ids": ids[:1]})  # refused
            handle(daemon, caller, {"op": "submit", "spec": {"nonsense": 1}})  # refused
            handle(daemon, caller, {"op": "cancel", "ids": ids})
            daemon.step()
        before = daemon.collector.collected
        daemon.collector.full_seconds = 0.0
        assert daemon.collector.full_when_due()
        daemon.collector.full_seconds = 300.0
        return daemon.collector.collected - before, gc.get_freeze_count()

    found_short, _ = churn(10)
    _, frozen_settled = churn(50)  # caches and counters settle
    found_long, frozen_long = churn(200)
    assert gc.garbage == []
    assert found_long <= found_short + 10
    # The queue is the same size: the frozen heap grows by no pass's leftovers. (Measured
    # from after the settling passes: after 10, the count depends on where the young
    # collections happened to fall, and moved by ~200 with any new schema migration.)
    assert frozen_long <= frozen_settled + 100


def test_the_frozen_heap_is_counted_once_a_second_at_most_and_never_while_busy(
    thawed_after: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gc.get_freeze_count walks the whole frozen heap (~1 ms per 200,000 objects); the
    loop asks after every step, so counting at each took a third of gbatchd's CPU while
    jobs started at 15/s (issue 35)."""
    clock = Clock()
    collector = LoopCollector(full_seconds=300.0, monotonic=clock)
    collector.start()
    counts = []
    real = gc.get_freeze_count
    monkeypatch.setattr(gc, "get_freeze_count", lambda: counts.append(1) or real())
    for _ in range(1000):
        assert collector.full_when_due(idle=False) is False
    assert counts == []  # a pass waiting: growth waits, uncounted
    for _ in range(1000):
        assert collector.full_when_due() is False
    assert len(counts) == 1
    clock.now += 1.0
    assert collector.full_when_due() is False
    assert len(counts) == 2
