"""An array's tasks by position: which index each position has, and position spans.

A submission's tasks have consecutive ids: task at position p is job `array id + p`,
its index (SLURM_ARRAY_TASK_ID) the p-th of the --array expression's indices. The
store keeps an array's pending tasks past its first few as spans of positions
(Store's array tails); these helpers turn positions into indices and back. Pure.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence

from gbatch.core.jobids import expand_more
from gbatch.core.labels import spans_of
from gbatch.core.model import Job, JobSpec, TaskArray

# An array's tasks that are rows while pending; the rest wait as one record (the
# store's array tail) and become rows as these start: a 100,000-task array costs a
# few rows and one record at submit, not 100,000 rows.
ARRAY_ROWS = 32
# Slurm's pending reason for a task held back by its array's %MAX.
THROTTLE_REASON = "JobArrayTaskLimit"

Spans = tuple[tuple[int, int], ...]  # inclusive (first, last) runs, ascending, disjoint


def index_at(spec: JobSpec, pos: int) -> int:
    """The index of the task at position `pos` of the array `spec` belongs to.

    An array without an expression (`count` copies) has index = position.
    """
    if spec.array is None:
        return pos
    return spec.array.indices[pos]


def pos_of(spec: JobSpec, index: int) -> int | None:
    """The position of index `index` in the array `spec` belongs to, None if none."""
    if spec.array is None:
        return index if index >= 0 else None
    indices = spec.array.indices
    at = bisect.bisect_left(indices, index)
    return at if at < len(indices) and indices[at] == index else None


def position_spans(array: TaskArray | None, index_spans: Iterable[tuple[int, int]]) -> Spans:
    """The positions whose indices lie in `index_spans`, as spans of positions.

    `index_spans` are inclusive, as N_[K-M] names them; `array` holds the array's indices
    (None: `count` copies, index = position). One step per span, whatever its length:
    indices ascend with positions, so a span of indices is a span of positions.
    """
    found: list[tuple[int, int]] = []
    for low, high in index_spans:
        if array is None:
            first, last = max(low, 0), high
        else:
            indices = array.indices
            first = bisect.bisect_left(indices, low)
            last = bisect.bisect_right(indices, high) - 1
        if first <= last:
            found.append((first, last))
    found.sort()
    merged: list[tuple[int, int]] = []
    for first, last in found:
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return tuple(merged)


def index_spans(spec: JobSpec, positions: Spans) -> Spans:
    """The indices of `positions`, as spans of indices.

    A run of positions whose indices are consecutive costs one step, whatever its length.
    """
    out: list[tuple[int, int]] = []
    for first, last in positions:
        low, high = index_at(spec, first), index_at(spec, last)
        if high - low == last - first or spec.array is None:
            runs: Iterable[tuple[int, int]] = ((low, high),)
        else:
            runs = spans_of(spec.array.indices[first : last + 1])
        for a, b in runs:
            if out and a == out[-1][1] + 1:
                out[-1] = (out[-1][0], b)
            else:
                out.append((a, b))
    return tuple(out)


def count(spans: Spans) -> int:
    return sum(last - first + 1 for first, last in spans)


def take(spans: Spans, most: int) -> tuple[list[int], Spans]:
    """The first `most` positions of `spans`, and the spans left."""
    taken: list[int] = []
    rest = list(spans)
    while rest and len(taken) < most:
        first, last = rest[0]
        upto = min(last, first + most - len(taken) - 1)
        taken.extend(range(first, upto + 1))
        if upto == last:
            rest.pop(0)
        else:
            rest[0] = (upto + 1, last)
    return taken, tuple(rest)


def without(spans: Spans, positions: Sequence[int]) -> Spans:
    """`spans` less `positions` (those not in it are ignored)."""
    gone = sorted(set(positions))
    out: list[tuple[int, int]] = []
    for first, last in spans:
        low = bisect.bisect_left(gone, first)
        high = bisect.bisect_right(gone, last)
        start = first
        for pos in gone[low:high]:
            if pos > start:
                out.append((start, pos - 1))
            start = pos + 1
        if start <= last:
            out.append((start, last))
    return tuple(out)


def overlap(spans: Spans, others: Spans) -> Spans:
    """The positions in both `spans` and `others` (each ascending, disjoint), as spans."""
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(spans) and j < len(others):
        low = max(spans[i][0], others[j][0])
        high = min(spans[i][1], others[j][1])
        if low <= high:
            out.append((low, high))
        if spans[i][1] < others[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def contains(spans: Spans, pos: int) -> bool:
    at = bisect.bisect_right(spans, (pos, float("inf"))) - 1
    return at >= 0 and spans[at][0] <= pos <= spans[at][1]


def over_throttle(pending: Sequence[Job], running: Mapping[int, int]) -> set[int]:
    """The ids of the `pending` tasks that their array's %MAX holds back.

    `pending` comes in the order the planner takes them: an array runs at most
    spec.array_throttle tasks at once, `running[array id]` of them already, so the first
    ones that fit in the room left go and the rest are held.
    """
    room: dict[int, int] = {}
    held: set[int] = set()
    for job in pending:
        array, limit = job.array_job_id, job.spec.array_throttle
        if array is None or limit is None:
            continue
        left = room.setdefault(array, limit - running.get(array, 0))
        if left <= 0:
            held.add(job.id)
        else:
            room[array] = left - 1
    return held


def expand_tasks(job: Job) -> list[Job]:
    """One Job per task of a record standing for more pending tasks; any other job as itself.

    The record (Job.array_more) becomes one Job per task, each with its own id, as squeue -r
    lists them.
    """
    if not job.array_more:
        return [job]
    return expand_more(job, lambda index: pos_of(job.spec, index) or 0)
