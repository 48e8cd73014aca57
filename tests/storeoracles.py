"""Reads and writes of the store that only tests make (they were Store methods once):
the outbox's rows whole, the active jobs, and a node event owed on its own (pytest
puts tests/ on sys.path)."""

from __future__ import annotations

from gbatch.core.model import ACTIVE_STATES, Job
from gbatch.head.store import Store


def outbox(store: Store, job_id: int | None = None) -> list[dict[str, object]]:
    """Every outbox row (of one job), oldest first, as column -> value."""
    where, params = ("WHERE job_id = ?", (job_id,)) if job_id is not None else ("", ())
    with store._lock:
        cursor = store._db.execute(f"SELECT * FROM outbox {where} ORDER BY id", params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def active_jobs(store: Store) -> list[Job]:
    """Jobs not yet in a final state, by id."""
    return store.jobs_in(ACTIVE_STATES)


def queue_node_event(store: Store, node: str, kind: str, reason: str, now: float) -> int:
    """Owe a node's event (NODE_DOWN) to the admins' webhooks that ask for it, and give
    it to the event log, in a transaction of its own; the outbox rows written. The
    daemon owes them with the episode they begin (Store.record_episodes)."""
    with store._write() as db:
        return store._queue_node_event(db, node, kind, reason, now)
