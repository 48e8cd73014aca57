"""Steps (migration 13): a job's steps opened, ended, and read for the loop and sacct.

A step is opened inside the transaction that checks its job is still running the
attempt it was asked for, so a step never opens in a job that has just ended; it gets
the next number of its job (salloc's shell: `interactive`), and whether it leads (the
first step of an srun/salloc allocation, whose end ends the allocation).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from gbatch.core.model import JobState
from gbatch.core.steps import INTERACTIVE, Step, StepAsk, pick_gpus
from gbatch.head.store.db import Database
from gbatch.head.store.rows import _chunks, _marks

_COLUMNS = (
    "job_id, step_id, attempt, name, argv, state, user, pty, leads, start_time, end_time,"
    " exit_code, exit_signal, reason, gpus, cpus, mem_mb, exclusive, nodes"
)


WHOLE_JOB = StepAsk()  # a step that asks nothing of its own: it sees the whole job


class StepRefused(Exception):
    """A step that may not open now; str() says why, for the one who asked."""


class StepBusy(StepRefused):
    """The GPUs a step asks for are held by the job's other steps now: try again later."""


def _step(row: tuple[object, ...]) -> Step:
    (job_id, step_id, attempt, name, argv, state, user, pty, leads, start, end, code, sig, why) = (
        row[:14]
    )
    gpus, cpus, mem_mb, exclusive, nodes = row[14:]
    return Step(
        job_id=int(job_id),  # type: ignore[call-overload]
        step_id=int(step_id),  # type: ignore[call-overload]
        attempt=int(attempt),  # type: ignore[call-overload]
        name=str(name),
        argv=tuple(json.loads(str(argv))),
        state=JobState(state),
        user=str(user),
        pty=bool(pty),
        leads=bool(leads),
        start_time=float(start),  # type: ignore[arg-type]
        end_time=None if end is None else float(end),  # type: ignore[arg-type]
        exit_code=None if code is None else int(code),  # type: ignore[call-overload]
        exit_signal=None if sig is None else int(sig),  # type: ignore[call-overload]
        reason=str(why),
        gpus=None if gpus is None else tuple(int(g) for g in str(gpus).split(",") if g),
        cpus=None if cpus is None else int(cpus),  # type: ignore[call-overload]
        mem_mb=None if mem_mb is None else int(mem_mb),  # type: ignore[call-overload]
        exclusive=bool(exclusive),
        nodes=tuple((str(n), int(c)) for n, c in json.loads(str(nodes))) if nodes else (),
    )


