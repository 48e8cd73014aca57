"""State changes (the one way a job changes state) and the other writes to a job's row.

A state change checks the edge, writes its event and queues the events it owes to the
outbox. Beside it: holds, notes, spec updates, and the same done by set over many
pending jobs (a sweep's batch).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gbatch.core.dependency import NEVER_REASON
from gbatch.core.limits import PendingLimitReached
from gbatch.core.model import (
    HELD_REASON,
    IllegalTransition,
    Job,
    JobSpec,
    JobState,
    check_transition,
)
from gbatch.core.qos import PREEMPTED_BY
from gbatch.head.secretbox import SecretKeyError
from gbatch.head.store.db import JobNotFound
from gbatch.head.store.outbox import Outbox
from gbatch.head.store.rows import _chunks, _marks, decode_peers, encode_peers
from gbatch.head.store.submit import pending_count
from gbatch.head.store.usage import Usage, _accrue

# Columns set_state may write besides state and reason.
_UPDATABLE = frozenset(
    {
        "start_time",
        "end_time",
        "node",
        "gpus",
        "gpu_uuids",
        "peers",
        "attempt",
        "exit_code",
        "exit_signal",
        "stop_state",
    }
)


@dataclass(frozen=True)
class StateChange:
    """One state change, as set_state takes it; set_states takes many."""

    job_id: int
    new: JobState
    reason: str
    expect: Collection[JobState] | None = None
    fields: Mapping[str, object] = field(default_factory=dict)
    # An ended run's GPU-seconds, folded into its user's usage with the change.
    usage: Usage | None = None
    # A start on the lab's nodes (the dispatcher's): refused for a job sent to a cluster.
    on_lab: bool = False


def _encode(fields: Mapping[str, object]) -> dict[str, object]:
    encoded: dict[str, object] = {}
    for name, value in fields.items():
        if name in ("gpus", "gpu_uuids"):
            assert isinstance(value, tuple | list)
            value = ",".join(str(g) for g in value)
        elif name == "peers":
            assert isinstance(value, tuple | list)
            value = encode_peers(value)
        elif isinstance(value, JobState):
            value = value.value
        encoded[name] = value
    return encoded


def _keep_ended_run(db: sqlite3.Connection, change: StateChange, now: float) -> None:
    """Keep the run a requeue ends (earlier_runs) before the job's row forgets its placement.

    Only a run that started: its start_time is this attempt's when it is no earlier than
    the job's latest dispatch (CONFIGURING event); a start that was never confirmed
    (cancelled or lost while CONFIGURING, then COMPLETING) left the previous run's there.
    """
    row = db.execute(
        "SELECT attempt, start_time, node, gpus, peers FROM jobs WHERE id = ?", (change.job_id,)
    ).fetchone()
    attempt, start, node, gpus, peers = row
    if start is None or not node:
        return
    dispatched = db.execute(
        "SELECT max(time) FROM events WHERE job_id = ? AND state = 'CONFIGURING'",
        (change.job_id,),
    ).fetchone()[0]
    if dispatched is not None and start < dispatched:
        return
    ended = change.fields.get("end_time") or now
    placements = [[node, [int(g) for g in gpus.split(",") if g]], *decode_peers(peers)]
    db.execute(
        "INSERT OR REPLACE INTO earlier_runs VALUES (?, ?, ?, ?, ?, ?)",
        (change.job_id, attempt, start, ended, json.dumps(placements), change.reason),
    )


def _requeues_stopping(db: sqlite3.Connection, user: str) -> int:
    """`user`'s jobs being stopped to go back to PENDING (a running job's requeue)."""
    row = db.execute(
        "SELECT count(*) FROM jobs INDEXED BY jobs_state"
        " WHERE state = 'COMPLETING' AND stop_state = 'PENDING' AND user = ?",
        (user,),
    ).fetchone()
    return int(row[0])


class Transitions(Outbox):
    """State changes and the other writes to a job's row after its submit.

    The other writes are holds, notes, reasons and spec updates; each is done one job at
    a time or by set.
    """

    def set_state(
        self,
        job_id: int,
        new: JobState,
        reason: str,
        now: float,
        *,
        expect: Collection[JobState] | None = None,
        usage: Usage | None = None,
        **fields: object,
    ) -> Job:
        """The one way a job changes state: check the edge, write it and its event.

        `expect`, when given, is the set of states the caller believes the job is in;
        a job found in another state raises IllegalTransition without writing, so a
        racing cancel and dispatch cannot both win. `usage`, when given, folds the
        ended run's GPU-seconds into its user's fair-share usage in the same
        transaction (a crash cannot record the end and lose the usage). `fields`
        updates other columns (start_time, end_time, node, gpus, attempt, exit_code,
        exit_signal, stop_state).

        On the move to CONFIGURING (a dispatch) the Job returned carries the values of
        its secret env (Job.secret_values) for the launch that follows; no other read
        decrypts them. Values that cannot be opened (the key file was replaced) are left
        out, and the launch refuses to start without them.
        """
        with self._write() as db:
            change = StateChange(job_id, new, reason, expect, fields)
            job, token, env_token = self._set_state_read(db, change, now)
            if usage is not None:
                _accrue(db, usage, now)
        return self._opened(job, token, env_token)

    def set_states_read(
        self, changes: Sequence[StateChange], now: float
    ) -> list[Job | IllegalTransition | JobNotFound]:
        """set_state for each change in ONE transaction: each one's Job, or why it was refused.

        One fsync: a pass's starts. Each is answered as set_state answers (the Job,
        secrets opened on the move to CONFIGURING) or with why it was refused; a refused
        change undoes no other. A change's `usage` is not folded in here (set_states
        folds it; the loop's starts carry none).
        """
        read: list[tuple[Job, Any, Any] | IllegalTransition | JobNotFound] = []
        with self._write() as db:
            for change in changes:
                try:
                    read.append(self._set_state_read(db, change, now))
                except (IllegalTransition, JobNotFound) as err:
                    read.append(err)
        return [each if isinstance(each, Exception) else self._opened(*each) for each in read]

    def _set_state_read(
        self, db: sqlite3.Connection, change: StateChange, now: float
    ) -> tuple[Job, Any, Any]:
        """Write `change`; the job after it and, on the move to CONFIGURING, its sealed
        secret env and submit env (None where it has none)."""
        self._set_state(db, change, now)
        job = self._get(db, change.job_id)
        assert job is not None
        configuring = change.new is JobState.CONFIGURING
        token = (
            db.execute("SELECT sealed FROM job_secrets WHERE job_id = ?", (job.id,)).fetchone()
            if configuring and job.spec.secret_env
            else None
        )
        env_token = (
            db.execute("SELECT sealed FROM job_submit_env WHERE job_id = ?", (job.id,)).fetchone()
            if configuring
            else None
        )
        return job, token, env_token

    def _opened(self, job: Job, token: Any, env_token: Any) -> Job:
        """`job` with the values of its sealed secret env and submit env, where they open."""
        if token is not None:
            with contextlib.suppress(SecretKeyError):
                values = self._secrets.open(bytes(token[0]))
                job = replace(job, secret_values=tuple(values.items()))
        if env_token is not None:
            with contextlib.suppress(SecretKeyError):
                values = self._secrets.open(bytes(env_token[0]))
                job = replace(job, submit_env=tuple(values.items()))
        return job

    def set_states(
        self, changes: Sequence[StateChange], now: float
    ) -> list[IllegalTransition | JobNotFound | None]:
        """Many set_state calls in ONE transaction; per change, None when written, else why not.

        One fsync: a sweep such as `scancel --me` over thousands of jobs. A refused
        change does not undo the others.
        """
        outcomes: list[IllegalTransition | JobNotFound | None] = []
        with self._write() as db:
            for change in changes:
                try:
                    self._set_state(db, change, now)
                    if change.usage is not None:
                        _accrue(db, change.usage, now)
                    outcomes.append(None)
                except (IllegalTransition, JobNotFound) as err:
                    outcomes.append(err)
        return outcomes

    def requeue_within(
        self, change: StateChange, user: str, max_pending: int | None, now: float
    ) -> IllegalTransition | JobNotFound | PendingLimitReached | None:
        """Write `change`, a requeue of a job of `user`, unless it takes them past `max_pending`.

        None when written, else why not. The user's pending jobs are counted as a submit
        counts them, inside the same transaction (concurrent requeues and submits cannot
        race past the limit), with their jobs being stopped to be requeued: each will be
        pending soon. `max_pending` None: no limit (an admin's requeue)."""
        with self._write() as db:
            if max_pending is not None:
                have = pending_count(db, user) + _requeues_stopping(db, user)
                if have + 1 > max_pending:
                    return PendingLimitReached(user, have, 1, max_pending)
            try:
                self._set_state(db, change, now)
            except (IllegalTransition, JobNotFound) as err:
                return err
        return None

    def _set_state(self, db: sqlite3.Connection, change: StateChange, now: float) -> None:
        unknown = set(change.fields) - _UPDATABLE
        if unknown:
            raise ValueError(f"set_state cannot write {sorted(unknown)}")
        row = db.execute("SELECT state FROM jobs WHERE id = ?", (change.job_id,)).fetchone()
        if row is None:
            raise JobNotFound(change.job_id)
        current = JobState(row[0])
        if change.expect is not None and current not in change.expect:
            raise IllegalTransition(current, change.new)
        check_transition(current, change.new)
        if (
            change.on_lab
            and db.execute(
                "SELECT 1 FROM cluster_jobs WHERE job_id = ? AND open = 1", (change.job_id,)
            ).fetchone()
        ):
            # Sent to a cluster (-p gpu,uni routed it there after the plan read it): a
            # job never runs in both.
            raise IllegalTransition(current, change.new)
        if change.new is JobState.PENDING and current in (JobState.RUNNING, JobState.COMPLETING):
            _keep_ended_run(db, change, now)
        columns = {
            "state": change.new.value,
            "reason": change.reason,
            **_encode(change.fields),
            "changed": self._change_number(db),
        }
        assignments = ", ".join(f"{name} = ?" for name in columns)
        db.execute(
            f"UPDATE jobs SET {assignments} WHERE id = ?", (*columns.values(), change.job_id)
        )
        events = [(change.job_id, now, change.new.value, change.reason)]
        if change.new is JobState.PENDING and change.reason.startswith(PREEMPTED_BY):
            # Requeued after a preemption: PREEMPTED, then PENDING, in its history.
            events.insert(0, (change.job_id, now, JobState.PREEMPTED.value, change.reason))
        self._insert_events(db, events)
        if self._notify.active and self._notify.may_notify(current, change.new):
            self._queue_job_events(db, change.job_id, now, old=current)

    def set_running_reason(
        self, job_id: int, attempt: int, reason: str, *, replacing: str = ""
    ) -> bool:
        """Set the reason of a job still RUNNING its run `attempt`; False when it has moved on.

        For a flag (idle GPUs, over a GPU memory budget) going or coming back. Not a state
        change, so no event row. `replacing`: only a reason starting with it is replaced
        (a flag going takes no other flag with it).
        """
        with self._write() as db:
            return bool(
                db.execute(
                    "UPDATE jobs SET reason = ?, changed = ?"
                    " WHERE id = ? AND attempt = ? AND state = 'RUNNING'"
                    " AND substr(reason, 1, ?) = ?",
                    (reason, self._change_number(db), job_id, attempt, len(replacing), replacing),
                ).rowcount
            )

    def note(self, job_id: int, state: JobState, reason: str, now: float) -> bool:
        """Record why a job in `state` stays there; False when it has left `state`.

        It writes the job's reason and an event, with no state change (a start whose
        outcome is unknown, say).
        """
        with self._write() as db:
            changed = db.execute(
                "UPDATE jobs SET reason = ?, changed = ? WHERE id = ? AND state = ?",
                (reason, self._change_number(db), job_id, state.value),
            ).rowcount
            if changed:
                self._insert_events(db, [(job_id, now, state.value, reason)])
        return bool(changed)

    def set_held(self, job_id: int, held: bool, now: float) -> Job:
        """Hold or release a pending job (recorded as an event, state unchanged).

        Raises IllegalTransition when the job is no longer PENDING."""
        with self._write() as db:
            job = self._get(db, job_id)
            if job is None:
                raise JobNotFound(job_id)
            if job.state is not JobState.PENDING:
                # Checked inside the transaction: the loop may have just dispatched it.
                raise IllegalTransition(job.state, job.state)
            reason = HELD_REASON if held else ""
            db.execute(
                "UPDATE jobs SET held = ?, reason = ?, changed = ? WHERE id = ?",
                (held, reason, self._change_number(db), job_id),
            )
            event = "held by user" if held else "released"
            self._insert_events(db, [(job_id, now, job.state.value, event)])
            job = self._get(db, job_id)
        assert job is not None
        return job

    def update_spec(
        self,
        job_id: int,
        old: JobSpec,
        new: JobSpec,
        states: Collection[JobState],
        reason: str,
        now: float,
    ) -> Job:
        """scontrol update: replace the job's spec `old` with `new`, `reason` as its event.

        Its name and queue_priority change with it, and the event is written, in ONE
        transaction.

        Raises JobNotFound, and IllegalTransition (nothing written) when the job is no
        longer in one of `states` or its spec is no longer `old` (another update came
        first): the caller checked `new` against what it read."""
        with self._write() as db:
            job = self._get(db, job_id)
            if job is None:
                raise JobNotFound(job_id)
            if job.state not in states or job.spec != old:
                raise IllegalTransition(job.state, job.state)
            # A job found never satisfied stays so (the loop reads its reason), unless
            # its dependency is what changed: then the loop judges the new one.
            pending_reason = (
                ""
                if job.reason == NEVER_REASON and new.dependency != old.dependency
                else job.reason
            )
            db.execute(
                "UPDATE jobs SET spec = ?, name = ?, queue_priority = ?, reason = ?, changed = ?"
                " WHERE id = ?",
                (
                    json.dumps(new.to_dict()),
                    new.name,
                    new.effective_priority,
                    pending_reason,
                    self._change_number(db),
                    job_id,
                ),
            )
            self._insert_events(db, [(job_id, now, job.state.value, reason)])
            job = self._get(db, job_id)
        assert job is not None
        return job

    # -- many pending jobs, a bounded batch per call ---------------------------------
    #
    # A request over many jobs (`scancel -u`, a range of ids) calls these once per batch
    # of a few thousand: each call is one transaction, so the lock is never held across
    # the whole request and the loop and other requests run between batches. They write
    # what set_state and set_held write, by set rather than by row.

    def cancel_pending(self, ids: Sequence[int], reason: str, now: float) -> list[int]:
        """Cancel those of `ids` still PENDING, in ONE transaction; returns the ids cancelled.

        Each becomes CANCELLED with `reason` and end_time `now`, with its event, as
        set_state would write it. The ids come by id; the others had moved on (the loop
        dispatched them) or never existed.
        """
        check_transition(JobState.PENDING, JobState.CANCELLED)
        cancelled = JobState.CANCELLED.value
        return self._change_pending(
            ids,
            "state = ?, reason = ?, end_time = ?",
            (cancelled, reason, now),
            (now, cancelled, reason),
            cancelling=True,
        )

    def set_held_many(self, ids: Sequence[int], held: bool, now: float) -> list[int]:
        """Hold or release those of `ids` still PENDING, in ONE transaction; returns the ids done.

        Each as set_held would (flag, reason, an event). The ids come by id; the others
        are no longer pending or never existed.
        """
        reason, event = (HELD_REASON, "held by user") if held else ("", "released")
        return self._change_pending(
            ids, "held = ?, reason = ?", (held, reason), (now, JobState.PENDING.value, event)
        )

    def _change_pending(
        self,
        ids: Sequence[int],
        assignments: str,
        values: tuple[object, ...],
        event: tuple[float, str, str],
        *,
        cancelling: bool = False,
    ) -> list[int]:
        """`UPDATE jobs SET <assignments>` for those of `ids` still PENDING, each with an
        event (time, state, reason), in one transaction; the ids changed, by id.
        `cancelling`: they end, and their END events go to the outbox."""
        done: list[int] = []
        with self._write() as db:
            for part in _chunks(ids):
                found = self._still_pending(db, part)
                if found:
                    db.execute(
                        f"UPDATE jobs SET {assignments}, changed = ? WHERE id IN ({_marks(found)})",
                        (*values, self._change_number(db), *found),
                    )
                    self._insert_events(db, [(job_id, *event) for job_id in found])
                    if cancelling:
                        self._queue_cancelled(db, found, event[0])
                    done.extend(found)
        return sorted(done)

    @staticmethod
    def _still_pending(db: sqlite3.Connection, ids: Sequence[int]) -> list[int]:
        rows = db.execute(
            f"SELECT id FROM jobs WHERE state = 'PENDING' AND id IN ({_marks(ids)})", ids
        ).fetchall()
        return [int(row[0]) for row in rows]
