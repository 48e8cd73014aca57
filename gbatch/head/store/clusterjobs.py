"""Jobs sent to a Slurm cluster's partition (migration 20), and their state changes.

Crash-safe as a dispatch is: the intent (attempt, marker) is committed before sbatch
runs, and the cluster's id with the job's "sent" event in one transaction after it; a
head killed between the two finds the job by its marker and records it then (the loop's
cluster step), never sending it twice. A job with a row here is the cluster's: the
fleet's readers of allocated jobs (`jobs_in`) never see it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from gbatch.core.model import Job, JobState
from gbatch.head.store.transitions import StateChange, Transitions
from gbatch.head.store.usage import Usage, _accrue

# Rows read per pass at most: the jobs a pass may send (max_jobs caps them further).
SEND_BATCH = 100


@dataclass(frozen=True)
class ClusterJob:
    """One sent job's row.

    The attempt sent, its marker, the cluster's id (None: not known yet), and whether
    the cluster may still hold it."""

    job_id: int
    attempt: int
    partition: str
    marker: str
    cluster_id: str | None
    open: bool


def _row(row: tuple[int, int, str, str, str | None, int]) -> ClusterJob:
    return ClusterJob(row[0], row[1], row[2], row[3], row[4], bool(row[5]))


_COLUMNS = "job_id, attempt, partition, marker, cluster_id, open"


class ClusterJobs(Transitions):
    """The jobs of the cluster partitions: to send, sent, open, closed."""

    def cluster_unsent(self, partitions: Collection[str], limit: int = SEND_BATCH) -> list[Job]:
        """Runnable (pending, not held) jobs of `partitions` not yet sent, oldest first."""
        if not partitions:
            return []
        marks = ", ".join("?" * len(partitions))
        return self._select_raw(
            "state = 'PENDING' AND held = 0"
            f" AND json_extract(spec, '$.partition') IN ({marks})"
            " AND NOT EXISTS (SELECT 1 FROM cluster_jobs c WHERE c.job_id = jobs.id AND c.open = 1)"
            " ORDER BY id LIMIT ?",
            [*partitions, limit],
        )

    def cluster_jobs(self, partition: str) -> list[tuple[ClusterJob, Job]]:
        """The open rows of `partition`, each with its job."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM cluster_jobs WHERE partition = ? AND open = 1"
                " ORDER BY job_id",
                (partition,),
            ).fetchall()
            found = []
            for row in rows:
                job = self._get(self._db, row[0])
                if job is not None:
                    found.append((_row(row), job))
        return found

    def cluster_sent_jobs(self) -> list[Job]:
        """The jobs of every cluster partition the cluster may hold (open rows).

        They count against their users' limits as running jobs."""
        return self._select_raw(
            # From the open rows' partial index: never a scan of every job.
            "id IN (SELECT job_id FROM cluster_jobs WHERE open = 1)"
            " AND state NOT IN ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'NODE_FAIL',"
            " 'OUT_OF_MEMORY', 'PREEMPTED') ORDER BY id",
            [],
        )

    def cluster_open_count(self, partition: str) -> int:
        """How many jobs the cluster of `partition` may still hold (open rows)."""
        with self._lock:
            row = self._db.execute(
                "SELECT count(*) FROM cluster_jobs WHERE partition = ? AND open = 1", (partition,)
            ).fetchone()
        return int(row[0])

    def cluster_job(self, job_id: int) -> ClusterJob | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_COLUMNS} FROM cluster_jobs WHERE job_id = ?", (job_id,)
            ).fetchone()
        return None if row is None else _row(row)

    def route_to_cluster(
        self, job_id: int, lab: str, cluster: str, reason: str, now: float
    ) -> bool:
        """-p gpu,uni: the waiting job goes to its cluster's partition, with its event.

        Its spec's partition becomes the cluster's (the cluster step sends it from there)
        and its alternate goes. False when it is no longer a runnable job of `lab` that
        may go to `cluster` (started, held, cancelled or updated since it was read)."""
        with self._write() as db:
            changed = db.execute(
                "UPDATE jobs SET spec = json_remove(json_set(spec, '$.partition', ?),"
                " '$.alternate'), reason = ?, changed = ?"
                " WHERE id = ? AND state = 'PENDING' AND held = 0"
                " AND json_extract(spec, '$.partition') = ?"
                " AND json_extract(spec, '$.alternate') = ?",
                (cluster, reason, self._change_number(db), job_id, lab, cluster),
            ).rowcount
            if changed:
                self._insert_events(db, [(job_id, now, JobState.PENDING.value, reason)])
        return bool(changed)

    def begin_cluster_send(
        self, job_id: int, attempt: int, partition: str, marker: str, now: float
    ) -> bool:
        """Record the intent to send the job, before sbatch runs.

        False when it is no longer pending (cancelled or held since it was read)."""
        with self._write() as db:
            pending = db.execute(
                "SELECT 1 FROM jobs WHERE id = ? AND state = 'PENDING' AND held = 0", (job_id,)
            ).fetchone()
            if pending is None:
                return False
            db.execute(
                f"INSERT OR REPLACE INTO cluster_jobs ({_COLUMNS}) VALUES (?, ?, ?, ?, NULL, 1)",
                (job_id, attempt, partition, marker),
            )
        return True

    def record_cluster_id(self, job_id: int, cluster_id: str, reason: str, now: float) -> None:
        """The cluster's id of a sent job, with its reason and event: one transaction."""
        with self._write() as db:
            db.execute(
                "UPDATE cluster_jobs SET cluster_id = ? WHERE job_id = ?", (cluster_id, job_id)
            )
            changed = db.execute(
                "UPDATE jobs SET reason = ?, changed = ? WHERE id = ? AND state = 'PENDING'",
                (reason, self._change_number(db), job_id),
            ).rowcount
            if changed:
                self._insert_events(db, [(job_id, now, JobState.PENDING.value, reason)])

    def cluster_reasons(self, reasons: Collection[tuple[int, str]]) -> None:
        """Pending jobs' reasons as the cluster gives them, all in one transaction.

        No events: they change often."""
        if not reasons:
            return
        with self._write() as db:
            change = self._change_number(db)
            db.executemany(
                "UPDATE jobs SET reason = ?, changed = ? WHERE id = ? AND state = 'PENDING'",
                [(reason, change, job_id) for job_id, reason in reasons],
            )

    def cluster_started(
        self, job_id: int, attempt: int, nodes: str, reason: str, now: float
    ) -> None:
        """A sent job the cluster runs: PENDING -> CONFIGURING -> RUNNING on its nodes."""
        fields = {"node": nodes, "attempt": attempt, "start_time": now}
        with self._write() as db:
            self._set_state(
                db,
                StateChange(job_id, JobState.CONFIGURING, reason, {JobState.PENDING}, fields),
                now,
            )
            self._set_state(
                db, StateChange(job_id, JobState.RUNNING, reason, {JobState.CONFIGURING}, {}), now
            )

    def cluster_ended(
        self,
        job_id: int,
        state: JobState,
        reason: str,
        now: float,
        *,
        expect: Collection[JobState],
        usage: Usage | None = None,
        **fields: object,
    ) -> None:
        """A sent job the cluster ended (or lost): its final state, and its row closed.

        `usage`: the run's GPU-seconds, folded into its user's fair share with it."""
        with self._write() as db:
            self._set_state(
                db, StateChange(job_id, state, reason, expect, {"end_time": now, **fields}), now
            )
            if usage is not None:
                _accrue(db, usage, now)
            db.execute("UPDATE cluster_jobs SET open = 0 WHERE job_id = ?", (job_id,))

    def close_cluster_job(self, job_id: int) -> None:
        """The cluster holds the job no more (it ended here first: a cancel)."""
        with self._write() as db:
            db.execute("UPDATE cluster_jobs SET open = 0 WHERE job_id = ?", (job_id,))