class Steps(Database):
    """Steps opened and ended; the open ones, and those of a set of jobs."""

    def open_step(
        self,
        job_id: int,
        attempt: int,
        *,
        name: str,
        argv: Sequence[str],
        user: str,
        pty: bool,
        interactive: bool,
        now: float,
        max_open_per_user: int,
        ask: StepAsk = WHOLE_JOB,
        job_gpus: tuple[int, ...] = (),
        nodes: tuple[tuple[str, int], ...] = (),
    ) -> Step:
        """Record a new step of `job_id`'s run `attempt`, RUNNING from `now`; the Step.

        StepRefused (nothing written) when the job is not running that attempt any more,
        when `interactive` is asked of a job that is not an salloc allocation or has
        its interactive step already, or when `user` has `max_open_per_user` steps open.
        A step asking GPUs (`ask`) gets `ask.gpus` of `job_gpus` that no other running
        step of the job holds for itself (pick_gpus), chosen in the same transaction so
        that two steps never get the same ones; StepBusy when there are not enough now.
        `nodes`: its tasks across the allocation (Step.nodes; empty: one task, first node).
        """
        with self._write() as db:
            row = db.execute(
                "SELECT state, attempt, json_extract(spec, '$.interactive') FROM jobs WHERE id = ?",
                (job_id,),
            ).fetchone()
            if row is None or row[0] != JobState.RUNNING.value or int(row[1]) != attempt:
                state = "gone" if row is None else str(row[0])
                raise StepRefused(f"job {job_id} is not running (it is {state})")
            kind = row[2]
            opened = int(
                db.execute(
                    "SELECT count(*) FROM steps WHERE job_id = ? AND attempt = ?",
                    (job_id, attempt),
                ).fetchone()[0]
            )
            if interactive and (kind != "salloc" or opened):
                raise StepRefused(
                    f"job {job_id} is not an salloc allocation waiting for its shell. Use "
                    "gbatch srun to run a step in it"
                )
            mine = int(
                db.execute(
                    "SELECT count(*) FROM steps INDEXED BY steps_open"
                    " WHERE state = 'RUNNING' AND user = ?",
                    (user,),
                ).fetchone()[0]
            )
            if mine >= max_open_per_user:
                raise StepRefused(
                    f"{user} has {mine} steps running, the most one user may. End some first"
                )
            gpus = None
            if ask.gpus is not None:
                held = _held_gpus(db, job_id, attempt)
                gpus = pick_gpus(job_gpus, held, ask.gpus, overlap=ask.overlap)
                if gpus is None:
                    raise StepBusy(
                        f"Requested nodes are busy: {len(held)} of job {job_id}'s "
                        f"{len(job_gpus)} GPUs are held by its other steps"
                    )
            step_id = INTERACTIVE if interactive else _next_number(db, job_id)
            step = Step(
                job_id=job_id,
                step_id=step_id,
                attempt=attempt,
                name=name,
                argv=tuple(argv),
                state=JobState.RUNNING,
                user=user,
                pty=pty,
                leads=kind is not None and opened == 0,
                start_time=now,
                gpus=gpus,
                cpus=ask.cpus,
                mem_mb=ask.mem_mb,
                exclusive=gpus is not None and not ask.overlap,
                nodes=nodes,
            )
            db.execute(
                f"INSERT INTO steps ({_COLUMNS}) VALUES ({_marks(range(19))})",
                (
                    step.job_id,
                    step.step_id,
                    step.attempt,
                    step.name,
                    json.dumps(list(step.argv)),
                    step.state.value,
                    step.user,
                    int(step.pty),
                    int(step.leads),
                    step.start_time,
                    None,
                    None,
                    None,
                    "",
                    None if gpus is None else ",".join(str(g) for g in gpus),
                    step.cpus,
                    step.mem_mb,
                    int(step.exclusive),
                    json.dumps([list(n) for n in nodes]) if nodes else "",
                ),
            )
        return step

    def end_step(
        self,
        job_id: int,
        step_id: int,
        state: JobState,
        end_time: float,
        *,
        exit_code: int | None = None,
        exit_signal: int | None = None,
        reason: str = "",
    ) -> bool:
        """Record a RUNNING step's end; False when it had ended already."""
        with self._write() as db:
            return bool(
                db.execute(
                    "UPDATE steps SET state = ?, end_time = ?, exit_code = ?, exit_signal = ?,"
                    " reason = ? WHERE job_id = ? AND step_id = ? AND state = 'RUNNING'",
                    (state.value, end_time, exit_code, exit_signal, reason, job_id, step_id),
                ).rowcount
            )

    def open_steps(self) -> list[Step]:
        """Every step still RUNNING, by job and number (read by their own index)."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM steps INDEXED BY steps_open WHERE state = 'RUNNING'"
                " ORDER BY job_id, step_id"
            ).fetchall()
        return [_step(row) for row in rows]

    def unled_allocations(self) -> list[int]:
        """The unfinished srun/salloc allocations whose first step never opened.

        (Or opened in an earlier run of theirs): those a restarted gbatchd watches again."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id FROM jobs INDEXED BY jobs_state"
                " WHERE state IN ('PENDING', 'CONFIGURING', 'RUNNING')"
                " AND json_extract(spec, '$.interactive') IS NOT NULL"
                " AND NOT EXISTS (SELECT 1 FROM steps WHERE steps.job_id = jobs.id"
                " AND steps.attempt = jobs.attempt AND steps.leads = 1)"
            ).fetchall()
        return [int(row[0]) for row in rows]

    def steps_of(self, job_ids: Sequence[int]) -> list[Step]:
        """The steps of `job_ids`, by job and number (interactive first), in one snapshot."""
        found: list[Step] = []
        with self._reading() as db:
            for part in _chunks(sorted(set(job_ids))):
                rows = db.execute(
                    f"SELECT {_COLUMNS} FROM steps WHERE job_id IN ({_marks(part)})"
                    " ORDER BY job_id, step_id",
                    tuple(part),
                ).fetchall()
                found.extend(_step(row) for row in rows)
        return found


def _held_gpus(db: sqlite3.Connection, job_id: int, attempt: int) -> set[int]:
    """The GPUs the job's running steps hold for themselves (steps_open's rows)."""
    rows = db.execute(
        "SELECT gpus FROM steps INDEXED BY steps_open"
        " WHERE job_id = ? AND attempt = ? AND state = 'RUNNING' AND exclusive = 1",
        (job_id, attempt),
    ).fetchall()
    return {int(g) for (text,) in rows for g in str(text or "").split(",") if g}


def _next_number(db: sqlite3.Connection, job_id: int) -> int:
    row = db.execute("SELECT max(step_id) FROM steps WHERE job_id = ?", (job_id,)).fetchone()
    return 0 if row[0] is None or int(row[0]) < 0 else int(row[0]) + 1
