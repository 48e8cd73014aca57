"""Job events: the rows that tell a job's story (scontrol show job), and their log lines.

The event log's line of each is handed to the feed once its transaction commits."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from gbatch.core.model import Event, Job, JobState
from gbatch.head import eventlog
from gbatch.head.store.db import Database
from gbatch.head.store.rows import _chunks, _marks

SUBMITTED = "submitted"  # a submit event's reason (Store.events)


class Events(Database):
    """Job events: written with the change they tell of, and read back as a job's story.

    Each is fed to the event log once its transaction commits.
    """

    def _insert_events(
        self, db: sqlite3.Connection, rows: Sequence[tuple[int, float, str, str]]
    ) -> None:
        """The one writer of `events` rows (job id, time, state, reason). With an event
        log, each row's line is kept for it, written once the transaction commits."""
        db.executemany("INSERT INTO events (job_id, time, state, reason) VALUES (?, ?, ?, ?)", rows)
        self._feed_events(rows)

    def _submitted_events(self, ids: Sequence[int], submit_time: float) -> None:
        """The jobs' submit events. They are not stored: each is the job row's own
        submit_time (Store.events tells it first), and a row of `events` and of its
        index was two of the nine pages each submit's commit wrote and fsync'd
        (bench/bench_submit.py measures what they cost). The event log still gets their
        lines."""
        pending = JobState.PENDING.value
        self._feed_events([(job_id, submit_time, pending, SUBMITTED) for job_id in ids])

    def _feed_events(self, rows: Sequence[tuple[int, float, str, str]]) -> None:
        """With an event log, each event's line, kept for the open transaction."""
        if self._feed is None or not rows:
            return
        jobs: dict[int, Job] = {}
        wanted = sorted({row[0] for row in rows})
        for part in _chunks(wanted):
            jobs.update((job.id, job) for job in self._select(f"id IN ({_marks(part)})", part))
        self._feed_lines.extend(
            eventlog.job_line(jobs[job_id], time, state, reason)
            for job_id, time, state, reason in rows
            if job_id in jobs
        )

    def events(self, job_id: int) -> list[Event]:
        """The job's events, oldest first, beginning with its submit.

        The submit is (PENDING, "submitted") at its submit_time, which is no stored row
        since jobs are submitted without one (_submitted_events). A store's older jobs
        have it stored: it is not told twice.
        """
        with self._lock:
            rows = self._db.execute(
                "SELECT job_id, time, state, reason FROM events WHERE job_id = ? ORDER BY id",
                (job_id,),
            ).fetchall()
            pending = JobState.PENDING.value
            if not rows or (rows[0][2], rows[0][3]) != (pending, SUBMITTED):
                found = self._db.execute(
                    "SELECT submit_time FROM jobs WHERE id = ?", (job_id,)
                ).fetchone()
                if found is not None:
                    rows.insert(0, (job_id, found[0], pending, SUBMITTED))
        return [Event(r[0], r[1], JobState(r[2]), r[3]) for r in rows]
