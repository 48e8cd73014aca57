"""Test-side readings of the daemon's parts: what a test needs to see or drive that the
product itself never asks for (kept here, not in gbatch/, so no product code exists only
for tests). Shared by both tiers: import it as `oracles`."""

from __future__ import annotations

from gbatch.core.model import ACTIVE_STATES, Job
from gbatch.head.groupcommit import GroupCommitter
from gbatch.head.outbox import BATCH, Outbox
from gbatch.head.store import Store


def deliver_due(outbox: Outbox, now: float) -> int:
    """Try every notification due at `now` once, one at a time in this thread (what the
    outbox's workers do, without them); the number delivered."""
    delivered = 0
    for note in outbox.store.due_notifications(now, BATCH):
        if outbox.stopping.is_set():
            break
        delivered += outbox.deliver_one(note)
    return delivered


def waiting(committer: GroupCommitter) -> int:
    """How many submitters wait for the group committer's next commit."""
    with committer._lock:
        return len(committer._queue)


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
