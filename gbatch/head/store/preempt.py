"""Preemptions as the store keeps them (migration 18): the running jobs told to go.

For each, what it becomes and when it is killed, so that a restarted daemon finishes
them."""

from __future__ import annotations

from dataclasses import dataclass

from gbatch.core.model import IllegalTransition, JobState
from gbatch.head.store.transitions import StateChange, Transitions


@dataclass(frozen=True)
class Preempting:
    """A job told to go (COMPLETING), for the waiting job `preemptor`.

    Signalled, killed at `kill_at` unless it ended by then, then requeued, cancelled or
    ended PREEMPTED (`mode`: requeue, cancel, preempted). `why`: "Preempted by N (QOS
    q)"."""

    job_id: int
    preemptor: int
    mode: str
    kill_at: float
    why: str


_STOP_STATES = {
    "requeue": JobState.PENDING,
    "cancel": JobState.CANCELLED,
    "preempted": JobState.PREEMPTED,
}


class Preemptions(Transitions):
    """The preemptions begun and not yet over."""

    def begin_preemption(self, each: Preempting, now: float) -> bool:
        """Stop the RUNNING job for `each`, recorded; False when it no longer runs.

        COMPLETING, its stop state `each.mode`'s, reason and event `each.why`, and the
        preemption's row: one transaction."""
        change = StateChange(
            each.job_id,
            JobState.COMPLETING,
            each.why,
            {JobState.RUNNING},
            {"stop_state": _STOP_STATES[each.mode]},
        )
        with self._write() as db:
            try:
                self._set_state(db, change, now)
            except IllegalTransition:
                return False
            db.execute(
                "INSERT OR REPLACE INTO preemptions (job_id, preemptor, mode, kill_at, why)"
                " VALUES (?, ?, ?, ?, ?)",
                (each.job_id, each.preemptor, each.mode, each.kill_at, each.why),
            )
        return True

    def preempting(self) -> dict[int, Preempting]:
        """The preemptions begun and not over, by job id."""
        with self._lock:
            rows = self._db.execute(
                "SELECT job_id, preemptor, mode, kill_at, why FROM preemptions"
            ).fetchall()
        return {row[0]: Preempting(*row) for row in rows}

    def end_preemptions(self, job_ids: list[int]) -> None:
        """Forget the preemptions of jobs that left their nodes."""
        if not job_ids:
            return
        with self._write() as db:
            db.executemany("DELETE FROM preemptions WHERE job_id = ?", [(i,) for i in job_ids])
