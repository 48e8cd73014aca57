"""Test-side readings of the daemon's parts: what a test needs to see or drive that the
product itself never asks for (kept here, not in gbatch/, so no product code exists only
for tests). Shared by both tiers: import it as `oracles`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any

from gbatch.core.model import ACTIVE_STATES, Job, JobState
from gbatch.head.groupcommit import GroupCommitter
from gbatch.head.outbox import BATCH, Outbox
from gbatch.head.store import Store
from gbatch.tui.rows import QueueFilter


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


# -- the TUI's queue: what the daemon's view page does (ListJobs' sort, shown_states,
# search, counts), in plain Python, for the fake lab and the listing tests.


def owned(jobs: Iterable[Job], filt: QueueFilter) -> list[Job]:
    """The jobs the mine/all toggle selects (what the state counts are over)."""
    return [job for job in jobs if not filt.mine or job.user == filt.user]


def visible(
    jobs: Iterable[Job], filt: QueueFilter, cells: Mapping[int, Sequence[str]]
) -> list[Job]:
    """The jobs every filter lets through; `cells` are job_cells' (the text matched)."""
    needle = filt.text.strip().lower()
    return [
        job
        for job in owned(jobs, filt)
        if (filt.state is None or job.state is filt.state)
        and (not needle or any(needle in cell.lower() for cell in cells[job.id]))
    ]


def state_counts(jobs: Iterable[Job], *, finished: bool = False) -> dict[JobState, int]:
    """Jobs per state, every active (or, with `finished`, final) state present (0 when
    none), in lifecycle order, then any other state that occurs."""
    # list.count compares at C speed; a dict keyed by the state would call the enum's
    # Python __hash__ twice per job (10,000 jobs, every refresh).
    states = list(map(_state_of, jobs))
    counts = {state: states.count(state) for state in JobState if state.is_final is finished}
    for state in JobState:
        if state.is_final is not finished and (count := states.count(state)):
            counts[state] = count
    return counts


_state_of = attrgetter("state")


def _running_seconds(job: Job, now: float) -> float:
    if job.state is JobState.PENDING or job.start_time is None:
        return 0.0
    return (job.end_time if job.end_time is not None else now) - job.start_time


_STATE_ORDER = {state: i for i, state in enumerate(JobState)}
# Per QUEUE_COLUMNS key: (now, cells by job id) -> the sort key of a job.
_SORT_KEYS: Mapping[str, Callable[[float, Mapping[int, Sequence[str]]], Callable[[Job], Any]]] = {
    "id": lambda now, cells: attrgetter("id"),
    "user": lambda now, cells: attrgetter("user", "id"),
    "name": lambda now, cells: lambda job: (job.spec.name, job.id),
    "state": lambda now, cells: lambda job: (_STATE_ORDER[job.state], job.id),
    "gpus": lambda now, cells: lambda job: (job.spec.gpus, job.id),
    "time": lambda now, cells: lambda job: (_running_seconds(job, now), job.id),
    "where": lambda now, cells: lambda job: (cells[job.id][-1], job.id),
}


def sort_jobs(
    jobs: Iterable[Job],
    column: str,
    now: float,
    cells: Mapping[int, Sequence[str]],
    *,
    reverse: bool = False,
) -> list[Job]:
    """Order by a QUEUE_COLUMNS key: numbers as numbers, ties by job id."""
    return sorted(jobs, key=_SORT_KEYS[column](now, cells), reverse=reverse)
