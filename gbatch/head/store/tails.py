"""Array tails (migration 8): an array's pending tasks past its first few, as one record.

A tail is kept until its tasks come up (refill_arrays) or are named alone
(materialise); here too is what is done to a tail whole (cancel, hold, update).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Sequence
from dataclasses import replace

from gbatch.core import arrays
from gbatch.core.model import HELD_REASON, Job, JobSpec, JobState
from gbatch.core.selection import JobFilter
from gbatch.head.store.outbox import Outbox
from gbatch.head.store.rows import (
    _ACTIVE_SQL,
    _TAIL_COLUMNS,
    ArrayTail,
    _chunks,
    _decode_spec,
    _marks,
    _tail_by_id,
    _tail_from_row,
    _tail_of,
    filter_sql,
)


class Tails(Outbox):
    """Array tails: read, made rows as their tasks come up, and changed whole."""

    def tails(
        self,
        *,
        states: Collection[JobState] | None = None,
        users: Collection[str] | None = None,
        uid: int | None = None,
        overlapping: Sequence[tuple[int, int]] | None = None,
        since: float | None = None,
        db: sqlite3.Connection | None = None,
        narrow: JobFilter | None = None,
    ) -> list[ArrayTail]:
        """Array tails matching every given filter, by array id.

        `overlapping`: only those whose ids meet one of these (FIRST, LAST) ranges. `db`:
        a read connection of _reading's to read them on (else the store's own). `narrow`:
        scancel's -n/-p/-w (a tail's tasks are pending: on no node).
        """
        clauses: list[str] = []
        params: list[object] = []
        if narrow:
            kept, kept_params = filter_sql(narrow, tails=True)
            clauses.append(kept)
            params.extend(kept_params)
        if states is not None:
            clauses.append(f"state IN ({_marks(states)})")
            params.extend(state.value for state in states)
        if users is not None:
            clauses.append(f"user IN ({_marks(users)})")
            params.extend(users)
        if uid is not None:
            clauses.append("uid = ?")
            params.append(uid)
        if since is not None:
            clauses.append("submit_time >= ?")
            params.append(since)
        if overlapping is not None:
            if not overlapping:
                return []
            clauses.append(
                "(" + " OR ".join(["(array_id <= ? AND last_id >= ?)"] * len(overlapping)) + ")"
            )
            params.extend(bound for first, last in overlapping for bound in (last, first))
        where = " AND ".join(clauses) or "1"
        query = f"SELECT {_TAIL_COLUMNS} FROM array_tails WHERE {where} ORDER BY array_id"
        if db is not None:
            rows = db.execute(query, params).fetchall()
        else:
            with self._lock:
                rows = self._db.execute(query, params).fetchall()
        return [_tail_from_row(row) for row in rows]

    def _tail_tasks(self, ids: Collection[int]) -> dict[int, Job]:
        """Those of `ids` that are tasks held in array tails, as Jobs."""
        if not ids:
            return {}
        found: dict[int, Job] = {}
        for tail in self.tails(overlapping=[(min(ids), max(ids))]):
            for job_id in ids:
                if tail.has(job_id):
                    found[job_id] = tail.task(job_id - tail.array_id)
        return found

    def refill_arrays(self, window: int) -> int:
        """Make rows of pending arrays' next tasks, `window` pending each; the rows made.

        Each array not held then has `window` pending rows for the planner (fewer when
        its tail runs out). A held tail is left as it is.
        """
        made = 0
        with self._lock:
            heads = [
                row[0]
                for row in self._db.execute(
                    "SELECT array_id FROM array_tails WHERE state = 'PENDING' AND held = 0"
                )
            ]
        if not heads:
            return 0
        with self._write() as db:
            for array_id in heads:
                tail = _tail_by_id(db, array_id)
                if tail is None or tail.state is not JobState.PENDING:
                    continue
                (waiting,) = db.execute(
                    "SELECT count(*) FROM jobs INDEXED BY jobs_state"
                    " WHERE state = 'PENDING' AND id BETWEEN ? AND ?",
                    (tail.array_id, tail.last_id),
                ).fetchone()
                if waiting < window:
                    taken, _ = arrays.take(tail.positions, window - int(waiting))
                    made += self._materialise(db, tail, taken)
        return made

    def materialise(self, ids: Collection[int]) -> list[int]:
        """Make rows of those of `ids` that are array tasks still in a tail; the ids made.

        A request names them alone (cancel, hold, update, requeue one task); the rows
        take the tail's state.
        """
        made: list[int] = []
        with self._write() as db:
            by_tail: dict[int, tuple[ArrayTail, list[int]]] = {}
            for job_id in sorted(set(ids)):
                known = next(
                    (t for t, _ in by_tail.values() if t.array_id <= job_id <= t.last_id), None
                )
                tail = known or _tail_of(db, job_id)
                if tail is None or not tail.has(job_id):
                    continue
                by_tail.setdefault(tail.array_id, (tail, []))[1].append(job_id - tail.array_id)
            for tail, positions in by_tail.values():
                self._materialise(db, tail, positions)
                made.extend(tail.array_id + pos for pos in positions)
        return made

    def _materialise(
        self, db: sqlite3.Connection, tail: ArrayTail, positions: Sequence[int]
    ) -> int:
        """Rows for the tail's tasks at `positions`, as submit would have written them;
        the tail keeps the rest (and goes when none is left)."""
        if not positions:
            return 0
        ids = [tail.array_id + pos for pos in positions]
        change = self._change_number(db)
        db.executemany(
            "INSERT INTO jobs (id, uid, user, name, spec, state, reason, held, submit_time,"
            " end_time, queue_priority, changed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    tail.array_id + pos,
                    tail.uid,
                    tail.user,
                    tail.spec.name,
                    json.dumps(tail.task_spec(pos).to_dict()),
                    tail.state.value,
                    tail.reason,
                    tail.held,
                    tail.submit_time,
                    tail.end_time,
                    tail.spec.effective_priority,
                    change,
                )
                for pos in positions
            ],
        )
        self._submitted_events(ids, tail.submit_time)
        if tail.state is not JobState.PENDING:
            self._insert_events(
                db,
                [
                    (job_id, tail.end_time or tail.submit_time, tail.state.value, tail.reason)
                    for job_id in ids
                ],
            )
        sealed = db.execute(
            "SELECT secret, submit_env FROM array_tails WHERE array_id = ?", (tail.array_id,)
        ).fetchone()
        for table, token in zip(("job_secrets", "job_submit_env"), sealed, strict=True):
            if token is not None:
                db.executemany(
                    f"INSERT INTO {table} (job_id, sealed) VALUES (?, ?)",
                    [(job_id, token) for job_id in ids],
                )
        rest = arrays.without(tail.positions, positions)
        if rest:
            db.execute(
                "UPDATE array_tails SET positions = ?, remaining = ? WHERE array_id = ?",
                (json.dumps(rest), arrays.count(rest), tail.array_id),
            )
        else:
            db.execute("DELETE FROM array_tails WHERE array_id = ?", (tail.array_id,))
        return len(ids)

    def cancel_tails(self, array_ids: Collection[int], reason: str, now: float) -> int:
        """Cancel the pending tails of `array_ids` whole; returns how many tasks.

        Each stays as one CANCELLED record of its tasks (sacct's `N_[32-99999]`).
        """
        return self._change_tails(
            array_ids, "state = 'CANCELLED', reason = ?, end_time = ?", (reason, now), ended=now
        )

    def hold_tails(self, array_ids: Collection[int], held: bool) -> int:
        """Hold or release the pending tails of `array_ids`; how many tasks."""
        reason = HELD_REASON if held else ""
        return self._change_tails(array_ids, "held = ?, reason = ?", (held, reason))

    def _change_tails(
        self,
        array_ids: Collection[int],
        assignments: str,
        values: tuple[object, ...],
        *,
        ended: float | None = None,
    ) -> int:
        """`UPDATE array_tails SET <assignments>` of those of `array_ids` pending; how many
        tasks. `ended`: they end then, which may end their arrays (the whole-array mail)."""
        ordered = sorted(array_ids)
        done = 0
        with self._write() as db:
            for part in _chunks(ordered):
                where = f"state = 'PENDING' AND array_id IN ({_marks(part)})"
                rows = db.execute(
                    f"SELECT array_id, remaining FROM array_tails WHERE {where}", part
                ).fetchall()
                db.execute(f"UPDATE array_tails SET {assignments} WHERE {where}", (*values, *part))
                done += sum(int(n) for _, n in rows)
                if ended is not None and self._notify.active:
                    for array_id, _ in rows:
                        tail = _tail_by_id(db, int(array_id))
                        if tail is not None:
                            self._queue_tail_end(db, tail.record(), ended)
        return done

    def update_tail_spec(self, array_id: int, spec: JobSpec) -> None:
        """scontrol update of a whole array: its waiting tasks take `spec`.

        `spec` is any task's new spec: each task's index is put back as it becomes a row.
        """
        with self._write() as db:
            tail = _tail_by_id(db, array_id)
            if tail is None or tail.state is not JobState.PENDING:
                return
            base = replace(spec, array_task=tail.spec.array_task, array_pos=tail.spec.array_pos)
            db.execute(
                "UPDATE array_tails SET spec = ? WHERE array_id = ?",
                (json.dumps(base.to_dict()), array_id),
            )

    def set_array_throttle(self, array_id: int, last_id: int, throttle: int | None) -> None:
        """scontrol update ArrayTaskThrottle: the array's unended rows and tail get the limit.

        Written in one transaction.
        """
        with self._write() as db:
            for job_id, text in db.execute(
                f"SELECT id, spec FROM jobs WHERE id BETWEEN ? AND ? AND state IN ({_ACTIVE_SQL})",
                (array_id, last_id),
            ).fetchall():
                spec = replace(_decode_spec(text), array_throttle=throttle)
                db.execute(
                    "UPDATE jobs SET spec = ?, changed = ? WHERE id = ?",
                    (json.dumps(spec.to_dict()), self._change_number(db), job_id),
                )
            tail = _tail_by_id(db, array_id)
            if tail is not None:
                spec = replace(tail.spec, array_throttle=throttle)
                db.execute(
                    "UPDATE array_tails SET spec = ? WHERE array_id = ?",
                    (json.dumps(spec.to_dict()), array_id),
                )
