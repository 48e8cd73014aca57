"""Group commit for submits: concurrent callers share one transaction, so one fsync
makes a whole burst durable instead of one fsync each.

Each caller blocks until its own submission is committed. The committing is done by
the callers' own threads, one at a time (the leader): a caller that finds no commit
under way commits at once, in its own thread, its submission with whatever else is
waiting; callers that arrive meanwhile wait, and when the leader's transaction ends the
first of them leads the next one (with all that arrived by then). A lone caller thus
costs no hand-off to another thread: two thread wake-ups were ~0.2 ms of a ~0.6 ms
submit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from gbatch.head.store import Store, Submission

MAX_BATCH = 1000


@dataclass
class _Waiter:
    submission: Submission
    done: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # woken to commit the next batch, not because its own is done
    ids: list[int] = field(default_factory=list)
    error: Exception | None = None


class GroupCommitter:
    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._waiting: list[_Waiter] = []  # in arrival order; the leader's is first
        self._committing = False  # a leader is at work: the waiting wait for it

    def submit(self, submission: Submission) -> list[int]:
        """Commit `submission` (with whatever else is waiting); return its job ids.
        Raises what the store did, or the submission's own PendingLimitReached."""
        waiter = _Waiter(submission)
        with self._lock:
            self._waiting.append(waiter)
            lead = not self._committing
            self._committing = True
        if not lead:
            waiter.done.wait()
            if waiter.lead:  # the previous leader is done; ours is not yet committed
                waiter.done.clear()
                lead = True
        if lead:
            self._commit_next()
        if waiter.error is not None:
            raise waiter.error
        return waiter.ids

    def close(self) -> None:
        """Nothing to stop: commits run in the callers' threads. Kept for the daemon's
        shutdown order (the store closes after this)."""

    def _commit_next(self) -> None:
        """Commit the waiting submissions (the leader's first), tell each its outcome,
        then wake the first caller that arrived meanwhile to lead, or stand down."""
        with self._lock:
            batch = self._waiting[:MAX_BATCH]
            del self._waiting[:MAX_BATCH]
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
        finally:
            for waiter in batch:  # the store raised past Exception: none may wait forever
                if waiter.error is None and not waiter.ids:
                    waiter.error = RuntimeError("the commit was interrupted")
            with self._lock:
                successor = self._waiting[0] if self._waiting else None
                if successor is None:
                    self._committing = False
                else:
                    successor.lead = True
            for waiter in batch[1:]:
                waiter.done.set()
            if successor is not None:
                successor.done.set()
