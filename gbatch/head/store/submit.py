"""Submit: queue callers' jobs, many submissions in one transaction (group commit).

An array's tasks past its first few are kept as one tail; secret values are sealed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gbatch.core import arrays
from gbatch.core.limits import PendingLimitReached
from gbatch.core.model import BEGIN_TIME_REASON, HELD_REASON, JobSpec, JobState
from gbatch.head.secretbox import SecretKeyError
from gbatch.head.store.db import StoreError
from gbatch.head.store.events import Events


@dataclass(frozen=True)
class Submission:
    """One caller's submit: its specs (several for an array) and who asked."""

    specs: tuple[JobSpec, ...]
    uid: int
    user: str
    held: bool = False
    # (name, value) for the specs' secret_env names: stored sealed, once per job.
    secret_values: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # The submitting shell's exported variables (spec.export): stored sealed, per job.
    submit_env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # The user's max_pending_jobs (None: no limit), checked inside the transaction that
    # queues the jobs, where concurrent submits cannot race past it.
    max_pending: int | None = None
    # An array's tasks past `specs`: positions len(specs) to tail_count - 1 of the
    # array whose first task is specs[0], kept as one record until they come up.
    tail_count: int = 0
    # The user's max_pending_jobs in the specs' QOS (gbatch/core/qos.py), checked as
    # max_pending is: (QOS name, limit), or None.
    qos_max_pending: tuple[str, int] | None = None

    @property
    def count(self) -> int:
        return max(len(self.specs), self.tail_count)


def _submitted_reason(submission: Submission, now: float) -> str:
    """A new job's pending reason: held, or waiting for its --begin (the loop would
    write BeginTime at its first pass; it is not woken for a job that cannot start), or
    none yet."""
    if submission.held or not submission.specs:
        return HELD_REASON if submission.held else ""
    begin = submission.specs[0].begin  # a submission's specs differ in array fields only
    return BEGIN_TIME_REASON if begin is not None and begin > now else ""


def qos_pending_count(db: sqlite3.Connection, user: str, qos: str) -> int:
    """`user`'s PENDING jobs of QOS `qos` (None in a spec: normal), as pending_count."""
    is_qos = "coalesce(json_extract(spec, '$.qos'), 'normal') = ?"
    row = db.execute(
        "SELECT count(*) FROM jobs INDEXED BY jobs_pending_user"
        f" WHERE user = ? AND state = 'PENDING' AND {is_qos}",
        (user, qos),
    ).fetchone()
    tails = db.execute(
        "SELECT coalesce(sum(remaining), 0) FROM array_tails"
        f" WHERE state = 'PENDING' AND user = ? AND {is_qos}",
        (user, qos),
    ).fetchone()
    return int(row[0]) + int(tails[0])


def pending_count(db: sqlite3.Connection, user: str) -> int:
    """`user`'s PENDING jobs as max_pending_jobs counts them.

    Held ones count too, and an array tail's tasks one each."""
    # The partial index jobs_pending_user: the user's pending jobs only.
    row = db.execute(
        "SELECT count(*) FROM jobs INDEXED BY jobs_pending_user"
        " WHERE user = ? AND state = 'PENDING'",
        (user,),
    ).fetchone()
    tails = db.execute(
        "SELECT coalesce(sum(remaining), 0) FROM array_tails WHERE state = 'PENDING' AND user = ?",
        (user,),
    ).fetchone()
    return int(row[0]) + int(tails[0])


