"""Who still waits for an srun/salloc allocation, and which jobs have a step starting.

The first is the rule that ends an abandoned allocation.

`gbatch srun` and `gbatch salloc` queue an allocation, wait for it (AwaitAllocation,
asked again and again), then open its first step, whose end ends the allocation. A
client that dies before its first step opens leaves an allocation nobody will use; as
Slurm does when srun goes away, it is cancelled once no client has waited for it for
`grace` seconds. Once its first step is open the step's shim holds the client (a dropped
connection hangs the step up, and the allocation ends with it), and the allocation is
no longer watched here.

In memory: a restarted gbatchd watches again, from its start, every unfinished
interactive allocation whose first step never opened (Daemon.watch_interactive).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


class Waiters:
    """The interactive allocations watched, and the clients waiting for each now."""

    def __init__(self, monotonic: Callable[[], float], grace: float) -> None:
        self._monotonic = monotonic
        self.grace = grace
        self._lock = threading.Lock()
        self._waiting: dict[int, int] = {}  # job id -> clients waiting for it now
        self._since: dict[int, float] = {}  # job id -> when a client last waited

    def watch(self, job_id: int) -> None:
        """Watch `job_id` (just queued, or found at start-up) from now."""
        with self._lock:
            self._since.setdefault(job_id, self._monotonic())

    @contextlib.contextmanager
    def waiting(self, job_id: int) -> Iterator[None]:
        """A client waits for `job_id` while the block runs."""
        with self._lock:
            self._waiting[job_id] = self._waiting.get(job_id, 0) + 1
            self._since[job_id] = self._monotonic()
        try:
            yield
        finally:
            with self._lock:
                left = self._waiting.get(job_id, 1) - 1
                if left > 0:
                    self._waiting[job_id] = left
                else:
                    self._waiting.pop(job_id, None)
                if job_id in self._since:
                    self._since[job_id] = self._monotonic()

    def forget(self, job_id: int) -> None:
        """No longer watch `job_id`: its first step opened, or it ended."""
        with self._lock:
            self._since.pop(job_id, None)

    def watched(self) -> list[int]:
        with self._lock:
            return sorted(self._since)

    def abandoned(self) -> list[int]:
        """The watched allocations nobody has waited for in `grace` seconds."""
        now = self._monotonic()
        with self._lock:
            return sorted(
                job_id
                for job_id, since in self._since.items()
                if not self._waiting.get(job_id) and now - since >= self.grace
            )


class Starting:
    """The jobs a step is being started in by the request handlers.

    From before its record is written until its shim holds it (or it failed). The loop
    does not take a step it finds there without a shim for one that vanished."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[int, int] = {}

    def begin(self, job_id: int) -> None:
        with self._lock:
            self._jobs[job_id] = self._jobs.get(job_id, 0) + 1

    def end(self, job_id: int) -> None:
        with self._lock:
            left = self._jobs.get(job_id, 1) - 1
            if left > 0:
                self._jobs[job_id] = left
            else:
                self._jobs.pop(job_id, None)

    def __contains__(self, job_id: object) -> bool:
        with self._lock:
            return job_id in self._jobs
