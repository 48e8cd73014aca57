"""What gbatchd counts for its metrics as things happen: cumulative counters and histograms.

It counts submits, starts, ends and loop passes, since the daemon started, as Prometheus
expects of them (a restart resets them; rate() and increase() know that). What can be read
from the store or the fleet at any moment (jobs by state, GPUs, fair-share) is not kept
here: handlers/reports.on_metrics reads it when asked.

Thread-safe: the loop observes, request handlers count submits and take snapshots.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

# Upper bounds, in seconds. Queue waits and run times of GPU jobs span seconds to days;
# a loop pass takes milliseconds, and seconds only when something is wrong.
WAIT_BUCKETS = (1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 86400.0)
RUN_BUCKETS = (10.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 86400.0, 7 * 86400.0)
LOOP_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class Histogram:
    """Prometheus's cumulative histogram: counts at or under each bound, and their sum.

    The counts are of observations; the last count is +Inf's.
    """

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)  # per bucket, not yet cumulative
        self._sum = 0.0

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self.bounds, value)] += 1
        self._sum += value

    def to_wire(self) -> dict[str, Any]:
        """{"buckets": [[bound, cumulative count], ..., ["+Inf", total]], "sum"}."""
        buckets: list[list[Any]] = []
        total = 0
        for bound, count in zip((*self.bounds, "+Inf"), self._counts, strict=True):
            total += count
            buckets.append([bound, total])
        return {"buckets": buckets, "sum": self._sum}


class DaemonMetrics:
    """The daemon's own counters since it started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.submitted = 0  # jobs accepted (an array's tasks each)
        self.ended: Counter[str] = Counter()  # final state -> runs ended so
        self.queue_wait = Histogram(WAIT_BUCKETS)
        self.run_time = Histogram(RUN_BUCKETS)
        self.loop = Histogram(LOOP_BUCKETS)
        self.loop_last = 0.0

    def count_submitted(self, jobs: int) -> None:
        with self._lock:
            self.submitted += jobs

    def observe_start(self, waited: float) -> None:
        """A run started `waited` seconds after its job was submitted."""
        with self._lock:
            self.queue_wait.observe(max(waited, 0.0))

    def observe_end(self, state: str, ran: float | None) -> None:
        """A run ended in final `state` after `ran` seconds (None: it never started)."""
        with self._lock:
            self.ended[state] += 1
            if ran is not None:
                self.run_time.observe(max(ran, 0.0))

    def observe_loop(self, seconds: float) -> None:
        with self._lock:
            self.loop.observe(seconds)
            self.loop_last = seconds

    def to_wire(self) -> dict[str, Any]:
        with self._lock:
            return {
                "submitted": self.submitted,
                "ended": dict(self.ended),
                "queue_wait": self.queue_wait.to_wire(),
                "run_time": self.run_time.to_wire(),
                "loop": self.loop.to_wire(),
                "loop_last": self.loop_last,
            }
