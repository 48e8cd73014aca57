"""The event log: one JSON line per job event and per node event, for a log shipper.

The shipper (promtail, filebeat) carries it to Loki or Elasticsearch.

A line per row of the store's `events` table (a state change, a hold, a note), written
by the store after the transaction that wrote the row commits, and one per node event
(NODE_DOWN, GPU_FOREIGN, DISK_FULL), whether or not a webhook asks for it:

    {"ts": "2024-05-01T12:00:00.123Z", "event": "JOB_STATE", "job": 42, "user": "ana",
     "state": "COMPLETED", "reason": "exit code 0", "node": "gpu1", "gpus": [0, 1],
     "exit_code": 0, "name": "train"}

Every line has the same keys (null where they do not apply, a node event's job for
one); an array task's has array_job_id and array_task_id too. Lines are pure ASCII
(json's escapes): a name or reason with quotes, newlines or control characters stays
one line, whatever the shipper's encoding.

The log is a feed, not a record: the store is the record (sacct reads it). A line lost
(a full disk, a crash between the commit and the write) is not written again, and a
failed write never stops the daemon: it is counted, and said once in gbatchd.log.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import logging.handlers
import os
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from gbatch.core.model import FINAL_STATES, Job

log = logging.getLogger("gbatchd")
Failed = Callable[[BaseException | None], None]

JOB_EVENT = "JOB_STATE"


def rfc3339(time: float) -> str:
    """`time` (seconds since the epoch) in RFC 3339, UTC, to the millisecond."""
    moment = datetime.fromtimestamp(time, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def job_line(job: Job, time: float, state: str, reason: str) -> str:
    """The log line of one of `job`'s events.

    It is made of the job's row after the change, and the event's time, state and reason.
    exit_code only once the job has ended.
    """
    fields: dict[str, object] = {
        "ts": rfc3339(time),
        "event": JOB_EVENT,
        "job": job.id,
        "user": job.user,
        "state": state,
        "reason": reason,
        "node": job.node,
        "gpus": list(job.gpus) if job.node is not None else None,
        "exit_code": job.exit_code if job.state in FINAL_STATES else None,
        "name": job.spec.name,
    }
    if job.array_job_id is not None:
        fields["array_job_id"] = job.array_job_id
        fields["array_task_id"] = job.spec.array_task
    return _dump(fields)


def node_line(node: str, kind: str, reason: str, time: float) -> str:
    """The line of a node's event (NODE_DOWN, GPU_FOREIGN, DISK_FULL)."""
    return _dump(
        {
            "ts": rfc3339(time),
            "event": kind,
            "job": None,
            "user": None,
            "state": None,
            "reason": reason,
            "node": node,
            "gpus": None,
            "exit_code": None,
        }
    )


def _dump(fields: dict[str, object]) -> str:
    # ensure_ascii: every control character, U+2028 and a lone surrogate (a name read
    # from a "\ud800" escape) become \u escapes, so a line is one line and always writes.
    return json.dumps(fields, ensure_ascii=True, separators=(",", ":"))


class EventLog:
    """Writes lines to one handler (a rotating file, or stdout) in the order given.

    A write that fails is dropped and counted; the first of a run of failures is said in
    gbatchd.log, and so is the next write that works again.
    """

    def __init__(self, make_handler: Callable[[Failed], logging.Handler]) -> None:
        """`make_handler(failed)`: the handler, which calls `failed` when a write fails."""
        handler = self._handler = make_handler(self.failed)
        handler.setFormatter(logging.Formatter("%(message)s"))
        self._lock = threading.Lock()
        self.lost = 0  # lines not written, since start
        self._failing = 0  # lines lost since the last that was written
        self._failed = False

    def write(self, lines: Sequence[str]) -> None:
        with self._lock:
            for line in lines:
                self._failed = False
                self._handler.handle(logging.makeLogRecord({"msg": line, "levelno": 20}))
                if self._failed:
                    self.lost += 1
                    self._failing += 1
                elif self._failing:
                    log.warning("event log: writing again, %d lines lost", self._failing)
                    self._failing = 0

    def failed(self, err: BaseException | None) -> None:
        """The handler's write of a line failed (called from its handleError)."""
        if not self._failing:
            log.error("event log: cannot write (%s); its lines are dropped until it can", err)
        self._failed = True

    def close(self) -> None:
        with self._lock:
            self._handler.close()


class _RotatingFile(logging.handlers.RotatingFileHandler):
    """RotatingFileHandler whose files are the owner's alone (job names and users are
    in them), and whose failures go to `failed` instead of a traceback on stderr."""

    def __init__(self, path: Path, max_bytes: int, backups: int, failed: Failed) -> None:
        self._failed = failed
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="ascii")

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        return os.fdopen(fd, "a", encoding="ascii")

    def handleError(self, record: logging.LogRecord) -> None:
        self._failed(sys.exc_info()[1])
        # A stream whose write failed may hold part of a line: the next line reopens.
        stream, self.stream = self.stream, None
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


class _Stdout(logging.StreamHandler):  # type: ignore[type-arg]
    def __init__(self, failed: Failed) -> None:
        self._failed = failed
        super().__init__(sys.stdout)

    def handleError(self, record: logging.LogRecord) -> None:
        self._failed(sys.exc_info()[1])


def open_event_log(target: str | None, home: Path, max_bytes: int, backups: int) -> EventLog | None:
    """The event log that config's `event_log` names: None (off), "stdout", or a file.

    A relative path is in `home`. Raises OSError when the file cannot be opened.
    """
    if target is None:
        return None
    if target == "stdout":
        return EventLog(_Stdout)
    path = home / target
    event_log = EventLog(lambda failed: _RotatingFile(path, max_bytes, backups, failed))
    os.chmod(path, 0o600)  # one left by an older run, or made under another umask
    return event_log
