"""The store's lock: one at a time on its connection, a waiting submit first.

Every read and write on the store's main connection takes this lock (reentrant). The
loop's steps take it many times a pass (a start's intent and confirmation, a run's end,
reads for the plan), each write through its commit's fsync; a submit waiting for it was
let in only when the loop let go between two takes and the submit's thread happened to
be the one to get it: the loop's thread, already running, often took it back first
(issue 35: a submit's lock wait p99 ~40 ms while jobs started, 0 when none did).

Now a thread inside `first()` (a submit's request) that finds the lock taken counts
itself waiting, and any other thread's next outermost take waits at a gate while one
does, for at most YIELD_S: the submit gets the lock as soon as it is let go. The gate is
passed at once when no submit waits (one integer read), and a storm of submits delays
the loop's next take by YIELD_S at most, never stops it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

YIELD_S = 0.05
"""The longest another thread waits at the gate for waiting submits, each take."""


class StoreLock:
    """A reentrant lock at which threads inside `first()` go before the others."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._waiting = 0  # threads inside first() blocked on the lock now
        self._gate = threading.Condition(threading.Lock())
        self._mine = threading.local()  # .first: this thread is inside first()

    def __enter__(self) -> None:
        lock = self._lock
        if getattr(self._mine, "first", False):
            if not lock.acquire(blocking=False):  # taken: wait, counted
                with self._gate:
                    self._waiting += 1
                try:
                    lock.acquire()
                finally:
                    with self._gate:
                        self._waiting -= 1
                        if not self._waiting:
                            self._gate.notify_all()
            return
        if self._waiting and not lock._is_owned():  # type: ignore[attr-defined]  # not inner
            with self._gate:
                self._gate.wait_for(lambda: not self._waiting, YIELD_S)
        lock.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._lock.release()

    @contextmanager
    def first(self) -> Iterator[None]:
        """The block's takes of the lock go before other threads' (see the module)."""
        if getattr(self._mine, "first", False):
            yield
            return
        self._mine.first = True
        try:
            yield
        finally:
            self._mine.first = False
