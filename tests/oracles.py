"""Test-side readings of the daemon's parts: what a test needs to see or drive that the
product itself never asks for (kept here, not in gbatch/, so no product code exists only
for tests). Shared by both tiers: import it as `oracles`."""

from __future__ import annotations

from gbatch.head.groupcommit import GroupCommitter
from gbatch.head.outbox import BATCH, Outbox


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
