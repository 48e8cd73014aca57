"""Reads of jobs: one by id, by state or by run time, counts, and briefs in bounded batches.

One by id (an array tail's task too), by state, by run time; the counts the metrics and
limits read; and briefs (owner and state) for requests over many jobs, a bounded batch
per call."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
from collections.abc import Collection, Iterator, Sequence
from typing import NamedTuple

from gbatch.core.model import ACTIVE_STATES, Job, JobState
from gbatch.core.selection import JobFilter
from gbatch.head.store.db import JobNotFound, StoreError
from gbatch.head.store.rows import (
    _ACTIVE_SQL,
    _JOB_COLUMNS,
    _STATE_NAMED,
    ListingSpecs,
    _build_job,
    _chunks,
    _marks,
    _tail_of,
    filter_sql,
)
from gbatch.head.store.tails import Tails

_RUNS_PAGE = 1000  # rows runs_between reads at once


# A run gpu_seconds_between counts in SQL: on one node (no peers) and of whole GPUs (its
# spec names no share of a card: `"gpu_mem` in the stored JSON, whatever its form).
_COUNTED_RUN = """peers = '' AND instr(spec, '"gpu_mem') = 0"""


def _runs_where(
    start: float, end: float, users: Collection[str] | None
) -> tuple[str, list[object]]:
    """jobs_run_between's filter: runs that overlap [start, end), of `users` when given;
    two searches of the jobs_ran index."""
    started = "start_time IS NOT NULL AND start_time < ?"
    where = (
        f"id IN (SELECT id FROM jobs WHERE {started} AND end_time IS NULL"
        f" UNION ALL SELECT id FROM jobs WHERE {started} AND end_time > ?)"
    )
    params: list[object] = [end, end, start]
    if users is not None:
        where += f" AND user IN ({_marks(users)})"
        params.extend(users)
    return where, params


class EarlierRun(NamedTuple):
    """A run of a job that a requeue ended.

    Its attempt, times, nodes with their GPUs (first node first) and the requeue's
    reason."""

    job_id: int
    attempt: int
    start: float
    end: float
    placements: tuple[tuple[str, tuple[int, ...]], ...]
    reason: str


class JobBrief(NamedTuple):
    """What a request over many jobs needs of each to decide on it: its owner and state.

    A tuple, cheap to build: a whole Job per row would cost 500,000 of them for one
    user's sweep.
    """

    id: int
    uid: int
    user: str
    state: JobState
    # Whether the job passes the read's JobFilter (scancel -n/-p/-w); True without one.
    kept: bool = True


def _brief(row: tuple[int, int, str, str]) -> JobBrief:
    return JobBrief(row[0], row[1], row[2], _STATE_NAMED[row[3]])


def _kept_brief(row: tuple[int, int, str, str, int]) -> JobBrief:
    return JobBrief(row[0], row[1], row[2], _STATE_NAMED[row[3]], bool(row[4]))


class Reads(Tails):
    """Jobs read by id, state or run time; counts; briefs of many jobs."""

    def get(self, job_id: int) -> Job | None:
        """The job `job_id`: its row, or the pending array task its tail holds."""
        with self._lock:
            job = self._get(self._db, job_id)
            if job is None:
                tail = _tail_of(self._db, job_id)
                if tail is not None:
                    return tail.task(job_id - tail.array_id)
            return job

    def require(self, job_id: int) -> Job:
        job = self.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    def jobs_in(self, states: Collection[JobState]) -> list[Job]:
        """The fleet's jobs in any of `states`, oldest first.

        Read by the state index: cheap for the few allocated jobs among many finished ones.
        Jobs sent to a Slurm cluster's partition (clusterjobs) are not the fleet's: the
        cluster runs them, and the loop's cluster step alone follows them.
        """
        marks = ", ".join("?" * len(states))
        return self._select(
            f"state IN ({marks})"
            " AND NOT EXISTS (SELECT 1 FROM cluster_jobs c WHERE c.job_id = jobs.id)",
            [s.value for s in states],
        )

    def jobs_run_between(
        self, start: float, end: float, users: Collection[str] | None = None
    ) -> list[Job]:
        """Jobs (of `users`, when given) whose last run overlaps [start, end).

        Started before `end`, and not ended before `start` (or not ended). sreport's and
        the timeline's question: two searches of the jobs_ran index (still on; ended
        after `start`), never a scan of every job ever run.
        """
        return self._select(*_runs_where(start, end, users))

    def runs_between(
        self,
        start: float,
        end: float,
        users: Collection[str] | None = None,
        *,
        uncounted: bool = False,
    ) -> Iterator[Job]:
        """jobs_run_between's jobs, by id, read a page at a time as they are taken.

        On a read connection of its own, in one snapshot (Store.job_pages' way): sreport
        over 1,000,000 runs holds a page of Jobs, not all of them (issue 35). The read
        ends when the iterator is exhausted or closed. `uncounted`: only the runs
        gpu_seconds_between leaves out (those holding GPUs on several nodes, or a share
        of a card), for the caller to count."""
        where, params = _runs_where(start, end, users)
        if uncounted:
            where = f"{where} AND state != 'PENDING' AND gpus != '' AND NOT ({_COUNTED_RUN})"
        # Its size unknown, decoded as a large listing's specs are: beside the shared
        # caches (which it would churn), a bounded number of its own remembered.
        decode = ListingSpecs()
        decode.count = lambda: sys.maxsize
        with self._reading() as db:
            cursor = db.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE {where} ORDER BY id", params
            )
            while rows := cursor.fetchmany(_RUNS_PAGE):
                yield from [_build_job(row, decode) for row in rows]

    def gpu_seconds_between(
        self, start: float, end: float, now: float, users: Collection[str] | None, by_uid: bool
    ) -> dict[object, tuple[float, int]]:
        """sreport's sums, in SQL, of the runs charged their GPU count.

        Runs on one node with no share of a card: per user (per uid with `by_uid`), the
        GPU-seconds inside [start, end) and the jobs that used any, as
        accounting.gpu_seconds_in counts them (a run still going up to `now`).
        runs_between(uncounted=True) gives the others. No Job built for each (issue
        35)."""
        where, params = _runs_where(start, end, users)
        key = "uid" if by_uid else "user"
        gpus = "(length(gpus) - length(replace(gpus, ',', '')) + 1)"
        used = f"{gpus} * (min(coalesce(end_time, ?), ?) - max(start_time, ?))"
        sql = (
            f"SELECT key, sum(used), count(*) FROM (SELECT {key} AS key, {used} AS used"
            f" FROM jobs WHERE {where} AND state != 'PENDING' AND gpus != ''"
            f" AND {_COUNTED_RUN} ORDER BY id) WHERE used > 0 GROUP BY key"
        )
        with self._reading() as db:
            rows = db.execute(sql, [now, end, start, *params]).fetchall()
        return {row[0]: (float(row[1]), int(row[2])) for row in rows}

    def earlier_runs_between(self, start: float, end: float) -> list[EarlierRun]:
        """The runs requeues ended that overlap [start, end), by index (migration 22).

        Started before `end`, ended after `start`; never a job's last run (that is
        jobs_run_between's)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT job_id, attempt, start_time, end_time, placements, reason"
                " FROM earlier_runs WHERE end_time > ? AND start_time < ?"
                " ORDER BY start_time, job_id",
                (start, end),
            ).fetchall()
        return [
            EarlierRun(
                job_id,
                attempt,
                first,
                last,
                tuple((node, tuple(gpus)) for node, gpus in json.loads(placements)),
                reason,
            )
            for job_id, attempt, first, last, placements, reason in rows
        ]

    def pending_spans(self, start: float, end: float) -> list[tuple[float, float | None]]:
        """(submit time, left the queue) of each job pending at some time in [start, end).

        It leaves the queue when its last run started, or ended unrun (cancelled while
        pending); None while it still waits (a requeued job: from its submit time). An
        array tail's pending tasks count one each, from the tail's submit time. Read by
        the state index (pending now) and the jobs_left index (left after `start`).
        """
        left = "coalesce(start_time, end_time)"
        with self._lock:
            rows = self._db.execute(
                "SELECT submit_time, NULL FROM jobs WHERE state = 'PENDING' AND submit_time < ?1"
                f" UNION ALL SELECT submit_time, {left} FROM jobs"
                " WHERE (start_time IS NOT NULL OR end_time IS NOT NULL)"
                f" AND {left} > ?2 AND state != 'PENDING' AND submit_time < ?1",
                (end, start),
            ).fetchall()
            tails = self._db.execute(
                "SELECT submit_time, remaining FROM array_tails"
                " WHERE state = 'PENDING' AND submit_time < ?",
                (end,),
            ).fetchall()
        spans: list[tuple[float, float | None]] = [(float(a), b) for a, b in rows]
        for submitted, remaining in tails:
            spans.extend([(float(submitted), None)] * int(remaining))
        return spans

    def active_counts(self) -> dict[str, int]:
        """How many jobs are in each active state."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT state, count(*) FROM jobs WHERE state IN ({_ACTIVE_SQL}) GROUP BY state"
            ).fetchall()
        return {state: int(n) for state, n in rows}

    def pending_counts(self, users: Collection[str] | None = None) -> dict[str, int]:
        """How many PENDING jobs (held ones too) each user has, of `users` when given.

        Users without any are left out. Read from the index of pending jobs, and from
        the array tails, whose pending tasks count one each.
        """
        where, params = "state = 'PENDING'", []
        if users is not None:
            where += f" AND user IN ({', '.join('?' * len(users))})"
            params = list(users)
        with self._lock:
            rows = self._db.execute(
                f"SELECT user, count(*) FROM jobs INDEXED BY jobs_pending_user WHERE {where}"
                " GROUP BY user",
                params,
            ).fetchall()
            tails = self._db.execute(
                f"SELECT user, sum(remaining) FROM array_tails WHERE {where} GROUP BY user",
                params,
            ).fetchall()
        counts = {user: int(n) for user, n in rows}
        for user, n in tails:
            counts[user] = counts.get(user, 0) + int(n)
        return counts

    def queue_counts(self) -> dict[tuple[str, str, str], int]:
        """(state, user, partition) -> how many jobs not yet ended are so.

        The tasks an array tail still holds count one each; partition "" when a job names
        none. One grouped read over the state index: a scrape costs what the queue holds,
        never what history holds (metrics).

        On a read-only connection of its own, outside the store's lock: reading every
        pending job's partition out of its spec is slow for a long queue, which must not
        hold up submits and the loop (WAL: a reader never blocks the
        writer, and sees the latest commit)."""
        active = [state.value for state in ACTIVE_STATES]
        marks = ", ".join("?" * len(active))
        columns = "state, user, coalesce(json_extract(spec, '$.partition'), '')"
        try:
            with contextlib.closing(
                sqlite3.connect(
                    self.path.absolute().as_uri() + "?mode=ro",
                    uri=True,
                    timeout=30,
                    isolation_level=None,
                )
            ) as db:
                db.execute("BEGIN")  # one snapshot for both: a tail's tasks become jobs
                rows = db.execute(
                    f"SELECT {columns}, count(*) FROM jobs INDEXED BY jobs_state"
                    f" WHERE state IN ({marks}) GROUP BY 1, 2, 3",
                    active,
                ).fetchall()
                tails = db.execute(
                    f"SELECT {columns}, sum(remaining) FROM array_tails"
                    f" WHERE state IN ({marks}) AND remaining > 0 GROUP BY 1, 2, 3",
                    active,
                ).fetchall()
        except sqlite3.Error as err:
            raise StoreError(f"cannot read the queue from {self.path}: {err}") from err
        counts: dict[tuple[str, str, str], int] = {}
        for state, user, partition, n in (*rows, *tails):
            key = (state, user, str(partition))
            counts[key] = counts.get(key, 0) + int(n)
        return counts

    def idle_flagged_count(self, prefix: str) -> int:
        """How many RUNNING jobs have a reason starting with `prefix`.

        The metrics' count of flagged idle GPU hoarders.
        """
        with self._lock:
            (count,) = self._db.execute(
                "SELECT count(*) FROM jobs WHERE state = 'RUNNING' AND substr(reason, 1, ?) = ?",
                (len(prefix), prefix),
            ).fetchone()
        return int(count)

    # -- briefs: many jobs, a bounded batch per call -----------------------------------
    #
    # A request over many jobs (`scancel -u`, a range of ids) reads these once per batch
    # of a few thousand: each call is one short read, so the lock is never held across
    # the whole request (Transitions' bulk writes take the batches these read).

    def briefs(self, ids: Sequence[int], narrow: JobFilter | None = None) -> list[JobBrief]:
        """Those of `ids` that name a job, by id; with `narrow`, each says if it passes."""
        found: list[JobBrief] = []
        kept, kept_params = filter_sql(narrow)
        build = _kept_brief if narrow else _brief
        columns = f"id, uid, user, state, {kept}" if narrow else "id, uid, user, state"
        with self._lock:
            for part in _chunks(ids):
                found.extend(
                    build(row)
                    for row in self._db.execute(
                        f"SELECT {columns} FROM jobs WHERE id IN ({_marks(part)})",
                        (*kept_params, *part),
                    )
                )
        missing = set(ids) - {brief.id for brief in found}
        found.extend(
            JobBrief(job.id, job.uid, job.user, job.state, not narrow or narrow.keeps(job))
            for job in self._tail_tasks(missing).values()
        )
        return sorted(found, key=lambda brief: brief.id)

    def briefs_between(
        self, first: int, last: int, *, after: int, limit: int, narrow: JobFilter | None = None
    ) -> list[JobBrief]:
        """The jobs with ids in first..last above `after`, by id, at most `limit`.

        Page through a range with after = the last id of the page before. With `narrow`,
        each brief says whether its job passes it.
        """
        kept, kept_params = filter_sql(narrow)
        build = _kept_brief if narrow else _brief
        columns = f"id, uid, user, state, {kept}" if narrow else "id, uid, user, state"
        # One lower bound: given two, SQLite seeks by one and filters by the other, and
        # each page would scan the range from its start again.
        with self._lock:
            rows = self._db.execute(
                f"SELECT {columns} FROM jobs WHERE id BETWEEN ? AND ? ORDER BY id LIMIT ?",
                (*kept_params, max(first, after + 1), last, limit),
            ).fetchall()
        return [build(row) for row in rows]

    def pending_ids(
        self,
        *,
        after: int,
        limit: int,
        users: Collection[str] | None = None,
        uid: int | None = None,
        narrow: JobFilter | None = None,
    ) -> list[int]:
        """Pending jobs' ids above `after`, by id, at most `limit`.

        Only those of `users`, of `uid` and passing `narrow` when given. Read in id order
        through the state index, whatever the filters, so paging through 500,000 reads
        each row once.
        """
        where = ["state = 'PENDING'", "id > ?"]
        params: list[object] = [after]
        if narrow:
            kept, kept_params = filter_sql(narrow)
            where.append(kept)
            params.extend(kept_params)
        if users is not None:
            where.append(f"user IN ({_marks(users)})")
            params.extend(users)
        if uid is not None:
            where.append("uid = ?")
            params.append(uid)
        with self._lock:
            rows = self._db.execute(
                f"SELECT id FROM jobs INDEXED BY jobs_state WHERE {' AND '.join(where)}"
                " ORDER BY id LIMIT ?",
                (*params, limit),
            ).fetchall()
        return [int(row[0]) for row in rows]
