"""The store's lock: one at a time on its connection, a submit's work first.

Every read and write on the store's main connection takes this lock (reentrant). The
loop's steps take it many times a pass (a start's intent and confirmation, a run's end,
reads for the plan), each a commit with its fsync; a submit waiting for it waited, on a
plain lock, until the loop let go between two of them and its request thread happened
to be the one woken: the loop's thread, already running, usually took it back first
(issue 35: a submit's p99 went from ~4 ms to ~40 ms while jobs started). Work marked
`first()` (a submit's request) now goes before any other thread's next outermost take:
those wait at a gate while such work is under way, for at most YIELD_S each, so a storm
of submits delays the loop's next step by that much at most, never stops it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

YIELD_S = 0.05
"""The longest another thread waits at the gate for submits under way, each take."""


class StoreLock:
    """A reentrant lock whose `first()` work goes before other threads' next takes."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._urgent = 0  # threads inside first() (each counted once)
        self._gate = threading.Condition(threading.Lock())
        self._mine = threading.local()  # .first: this thread is inside first()

    def __enter__(self) -> None:
        # Cheap when no submit is under way: one integer read.
        if (
            self._urgent and not getattr(self._mine, "first", False) and not self._lock._is_owned()  # type: ignore[attr-defined]  # an inner take
        ):
            with self._gate:
                self._gate.wait_for(lambda: not self._urgent, YIELD_S)
        self._lock.acquire()

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
        with self._gate:
            self._urgent += 1
        self._mine.first = True
        try:
            yield
        finally:
            self._mine.first = False
            with self._gate:
                self._urgent -= 1
                if not self._urgent:
                    self._gate.notify_all()
