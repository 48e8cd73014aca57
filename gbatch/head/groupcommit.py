"""Group commit for submits: concurrent callers share one transaction, so one fsync
makes a whole burst durable instead of one fsync each.

Each caller blocks until its own submission is committed; a lone caller is committed
at once (nothing waits for company).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from gbatch.head.store import Store, Submission

MAX_BATCH = 1000


@dataclass
class _Waiter:
    submission: Submission
    done: threading.Event = field(default_factory=threading.Event)
    ids: list[int] = field(default_factory=list)
    error: Exception | None = None


class GroupCommitter:
    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock
        self._queue: queue.SimpleQueue[_Waiter | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
        self._thread.start()

    def submit(self, submission: Submission) -> list[int]:
        """Commit `submission` (with whatever else is waiting); return its job ids.
        Raises what the store did, or the submission's own PendingLimitReached."""
        waiter = _Waiter(submission)
        self._queue.put(waiter)
        waiter.done.wait()
        if waiter.error is not None:
            raise waiter.error
        return waiter.ids

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)  # finish this batch, then stop
                    break
                batch.append(more)
            try:
                results = self._store.submit_many([w.submission for w in batch], self._clock())
            except Exception as err:  # every waiter hears of its own failure
                for waiter in batch:
                    waiter.error = err
            else:
                for waiter, result in zip(batch, results, strict=True):
                    if isinstance(result, Exception):  # over its user's limit: its own
                        waiter.error = result
                    else:
                        waiter.ids = result
            for waiter in batch:
                waiter.done.set()
