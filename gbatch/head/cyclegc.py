"""CPython's cyclic garbage collector kept out of gbatchd's loop passes (issue 16).

The collector makes a full (generation 2) collection each time the objects that outlived
two younger collections have grown by a quarter since the last full one, and a full
collection walks every tracked object. Most of gbatchd's heap lives as long as the
daemon, or as long as the jobs it stands for: the modules, and the loop's window (at
100,000 pending jobs of 50 users, 50,000 planning Jobs and their maps, ~80,000 tracked
objects in all). A full collection over them took 28-31 ms in whichever pass's
allocation set it off (one of a first read's ~11 ms passes took 32-34 ms), 60-116 ms
once the window had grown to ~100,000 (bench_plan.py --loop), and found nothing to
free: a Job, its planning spec and the window's maps hold no reference cycles, so
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
  it costs ~2 ms a pass that changes the window; frozen while tracked, it is never
  walked again. Young garbage cycles are still collected by the collector's young
  collections between passes (one every 700 net allocations; a freeze restarts that
  count, so a cycle dead and not yet collected at a pass's end is frozen: below).
- The one garbage that freezing keeps is a reference cycle that was alive, or dead but
  not yet collected, at a pass's end (reference counts cannot free a cycle, and no
  collection walks frozen objects). `full_when_due()`, which the loop calls only when no
  wake-up is waiting, thaws everything at most every `full_seconds`, collects once (the
  whole walk: 40-90 ms of CPU at 100,000 pending in bench_plan.py) and freezes the
  survivors again. The heap then holds at most the cycles of one period; the collector
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

# At most this often, and only between passes with nothing waiting, the frozen heap is
# thawed and collected whole: the bound on how long a cycle that outlived a pass stays.
FULL_COLLECTION_SECONDS = 300.0


class LoopCollector:
    """The cyclic GC's work at the loop's chosen moments (module docstring). Called from
    the loop's thread only."""

    def __init__(
        self,
        full_seconds: float = FULL_COLLECTION_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.full_seconds = full_seconds
        self.monotonic = monotonic
        self.started = False
        self._last_full = 0.0
        # Objects the collections found unreachable (freed), since start: tests, metrics.
        self.collected = 0
        self.full_collections = 0

    def start(self) -> None:
        """Collect the start-up's heap whole, and freeze what is left of it."""
        self.collected += gc.collect()
        gc.freeze()
        self.started = True
        self._last_full = self.monotonic()

    def after_pass(self) -> None:
        """Freeze what the pass left alive (no collection: module docstring). Nothing
        before start()."""
        if self.started:
            gc.freeze()

    def full_when_due(self) -> bool:
        """When `full_seconds` have passed since the last whole collection: thaw the
        heap, collect it whole, freeze what is left; True if it did. The caller calls it
        only where a pause of the heap's walk delays no pass (no wake-up waiting)."""
        if not self.started or self.monotonic() - self._last_full < self.full_seconds:
            return False
        gc.unfreeze()
        self.collected += gc.collect()
        gc.freeze()
        self.full_collections += 1
        self._last_full = self.monotonic()
        return True
