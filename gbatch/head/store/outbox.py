"""The notifications outbox: the rows of the events owed (migration 10).

They are written in the transaction of the change they tell of, and read, marked and
pruned by the daemon's outbox worker. Whom they are owed to and what they say comes in
as Notices.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Sequence

from gbatch.core import arrays
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.head import eventlog
from gbatch.head.store.events import Events
from gbatch.head.store.notices import ARRAY_ATTEMPT, Notification, Owed
from gbatch.head.store.rows import ArrayTail, _marks, _tail_by_id


class Outbox(Events):
    """The outbox's rows: owed with the change they tell of, then read, marked and pruned.

    They are owed in the transaction of the change they tell of (the `_queue_*` helpers,
    for the other concerns' writes), then read, marked and pruned by the outbox worker.
    """

    def _queue_job_events(
        self,
        db: sqlite3.Connection,
        job_id: int,
        now: float,
        *,
        old: JobState | None = None,
        kinds: tuple[str, ...] = (),
        ended_arrays: dict[int, Job] | None = None,
    ) -> int:
        """Outbox rows for the events of the job's change from `old` (or for `kinds`),
        one event id per kind, shared by its destinations. Returns the rows written.
        `ended_arrays`: an array task's end is noted there (array id -> task) for the
        caller to decide its array's END once, instead of here."""
        job = self._get(db, job_id)
        if job is None:
            return 0
        kinds = kinds or (self._notify.job_events(old, job) if old is not None else ())
        rows = self._notify.job_rows(job, kinds, now)
        written = self._insert_notifications(db, rows, job.id, job.attempt, now)
        if ended_arrays is not None and job.array_job_id is not None:
            ended_arrays[job.array_job_id] = job
        elif old is not None and job.array_job_id is not None:
            written += self._queue_array_events(db, job, kinds, now)
        return written

    def _queue_array_events(
        self, db: sqlite3.Connection, job: Job, kinds: tuple[str, ...], now: float
    ) -> int:
        """The whole-array mail (Notices.array_mailed) that task `job`'s change, whose
        event `kinds` are, makes due: BEGIN when it is the array's first task to start,
        END or FAIL when no task of the array is left to end. Written in the change's
        transaction, keyed to the array (outbox_once), so it is owed once."""
        array_id = job.array_job_id
        if array_id is None or not self._notify.array_mailed(job):
            return 0
        if "BEGIN" in kinds:
            begun = db.execute(
                "SELECT 1 FROM jobs WHERE id BETWEEN ? AND ? AND id != ?"
                " AND start_time IS NOT NULL LIMIT 1",
                (array_id, self._array_last_id(db, array_id, job.spec), job.id),
            ).fetchone()
            if begun is not None:
                return 0
            rows = self._notify.array_begin_rows(job, now)
            return self._insert_notifications(db, rows, array_id, ARRAY_ATTEMPT, now)
        if job.state.is_final:
            return self._queue_array_end(db, job, now)
        return 0

    def _queue_tail_end(self, db: sqlite3.Connection, record: Job, now: float) -> int:
        """The END of a pending tail cancelled whole, `record` standing for its tasks:
        ONE event for them all (mailed with ARRAY_TASKS as `N_[32-99]`, posted to the
        webhooks that want END), then its array's END if that was its last."""
        rows = self._notify.job_rows(record, ("END",), now)
        written = self._insert_notifications(db, rows, record.id, record.attempt, now)
        if self._notify.array_mailed(record):
            written += self._queue_array_end(db, record, now)
        return written

    def _queue_array_end(self, db: sqlite3.Connection, job: Job, now: float) -> int:
        """END or FAIL of `job`'s array (a task of it), if none of its tasks is left to
        end: no row still active and no pending tail (one cancelled counts as ended)."""
        array_id = job.array_job_id
        assert array_id is not None
        tail = _tail_by_id(db, array_id)
        if tail is not None and not tail.state.is_final:
            return 0
        last = self._array_last_id(db, array_id, job.spec, tail)
        active = [state.value for state in JobState if not state.is_final]
        running = db.execute(
            f"SELECT 1 FROM jobs INDEXED BY jobs_state WHERE state IN ({_marks(active)})"
            " AND id BETWEEN ? AND ? LIMIT 1",
            (*active, array_id, last),
        ).fetchone()
        if running is not None:
            return 0
        counts = {
            JobState(state): int(n)
            for state, n in db.execute(
                "SELECT state, count(*) FROM jobs WHERE id BETWEEN ? AND ? GROUP BY state",
                (array_id, last),
            )
        }
        low, high, signal = db.execute(
            "SELECT coalesce(min(coalesce(exit_code, 0)), 0), coalesce(max(exit_code), 0),"
            " coalesce(max(exit_signal), 0) FROM jobs WHERE id BETWEEN ? AND ?",
            (array_id, last),
        ).fetchone()
        if tail is not None:  # its tasks, cancelled while one record, exited with nothing
            counts[tail.state] = counts.get(tail.state, 0) + arrays.count(tail.positions)
            low = 0
        exits = (int(low), int(high))
        rows = self._notify.array_end_rows(job, counts, exits, int(signal) or None, now)
        return self._insert_notifications(db, rows, array_id, ARRAY_ATTEMPT, now)

    @staticmethod
    def _array_last_id(
        db: sqlite3.Connection, array_id: int, spec: JobSpec, tail: ArrayTail | None = None
    ) -> int:
        """The id of the array's last task: its ids are consecutive from `array_id`.
        From its expression, or its tail; an array of `count` copies with neither (all
        its tasks rows) is walked, its rows being those whose position is their offset."""
        if spec.array is not None:
            return array_id + len(spec.array.indices) - 1
        if tail is not None:
            return tail.last_id
        last = array_id
        while True:
            rows = db.execute(
                "SELECT id, coalesce(json_extract(spec, '$.array_pos'), 0),"
                " json_extract(spec, '$.array_task') FROM jobs WHERE id BETWEEN ? AND ?"
                " ORDER BY id",
                (last + 1, last + 1000),
            ).fetchall()
            for job_id, pos, task in rows:
                if job_id != last + 1 or task is None or job_id - pos != array_id:
                    return last
                last = job_id
            if len(rows) < 1000:
                return last

    @staticmethod
    def _insert_notifications(
        db: sqlite3.Connection,
        rows: Sequence[Owed],
        job_id: int | None,
        attempt: int | None,
        now: float,
    ) -> int:
        """Write the rows owed of job `job_id`'s run `attempt` (None: a node's); a row
        owed already (outbox_once) is not written again. Returns the rows written."""
        written = 0
        for kind, channel, target, event_id, payload in rows:
            written += db.execute(
                "INSERT OR IGNORE INTO outbox (event_id, kind, channel, target, job_id, attempt,"
                " payload, created, next_attempt_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (event_id, kind, channel, target, job_id, attempt, payload, now, now),
            ).rowcount
        return written

    def queue_job_event(self, job_id: int, kind: str, now: float) -> int:
        """Owe the event `kind` of a running job to whoever asked; returns the rows written.

        A TIME_LIMIT_80 warning, say: owed once per run however often asked.
        """
        if not self._notify.active:
            return 0
        with self._write() as db:
            return self._queue_job_events(db, job_id, now, kinds=(kind,))

    def _queue_node_event(
        self, db: sqlite3.Connection, node: str, kind: str, reason: str, now: float
    ) -> int:
        """Owe a node's event (NODE_DOWN) to the admins' webhooks that ask for it; and
        give it to the event log, whether or not a webhook asks for it."""
        rows = self._notify.node_rows(node, kind, reason, now)
        if self._feed is not None:
            self._feed_lines.append(eventlog.node_line(node, kind, reason, now))
        return self._insert_notifications(db, rows, None, None, now)

    def _queue_cancelled(self, db: sqlite3.Connection, ids: Sequence[int], now: float) -> None:
        """END events of pending jobs just cancelled. Only the jobs that asked for mail
        or have webhooks of their own are read (one indexless filter in SQL), unless an
        admin's webhook wants every END: a sweep over 500,000 jobs reads none otherwise."""
        if not self._notify.active:
            return
        keys = self._notify.asked_in_spec("END")
        if keys is not None:
            asked = [f"json_extract(spec, '$.{key}') IS NOT NULL" for key in keys]
            if not asked:
                return
            ids = [
                int(row[0])
                for row in db.execute(
                    f"SELECT id FROM jobs WHERE id IN ({_marks(ids)}) AND ({' OR '.join(asked)})",
                    ids,
                )
            ]
        ended: dict[int, Job] = {}
        for job_id in ids:
            self._queue_job_events(db, job_id, now, old=JobState.PENDING, ended_arrays=ended)
        # Each array's end is decided once, after all of its tasks here are cancelled.
        for task in ended.values():
            if self._notify.array_mailed(task):
                self._queue_array_end(db, task, now)

    def due_notifications(
        self,
        now: float,
        limit: int,
        skip_targets: Collection[str] = (),
        skip_owners: Collection[str] = (),
    ) -> list[Notification]:
        """Undelivered outbox rows whose next try is due, the longest due first.

        At most `limit`, none given up on; none to `skip_targets` nor of `skip_owners` (a
        job's user, "" for a node's: notify.owner).
        """
        where = ""
        if skip_targets:
            where += f" AND target NOT IN ({_marks(skip_targets)})"
        if skip_owners:
            where += (
                " AND coalesce(json_extract(payload, '$.job.user'), '')"
                f" NOT IN ({_marks(skip_owners)})"
            )
        with self._lock:
            rows = self._db.execute(
                "SELECT id, event_id, kind, channel, target, payload, attempts FROM outbox"
                " WHERE delivered IS NULL AND gave_up IS NULL AND next_attempt_time <= ?"
                f"{where} ORDER BY next_attempt_time, id LIMIT ?",
                (now, *skip_targets, *skip_owners, limit),
            ).fetchall()
        return [Notification(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6]) for r in rows]

    def notification_delivered(self, row_id: int, now: float) -> None:
        with self._write() as db:
            db.execute(
                "UPDATE outbox SET delivered = ?, attempts = attempts + 1 WHERE id = ?",
                (now, row_id),
            )

    def notification_failed(
        self, row_id: int, error: str, now: float, retry_at: float | None
    ) -> None:
        """A try failed: try again at `retry_at`, or never (None: given up)."""
        with self._write() as db:
            db.execute(
                "UPDATE outbox SET attempts = attempts + 1, last_error = ?,"
                " next_attempt_time = coalesce(?, next_attempt_time),"
                " gave_up = CASE WHEN ? IS NULL THEN ? END WHERE id = ?",
                (error[:500], retry_at, retry_at, now, row_id),
            )

    def prune_notifications(self, before: float) -> int:
        """Delete the rows delivered before `before`; returns the number deleted.

        Rows given up on stay, with their last_error, for an admin to read.
        """
        with self._write() as db:
            return db.execute(
                "DELETE FROM outbox WHERE delivered IS NOT NULL AND delivered < ?", (before,)
            ).rowcount
