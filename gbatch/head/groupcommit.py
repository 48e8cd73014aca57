"""Group commit for submits: concurrent callers share one transaction, and so one fsync.

One fsync makes a whole burst durable instead of one fsync each.

Each caller blocks until its own submission is committed. The commits are made by the
callers' own threads (leader/follower), one at a time: a caller that finds no commit
under way leads and commits at once (a lone caller hops to no other thread: two thread
switches less on each submit's path, measured in bench_submit); callers that come
while a commit is under way queue, and when it ends the first of them leads the next
commit, of everything queued by then (up to MAX_BATCH), for all of them.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from gbatch.head.store import Store, StoreError, Submission

MAX_BATCH = 1000


class CommitterClosed(StoreError):
    """A submit that came after close() (gbatchd is stopping): nothing of it was written.

    Before the commits were made in the callers' threads, such a submit waited for a
    committer thread that had stopped, and was never answered.
    """


class _Waiter:
    __slots__ = ("done", "error", "ids", "lead", "submission")

    def __init__(self, submission: Submission) -> None:
        self.submission = submission
        # A follower's: set when its submission is committed (or failed), or when it
        # is to lead. A leader waits for nothing, so it makes none.
        self.done: threading.Event | None = None
        self.lead = False
        self.ids: list[int] | None = None
        self.error: BaseException | None = None


class GroupCommitter:
    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._queue: deque[_Waiter] = deque()  # waiting for the next commit, in order
        self._leading = False  # a commit is under way (its leader hands over when done)
        self._closed = False
        self._idle = threading.Condition(self._lock)  # notified when a leader is done

    def submit(self, submission: Submission) -> list[int]:
        """Commit `submission` (with whatever else is waiting); return its job ids.

        Raises what the store did, the submission's own PendingLimitReached, or
        CommitterClosed after close().
        """
        waiter = _Waiter(submission)
        with self._lock:
            if self._closed:
                raise CommitterClosed("gbatchd is stopping; nothing was queued")
            if self._leading:
                waiter.done = threading.Event()
            else:
                waiter.lead = self._leading = True
            self._queue.append(waiter)
        if waiter.done is not None:
            waiter.done.wait()  # committed by a leader, or made the next leader
        if waiter.lead:
            self._lead()
        if waiter.error is not None:
            raise waiter.error
        assert waiter.ids is not None
        return waiter.ids

    def close(self) -> None:
        """Refuse new submits and wait for the commit under way, if any, to end."""
        with self._lock:
            self._closed = True
            self._idle.wait_for(lambda: not self._leading, timeout=5)

    def _lead(self) -> None:
        """Commit the queue's head (this caller's own submission is in it: it is first),
        wake each of its callers, then hand the lead to the next caller queued, if any."""
        with self._lock:
            batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
        try:
            results = self._store.submit_many([w.submission for w in batch], self._clock())
        except BaseException as err:  # every waiter hears of its own failure
            for waiter in batch:
                waiter.error = err
        else:
            for waiter, result in zip(batch, results, strict=True):
                if isinstance(result, Exception):  # over its user's limit: its own
                    waiter.error = result
                else:
                    waiter.ids = result
        finally:
            with self._lock:
                if self._queue:
                    follower = self._queue[0]
                    follower.lead = True
                    assert follower.done is not None
                    follower.done.set()
                else:
                    self._leading = False
                    self._idle.notify_all()
            for waiter in batch:
                waiter.lead = False
                if waiter.done is not None:
                    waiter.done.set()
