"""Rows <-> values: the Job and ArrayTail built from a row, and the caches behind them.

The jobs and array_tails columns read, the Job and ArrayTail built from a row, and the
caches that make a row read again cost a lookup.

A spec changes only by scontrol update (which writes new JSON text), and decoding it
is most of the cost of reading a job; a job row read again unchanged is the Job built
from it last time. Both caches are bounded, and a listing larger than either leaves
them alone (_uncached, ListingSpecs).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection, Iterator, Sequence, Sized
from dataclasses import dataclass, replace
from typing import NamedTuple

from gbatch.core import arrays
from gbatch.core.constants import IMPLICIT_PARTITION
from gbatch.core.model import ACTIVE_STATES, Job, JobSpec, JobState
from gbatch.core.selection import JobFilter
from gbatch.protocol.listings import peers_text

_ACTIVE_SQL = ", ".join(f"'{s.value}'" for s in sorted(ACTIVE_STATES, key=lambda s: s.value))

# Ids bound per `IN (...)` statement: well under SQLite's oldest variable limit (999).
_IN_CHUNK = 500

_JOB_COLUMNS = (
    "id, uid, user, spec, state, reason, held, submit_time, start_time, end_time, node, "
    "gpus, attempt, exit_code, exit_signal, stop_state, gpu_uuids, peers"
)

# A lookup, not Enum(): a row's state text to its JobState.
_STATE_NAMED: dict[object, JobState] = {s.value: s for s in JobState}


def _chunks(ids: Sequence[int]) -> Iterator[Sequence[int]]:
    for start in range(0, len(ids), _IN_CHUNK):
        yield ids[start : start + _IN_CHUNK]


def _marks(values: Collection[object]) -> str:
    return ", ".join("?" * len(values))


def filter_sql(narrow: JobFilter | None, *, tails: bool = False) -> tuple[str, list[object]]:
    """scancel's -n/-p/-w (a JobFilter) as an SQL condition and its parameters.

    On `jobs`, or with `tails` on `array_tails` (whose tasks are pending: on no node);
    "1" when nothing is filtered."""
    if not narrow:
        return "1", []
    clauses: list[str] = []
    params: list[object] = []
    if narrow.names:
        column = "json_extract(spec, '$.name')" if tails else "name"
        clauses.append(f"{column} IN ({_marks(narrow.names)})")
        params.extend(narrow.names)
    if narrow.partitions:
        marks = _marks(narrow.partitions)
        column = f"coalesce(json_extract(spec, '$.partition'), ?) IN ({marks})"
        params.extend([IMPLICIT_PARTITION, *narrow.partitions])
        if tails:  # arrays: never of -p gpu,uni (a cluster takes no array)
            clauses.append(column)
        else:  # a waiting job of -p gpu,uni is in both
            clauses.append(
                f"({column} OR (state = 'PENDING'"
                f" AND json_extract(spec, '$.alternate') IN ({marks})))"
            )
            params.extend(narrow.partitions)
    if narrow.nodes:
        if tails:
            clauses.append("0")
        else:
            # Any of its nodes: the first, or one of a job across nodes' peers (issue 32).
            marks = _marks(narrow.nodes)
            clauses.append(
                f"(node IN ({marks}) OR EXISTS (SELECT 1 FROM json_each(nullif(peers, '')) "
                f"WHERE json_extract(value, '$[0]') IN ({marks})))"
            )
            params.extend([*narrow.nodes, *narrow.nodes])
    return "(" + " AND ".join(clauses) + ")", params


def _row_id(row: Sequence[object]) -> int:
    job_id = row[0]
    assert isinstance(job_id, int)
    return job_id


def _top_change(db: sqlite3.Connection) -> int:
    """The largest change number a jobs row has (0: none yet; migration 11)."""
    (top,) = db.execute("SELECT max(changed) FROM jobs INDEXED BY jobs_changed").fetchone()
    return int(top or 0)


# A spec changes only by scontrol update (which writes new JSON text), and decoding it
# is most of the cost of reading a job: the loop reads every active job several times a
# second. Keyed by the JSON text.
# Bounded with the Job cache below (each entry costs memory, with its key); a
# listing larger than either leaves both alone (_uncached).
_SPEC_CACHE: dict[str, JobSpec] = {}
_SPEC_CACHE_MAX = 50_000


def listing_spec(spec: str | JobSpec) -> JobSpec:
    """The JobSpec of a listing_rows row's spec cell (stored text, or a tail's JobSpec)."""
    return spec if isinstance(spec, JobSpec) else _decode_spec(spec)


def listing_specs(rows: Sized) -> Callable[[str | JobSpec], JobSpec]:
    """The spec decoder for a listing of `rows`: listing_spec, unless the listing is large.

    Past the spec cache's size, a decoder that leaves the cache alone (see _uncached).
    """
    if len(rows) <= _SPEC_CACHE_MAX:
        return listing_spec
    # listing_columns asks once per distinct spec: nothing to remember here.
    return lambda spec: spec if isinstance(spec, JobSpec) else _spec_from_text(spec)


def _spec_from_text(text: str) -> JobSpec:
    return JobSpec.from_dict(json.loads(text))


def _uncached() -> Callable[[str], JobSpec]:
    """A spec decoder for one listing larger than the caches: it would only churn them
    (each is emptied when full) and leave up to 50,000 of its specs and jobs resident
    for good after its reply (issue 16; bench/bench_memory.py). Specs
    read again within the listing are still decoded once; all go with the listing."""
    seen: dict[str, JobSpec] = {}

    def decode(text: str) -> JobSpec:
        spec = seen.get(text)
        if spec is None:
            spec = seen[text] = _spec_from_text(text)
        return spec

    return decode


def _decode_spec(text: str) -> JobSpec:
    spec = _SPEC_CACHE.get(text)
    if spec is None:
        if len(_SPEC_CACHE) >= _SPEC_CACHE_MAX:
            _SPEC_CACHE.clear()
        spec = _SPEC_CACHE[text] = JobSpec.from_dict(json.loads(text))
    return spec


# A job row read again unchanged (the loop and every squeue and TUI refresh read all
# active jobs) is the Job built from it last time: Job is frozen, and building 10,000
# of them is most of the cost of a listing. Keyed by the whole row. 50,000 covers the
# 10,000 active jobs the TUI's figures are measured on, and the loop's window.
_JOB_CACHE: dict[tuple[object, ...], Job] = {}
_JOB_CACHE_MAX = 50_000


def _job_from_row(row: tuple[object, ...]) -> Job:
    job = _JOB_CACHE.get(row)
    if job is None:
        if len(_JOB_CACHE) >= _JOB_CACHE_MAX:
            _JOB_CACHE.clear()
        job = _JOB_CACHE[row] = _build_job(row)
    return job


def _build_job(row: Sequence[object], decode: Callable[[str], JobSpec] | None = None) -> Job:
    (
        job_id,
        uid,
        user,
        spec,
        state,
        reason,
        held,
        submit_time,
        start_time,
        end_time,
        node,
        gpus,
        attempt,
        exit_code,
        exit_signal,
        stop_state,
        gpu_uuids,
        peers,
    ) = row
    assert isinstance(spec, str) and isinstance(gpus, str) and isinstance(state, str)
    assert isinstance(gpu_uuids, str) and isinstance(peers, str)
    return Job(
        id=int(job_id),  # type: ignore[call-overload]
        uid=int(uid),  # type: ignore[call-overload]
        user=str(user),
        spec=(decode or _decode_spec)(spec),
        state=_STATE_NAMED.get(state) or JobState(state),
        reason=str(reason),
        held=bool(held),
        submit_time=float(submit_time),  # type: ignore[arg-type]
        start_time=start_time,  # type: ignore[arg-type]
        end_time=end_time,  # type: ignore[arg-type]
        node=node,  # type: ignore[arg-type]
        gpus=tuple(int(g) for g in gpus.split(",")) if gpus else (),
        gpu_uuids=tuple(gpu_uuids.split(",")) if gpu_uuids else (),
        attempt=int(attempt),  # type: ignore[call-overload]
        exit_code=exit_code,  # type: ignore[arg-type]
        exit_signal=exit_signal,  # type: ignore[arg-type]
        stop_state=(_STATE_NAMED.get(stop_state) or JobState(stop_state)) if stop_state else None,
        peers=decode_peers(peers),
    )


# Job.peers as the jobs table's `peers` column holds them ('' for none): the text a
# listing row carries too (listings.listing_row).
encode_peers = peers_text


def decode_peers(text: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The `peers` column's Job.peers (encode_peers' inverse)."""
    if not text:
        return ()
    return tuple((str(name), tuple(int(g) for g in gpus)) for name, gpus in json.loads(text))


