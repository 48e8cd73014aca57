"""The head's copy of each job's output: $GBATCH_HOME/logs/<job>.log, owner-only.

Bare processes write into it directly (the shim's stdout and stderr). A container's
output is copied in by a follower thread per attempt; a follower that starts again
(after a daemon restart) truncates back to where the attempt began and replays the
container's whole output, so the log is whole and nothing appears twice.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO

from gbatch.config import Paths

# Opens the container's output stream: a context manager yielding an iterator of chunks.
StreamOpener = Callable[[], AbstractContextManager[Iterator[bytes]]]


def open_log(path: Path) -> IO[bytes]:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    return os.fdopen(fd, "ab")


def mark_attempt_start(paths: Paths, job_id: int, attempt: int) -> None:
    """Remember where this attempt's output starts in the job's log."""
    log_path = paths.job_log(job_id)
    run_dir = paths.run_dir(job_id, attempt)
    run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (run_dir / "log_offset").write_text(str(log_path.stat().st_size if log_path.exists() else 0))


class LogFollowers:
    """At most one live follower per (job, attempt)."""

    def __init__(self, paths: Paths, on_done: Callable[[], None]) -> None:
        self._paths = paths
        self._on_done = on_done
        self._lock = threading.Lock()
        self._threads: dict[tuple[int, int], threading.Thread] = {}

    def follow(self, job_id: int, attempt: int, open_stream: StreamOpener) -> None:
        """Start copying (unless a follower for this attempt already runs)."""
        key = (job_id, attempt)
        with self._lock:
            thread = self._threads.get(key)
            if thread is not None and thread.is_alive():
                return
            thread = threading.Thread(
                target=self._copy,
                args=(job_id, attempt, open_stream),
                name=f"logs-{job_id}.{attempt}",
                daemon=True,
            )
            self._threads[key] = thread
        thread.start()

    def ended(self, job_id: int, attempt: int) -> bool:
        """Whether this attempt's output stream has ended (its container likely exited)."""
        with self._lock:
            thread = self._threads.get((job_id, attempt))
        return thread is not None and not thread.is_alive()

    def wait(self, job_id: int, attempt: int, timeout: float = 5.0) -> None:
        """Let the follower finish: the log is complete before the run is final."""
        with self._lock:
            thread = self._threads.pop((job_id, attempt), None)
        if thread is not None:
            thread.join(timeout)

    def _copy(self, job_id: int, attempt: int, open_stream: StreamOpener) -> None:
        offset_file = self._paths.run_dir(job_id, attempt) / "log_offset"
        offset = int(offset_file.read_text()) if offset_file.exists() else 0
        log = open_log(self._paths.job_log(job_id))
        try:
            log.truncate(offset)
            with open_stream() as chunks:
                for chunk in chunks:
                    log.write(chunk)
                    log.flush()
        finally:
            log.close()
            self._on_done()