class Submit(Events):
    """Queueing jobs: one transaction for many callers' submissions."""

    def submit(
        self,
        specs: Sequence[JobSpec],
        uid: int,
        user: str,
        now: float,
        *,
        held: bool = False,
        secret_values: Mapping[str, str] | None = None,
    ) -> list[int]:
        """Queue specs in one transaction (an array is one commit); return their ids.

        The ids are durable once this returns. `secret_values` holds the value of each
        name in the specs' secret_env (see submit_many).
        """
        submission = Submission(tuple(specs), uid, user, held, tuple((secret_values or {}).items()))
        (result,) = self.submit_many([submission], now)
        if isinstance(result, PendingLimitReached):
            raise result
        return result

    def submit_many(
        self, submissions: Sequence[Submission], now: float
    ) -> list[list[int] | PendingLimitReached]:
        """Queue several callers' submissions in ONE transaction; return each one's ids.

        One fsync: group commit. The ids come in the submissions' order, and are durable
        once this returns.

        A submission with `max_pending` that would take its user's PENDING jobs (held
        ones too; those queued earlier in this same transaction too) past it queues
        nothing and gets PendingLimitReached in its place; the others are queued.

        A submission's secret values are sealed (encrypted) before they are written, to
        job_secrets only: never to jobs, events or any log. Raises ValueError when they
        do not match each spec's secret_env names exactly (a caller's bug).
        """
        state = JobState.PENDING.value
        sealed = [self._seal_secrets(submission) for submission in submissions]
        sealed_env = [self._seal(dict(s.submit_env)) if s.submit_env else None for s in submissions]
        with self._write() as db:
            change = self._change_number(db)
            results: list[list[int] | PendingLimitReached] = []
            # Pending jobs per user as this transaction goes: counted once per user, or
            # taken from the last commit when nothing was written since.
            pending: dict[str, int] = {}
            qos_pending: dict[tuple[str, str], int] = {}
            this = self._writes
            known = self._pending_known
            for submission, token, env_token in zip(submissions, sealed, sealed_env, strict=True):
                user, adding = submission.user, submission.count
                have = pending.get(user)
                if have is None and (last := known.get(user)) is not None and last[1] == this - 1:
                    have = pending[user] = last[0]
                if submission.max_pending is not None:
                    if have is None:
                        have = pending[user] = self._pending_count(db, user)
                    if have + adding > submission.max_pending:
                        results.append(
                            PendingLimitReached(user, have, adding, submission.max_pending)
                        )
                        continue
                if submission.qos_max_pending is not None:
                    qos, limit = submission.qos_max_pending
                    in_qos = qos_pending.get((user, qos))
                    if in_qos is None:
                        in_qos = qos_pending[user, qos] = qos_pending_count(db, user, qos)
                    if in_qos + adding > limit:
                        results.append(PendingLimitReached(user, in_qos, adding, limit, qos))
                        continue
                    qos_pending[user, qos] += adding
                if user in pending:
                    pending[user] += adding
                reason = _submitted_reason(submission, now)
                ids: list[int] = []
                for spec in submission.specs:
                    cursor = db.execute(
                        "INSERT INTO jobs (uid, user, name, spec, state, reason, held,"
                        " submit_time, queue_priority, changed)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            submission.uid,
                            submission.user,
                            spec.name,
                            json.dumps(spec.to_dict()),
                            state,
                            reason,
                            submission.held,
                            now,
                            spec.effective_priority,
                            change,
                        ),
                    )
                    assert cursor.lastrowid is not None
                    ids.append(cursor.lastrowid)
                if token is not None:
                    db.executemany(
                        "INSERT INTO job_secrets (job_id, sealed) VALUES (?, ?)",
                        [(job_id, token) for job_id in ids],
                    )
                if env_token is not None:
                    db.executemany(
                        "INSERT INTO job_submit_env (job_id, sealed) VALUES (?, ?)",
                        [(job_id, env_token) for job_id in ids],
                    )
                if submission.tail_count > len(ids):
                    self._insert_tail(db, submission, ids[0], token, env_token, now)
                    ids = list(range(ids[0], ids[0] + submission.tail_count))
                results.append(ids)
            self._submitted_events(
                [
                    job_id
                    for ids, submission in zip(results, submissions, strict=True)
                    if isinstance(ids, list)
                    for job_id in ids[: len(submission.specs)]
                ],
                now,
            )
        # Committed. Stale once any other transaction begins (see _pending_known).
        self._pending_known = {user: (count, this) for user, count in pending.items()}
        return results

    @staticmethod
    def _insert_tail(
        db: sqlite3.Connection,
        submission: Submission,
        array_id: int,
        token: bytes | None,
        env_token: bytes | None,
        now: float,
    ) -> None:
        """The array's tasks past its rows, as one record; their ids reserved."""
        last_id = array_id + submission.tail_count - 1
        positions = ((len(submission.specs), submission.tail_count - 1),)
        # AUTOINCREMENT never hands out an id at or below the sequence again.
        db.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'jobs'", (last_id,))
        db.execute(
            "INSERT INTO array_tails (array_id, last_id, uid, user, spec, state, reason, held,"
            " submit_time, positions, remaining, secret, submit_env)"
            " VALUES (?, ?, ?, ?, ?, 'PENDING', ?, ?, ?, ?, ?, ?, ?)",
            (
                array_id,
                last_id,
                submission.uid,
                submission.user,
                json.dumps(submission.specs[0].to_dict()),
                _submitted_reason(submission, now),
                submission.held,
                now,
                json.dumps(positions),
                arrays.count(positions),
                token,
                env_token,
            ),
        )

    @staticmethod
    def _pending_count(db: sqlite3.Connection, user: str) -> int:
        return pending_count(db, user)

    def _seal_secrets(self, submission: Submission) -> bytes | None:
        names = {name for name, _ in submission.secret_values}
        for spec in submission.specs:
            if set(spec.secret_env) != names:
                raise ValueError(
                    f"secret values given for {sorted(names)} but job {spec.name!r} names "
                    f"{sorted(spec.secret_env)}"
                )
        if not names:
            return None
        return self._seal(dict(submission.secret_values))

    def _seal(self, values: dict[str, str]) -> bytes:
        try:
            return self._secrets.seal(values)
        except SecretKeyError as err:
            raise StoreError(str(err)) from err