class ListingSpecs:
    """Spec decoding for one listing read in pages, chosen by the listing's size.

    Decided at the first spec it decodes, by the listing's size (`count`, asked then):
    one no larger than the shared spec cache decodes through it, as listing_specs does
    (a queue listed again decodes none); a larger one leaves it alone (it would only
    churn it, and leave up to the cache's size of its specs resident after it:
    bench/bench_memory.py) and remembers at most _LISTING_SPECS of its own at once (a
    sweep's specs differ row by row).
    """

    def __init__(self) -> None:
        self.count: Callable[[], int] = lambda: 0  # set by the listing once reading
        self._size: int | None = None
        self._decode: Callable[[str], JobSpec] | None = None
        self._seen: dict[str, JobSpec] = {}

    def size(self) -> int:
        """The listing's size (counted once, when first asked)."""
        if self._size is None:
            self._size = self.count()
        return self._size

    def __call__(self, spec: str | JobSpec) -> JobSpec:
        if isinstance(spec, JobSpec):
            return spec
        known = _SPEC_CACHE.get(spec)
        if known is not None:
            return known
        if self._decode is None:
            self._decode = _decode_spec if self.size() <= _SPEC_CACHE_MAX else self._bounded
        return self._decode(spec)

    def _bounded(self, text: str) -> JobSpec:
        spec = self._seen.get(text)
        if spec is None:
            if len(self._seen) >= _LISTING_SPECS:
                self._seen.clear()
            spec = self._seen[text] = _spec_from_text(text)
        return spec


