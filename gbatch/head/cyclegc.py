"""CPython's cyclic garbage collector kept out of gbatchd's loop passes (issue 16).

The collector makes a full (generation 2) collection each time the objects that outlived
two younger collections have grown by a quarter since the last full one, and a full
collection walks every tracked object. Most of gbatchd's heap lives as long as the
daemon, or as long as the jobs it stands for: the modules, and the loop's window (at
100,000 pending jobs of 50 users, 50,000 planning Jobs and their maps). A full
collection over them took longer than a whole pass in whichever pass's allocation set
it off, the more so once the window had grown (bench/bench_plan.py --loop), and found
nothing to free: a Job, its planning spec and the window's maps hold no reference cycles, so
reference counting frees them when they leave (every full collection that bench
timed found 0 objects).

`LoopCollector` keeps what has lived through a loop pass frozen (gc.freeze: moved to a
generation that no collection walks; a frozen object is still freed by its reference
count, as ever), so the collector's own collections walk only what was made since the
last pass:

- `start()`, once before the first pass: a full collection (the start-up's heap:
  imports, config, nodes), then all of it frozen.
- `after_pass()`, at the end of each pass: what is alive is frozen, without a
  collection (O(1)). A collection here would walk what the pass left young, which is
  more than what it made: a dict whose values the collector had untracked (the window's
  map of queue keys, 50,000 tuples of numbers) is tracked again by an insert, and walking
  it costs each pass that changes the window; frozen while tracked, it is never
  walked again. Young garbage cycles are still collected by the collector's young
  collections between passes (one every 700 net allocations; a freeze restarts that
  count, so a cycle dead and not yet collected at a pass's end is frozen: below).
- The one garbage that freezing keeps is a reference cycle that was alive, or dead but
  not yet collected, at a pass's end (reference counts cannot free a cycle, and no
  collection walks frozen objects). `full_when_due()`, which the loop calls after each
  step, thaws everything every `full_seconds`, or sooner once the frozen heap has grown
  by a quarter since (`full_growth`: CPython's own rule), when no wake-up is waiting (or
  at twice the period, waiting or not), collects once (the whole walk, longer than a
  pass: bench/bench_plan.py) and freezes the survivors again. The heap then
  holds at most the cycles of one period; the collector
  left to itself holds cyclic garbage that reached the oldest generation until the heap
  grows by a quarter. None was found in gbatchd's loop (bench_plan.py --loop: a whole
  collection after 1,000 passes of submits and cancels, and after 1,000 more with new
  users, found 0 objects, on main too).

Nothing happens before `start()`: a Daemon built in a test or a tool leaves its process's
collector as it was. The collector is the process's, so only gbatchd's own loop
(Daemon.run_loop) starts this.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

# At most this long apart, and only between passes with nothing waiting, the frozen heap
# is thawed and collected whole: the bound on how long a cycle that outlived a pass stays.
FULL_COLLECTION_SECONDS = 300.0
# ... and sooner, at the loop's first idle moment once the frozen heap holds this share
# more objects than the last whole collection left: CPython's own rule for a full
# collection (the long-lived objects grown by a quarter), kept out of the passes. It
# frees at once what a cycle holds that was alive at a pass's end, as a long listing's
# reply in a handler thread can be (bench_memory.py: 50 MiB more than main's, settled,
# with the period alone).
FULL_COLLECTION_GROWTH = 0.25
# ... looked at no more often than this, and only when the loop is idle: the frozen heap's
# size (gc.get_freeze_count) is counted by walking it, ~1 ms per 200,000 objects, and the
# loop calls full_when_due after every step (issue 35: a third of gbatchd's CPU while jobs
# started at 15/s went to that count).
GROWTH_CHECK_SECONDS = 1.0


class LoopCollector:
    """The cyclic GC's work, done at the moments the loop picks (see the module docstring).

    Called from the loop's thread only.
    """

    def __init__(
        self,
        full_seconds: float = FULL_COLLECTION_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        full_growth: float = FULL_COLLECTION_GROWTH,
    ) -> None:
        self.full_seconds = full_seconds
        self.full_growth = full_growth
        self.monotonic = monotonic
        self.started = False
        self._last_full = 0.0
        self._frozen_after_full = 0  # objects frozen when the last whole collection ended
        self._next_growth_check = 0.0  # monotonic time the frozen heap may next be counted
        # Objects the collections found unreachable (freed), since start: tests, metrics.
        self.collected = 0
        self.full_collections = 0

    def start(self) -> None:
        """Collect the start-up's heap whole, and freeze what is left of it."""
        self.collected += gc.collect()
        gc.freeze()
        self.started = True
        self._last_full = self.monotonic()
        self._frozen_after_full = gc.get_freeze_count()

    def after_pass(self) -> None:
        """Freeze what the pass left alive, without a collection (see the module docstring).

        Nothing before start().
        """
        if self.started:
            gc.freeze()

    def full_when_due(self, idle: bool = True) -> bool:
        """Collect the whole heap when due and the loop is idle, or long overdue; True if it did.

        It is due when `full_seconds` have passed since the last whole collection, or the
        frozen heap has grown by `full_growth` since, and then waits for the loop to be
        `idle` (no wake-up waiting: the heap's walk delays no pass). At twice `full_seconds`
        it runs whatever the loop's state: a loop never idle must not keep cyclic garbage
        for good. Growth alone waits, as a restart's spread read grows the heap by its
        window, which holds no cycles; it is counted at most every GROWTH_CHECK_SECONDS,
        when idle (the count walks the frozen heap). A collection thaws the heap, collects
        it whole and freezes what is left.
        """
        if not self.started:
            return False
        now = self.monotonic()
        elapsed = now - self._last_full
        if elapsed < 2 * self.full_seconds:
            if not idle:
                return False
            if elapsed < self.full_seconds:  # due only if grown: counted once a second at most
                if now < self._next_growth_check:
                    return False
                self._next_growth_check = now + GROWTH_CHECK_SECONDS
                if gc.get_freeze_count() <= self._frozen_after_full * (1 + self.full_growth):
                    return False
        gc.unfreeze()
        self.collected += gc.collect()
        gc.freeze()
        self.full_collections += 1
        self._last_full = self.monotonic()
        self._frozen_after_full = gc.get_freeze_count()
        return True