_LISTING_SPECS = 10_000


@dataclass(frozen=True)
class ArrayTail:
    """An array's pending tasks that are not rows yet (see migration 8)."""

    array_id: int
    last_id: int
    uid: int
    user: str
    spec: JobSpec  # the array's first task's: each task's is this with its index
    state: JobState
    reason: str
    held: bool
    submit_time: float
    end_time: float | None
    positions: arrays.Spans

    def task_spec(self, pos: int) -> JobSpec:
        return replace(self.spec, array_task=arrays.index_at(self.spec, pos), array_pos=pos)

    def task(self, pos: int, more: arrays.Spans = ()) -> Job:
        """Task `pos` as a Job (with `more`: the record standing for those tasks too)."""
        return Job(
            id=self.array_id + pos,
            uid=self.uid,
            user=self.user,
            spec=self.task_spec(pos),
            state=self.state,
            submit_time=self.submit_time,
            reason=self.reason,
            held=self.held,
            end_time=self.end_time,
            array_more=arrays.index_spans(self.spec, more),
        )

    def record(self) -> Job:
        """The tail as one Job: its first task, standing for the others.

        As squeue and sacct show it: `N_[32-99999]`.
        """
        first, rest = arrays.take(self.positions, 1)
        return self.task(first[0], rest)

    def has(self, job_id: int) -> bool:
        return arrays.contains(self.positions, job_id - self.array_id)


_TAIL_COLUMNS = (
    "array_id, last_id, uid, user, spec, state, reason, held, submit_time, end_time, positions"
)


def _tail_from_row(row: Sequence[object]) -> ArrayTail:
    (array_id, last_id, uid, user, spec, state, reason, held, submit, end, positions) = row
    assert isinstance(spec, str) and isinstance(positions, str) and isinstance(state, str)
    return ArrayTail(
        array_id=int(array_id),  # type: ignore[call-overload]
        last_id=int(last_id),  # type: ignore[call-overload]
        uid=int(uid),  # type: ignore[call-overload]
        user=str(user),
        spec=_decode_spec(spec),
        state=_STATE_NAMED[state],
        reason=str(reason),
        held=bool(held),
        submit_time=float(submit),  # type: ignore[arg-type]
        end_time=end,  # type: ignore[arg-type]
        positions=tuple((int(a), int(b)) for a, b in json.loads(positions)),
    )


def _tail_of(db: sqlite3.Connection, job_id: int) -> ArrayTail | None:
    """The tail holding task `job_id` (a reserved id not yet a row), if any."""
    row = db.execute(
        f"SELECT {_TAIL_COLUMNS} FROM array_tails WHERE array_id <= ? AND last_id >= ?"
        " ORDER BY array_id DESC LIMIT 1",
        (job_id, job_id),
    ).fetchone()
    if row is None:
        return None
    tail = _tail_from_row(row)
    return tail if tail.has(job_id) else None


def _tail_by_id(db: sqlite3.Connection, array_id: int) -> ArrayTail | None:
    row = db.execute(
        f"SELECT {_TAIL_COLUMNS} FROM array_tails WHERE array_id = ?", (array_id,)
    ).fetchone()
    return None if row is None else _tail_from_row(row)


def _jobs_from_rows(rows: Sequence[tuple[object, ...]]) -> list[Job]:
    """The Jobs of `rows` (_JOB_COLUMNS): through the Job cache, unless there are more
    than it holds (_uncached)."""
    if len(rows) > _JOB_CACHE_MAX:
        decode = _uncached()
        return [_build_job(row, decode) for row in rows]
    return [_job_from_row(row) for row in rows]


class ListingPage(NamedTuple):
    """One page of a listing (Store.listing_page), kept as read for a refresh."""

    rows: list[tuple[object, ...]]  # listing_rows' form
    total: int  # rows in the whole listing, every filter applied
    counts: dict[str, int]  # rows per state value, before shown_states and search
