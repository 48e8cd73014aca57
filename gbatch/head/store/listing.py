"""Listings: jobs by filter (squeue, sacct, scontrol), as Jobs or as the rows a listing prints.

As Jobs (jobs, job_pages) or as the narrow rows a listing prints (listing_rows,
listing_pages); the pages read on a connection of their own, so that a long listing
never holds up the writers. Array tails' records come among the rows, by id."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Generator, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from gbatch.core.constants import MAX_ID_DIGITS
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.selection import JobFilter
from gbatch.head.store.rows import (
    _ACTIVE_SQL,
    _IN_CHUNK,
    _JOB_COLUMNS,
    ListingSpecs,
    _build_job,
    _marks,
    _row_id,
    filter_sql,
)
from gbatch.head.store.tails import Tails
from gbatch.protocol import listings

T = TypeVar("T")
R = TypeVar("R")

# What a listing prints of a job (Store.listing_rows): no gpus, exit codes or attempt;
# the peers' text (a job across nodes'; '' for most), then a NULL for array_more.
_LISTING_COLUMNS = (
    "id, uid, user, spec, state, reason, held, submit_time, start_time, end_time, node, peers, NULL"
)

LISTING_PAGE = 1000
"""Rows job_pages and listing_pages read at once."""


class Listing(Tails):
    """Jobs by filter, whole or as a listing's narrow rows, array tails' records among them.

    At once, or in pages streamed off a read connection of their own.
    """

    def jobs(
        self,
        *,
        ids: Collection[int] | None = None,
        states: Collection[JobState] | None = None,
        users: Collection[str] | None = None,
        finished: bool | None = None,
        since: float | None = None,
        limit: int | None = None,
        id_ranges: Sequence[tuple[int, int]] = (),
        after: int | None = None,
        first: int | None = None,
        narrow: JobFilter | None = None,
    ) -> list[Job]:
        """Jobs matching every given filter, by id.

        `narrow`: scancel's -n/-p/-w (gbatch/core/selection.py), read in SQL too.

        finished=True: final states only. `id_ranges` (FIRST, LAST): jobs with ids in
        them are matched as `ids` are. Array tasks still in a tail come as the tail's one
        record (Job.array_more), or each as itself when `ids` names it. `limit`: only the
        last `limit` rows by id. `after` and `first`, a page: only jobs with ids over
        `after`, and of the rows only the first `first` by id (tails' records all come,
        for the caller to cut: the first `first` of the whole are among them).
        """
        asked_ids = ids
        where, params = _job_where(ids, id_ranges, states, users, finished, since, after)
        if narrow:
            kept, kept_params = filter_sql(narrow)
            where, params = f"{where} AND {kept}", [*params, *kept_params]
        if limit is not None:
            where += f" ORDER BY id DESC LIMIT {int(limit)}"
            found = sorted(self._select_raw(where, params), key=lambda j: j.id)
        elif first is not None:
            found = self._select_raw(f"{where} ORDER BY id LIMIT {int(first)}", params)
        else:
            found = self._select(where, params)
        more = self._tail_records(asked_ids, id_ranges, states, users, finished, since)
        if after is not None:
            more = [job for job in more if job.id > after]
        if narrow:
            more = [job for job in more if narrow.keeps(job)]
        if more:
            found = sorted([*found, *more], key=lambda job: job.id)
        return found

    def job_pages(
        self,
        *,
        states: Collection[JobState] | None = None,
        users: Collection[str] | None = None,
        finished: bool | None = None,
        since: float | None = None,
        after: int | None = None,
        first: int | None = None,
        known: Callable[[int, int], T | None] | None = None,
        specs: ListingSpecs | None = None,
    ) -> Generator[list[tuple[int | None, Job | T]], None, None]:
        """What jobs() lists with these filters, by id, in pages read as they are taken.

        Each is (the row's change number, its Job), an array tail's record with None for
        its number. With `known`, a row for which known(id, change number) gives
        something comes as (change number, that) instead, and its Job is neither read
        whole nor built: a listing of jobs mostly unchanged since the last reads two
        numbers a row. `first`: only the first `first` rows by id (tails' records all
        come, for the caller to cut: the first `first` of the whole are among them).
        `specs`: the listing's spec decoder (a fresh one by default), told its size.

        Pages of LISTING_PAGE rows (and the tails' records among them), read in one
        snapshot on a read connection of its own (_reading): neither the listing's
        Jobs nor the store's lock are held for its whole length, so a listing of
        1,000,000 jobs is streamed into its reply a page at a time while the loop and
        the writers go on. The read ends when the generator is exhausted or closed
        (close it when stopping early)."""
        where, params = _job_where(None, (), states, users, finished, since, after)
        order = _order(first)
        decode = specs or ListingSpecs()
        with self._reading() as db:
            table = "jobs"
            if finished is None and states is None:
                # The history by id (sacct): read along the ids from the first in the
                # window (by index), not by the users' index and sorted whole, which each
                # page of a long listing would do again (issue 35).
                table = "jobs NOT INDEXED"
                floor = history_floor(db, users, since) if after is None else None
                if floor is not None:
                    where, params = f"{where} AND id >= ?", [*params, floor]
            decode.count = _counter(db, where, params, first, table)
            records = self._tail_records(None, (), states, users, finished, since, db)
            tails = [(job.id, None, job) for job in records if after is None or job.id > after]
            pages: Iterator[list[tuple[int, int | None, Any]]]
            if known is None:
                pages = _stamped_pages(db, where, order, params, decode, table)
            else:
                pages = _known_pages(db, where, order, params, known, decode, table)
            for page in _among(pages, tails, _first):
                yield [(changed, item) for _, changed, item in page]

    def listing_rows(
        self,
        *,
        states: Collection[JobState] | None = None,
        users: Collection[str] | None = None,
        after: int | None = None,
        limit: int | None = None,
        history: bool = False,
        since: float | None = None,
    ) -> list[tuple[object, ...]]:
        """The jobs a listing prints, by id, as its narrow rows rather than Jobs.

        What jobs(states=states, users=users, finished=False) lists, as the rows (id,
        uid, user, spec, state, reason, held, submit_time, start_time, end_time, node,
        peers, array_more), `spec` as its stored text (listing_spec decodes it; an array tail's
        record carries its JobSpec). With `history`, what jobs(states=states,
        users=users, since=since) lists: every state (squeue -t all, sacct). A page: with
        `after`, only ids greater; with `limit`, the first that many.

        No Job is built and the Job cache is not touched: at 100,000 pending jobs the
        cache (50,000) overflows and each listing rebuilt them all; a Job per row is also
        most of a large listing's memory (issue 16). A page is read as one from SQLite,
        not cut from the whole listing.
        """
        where, params = _listing_where(states, users, after, history, since)
        with self._lock:
            rows: list[tuple[object, ...]] = self._db.execute(
                f"SELECT {_LISTING_COLUMNS} FROM jobs WHERE {where} ORDER BY id"
                + ("" if limit is None else " LIMIT ?"),
                params if limit is None else [*params, limit],
            ).fetchall()
        records = self._listing_tails(states, users, after, history, since)
        if records:
            rows.extend(records)
            rows.sort(key=_row_id)  # nearly sorted already: a merge, cheap
            # The first `limit` of both: any row among them is among SQLite's first.
            del rows[len(rows) if limit is None else limit :]
        return rows

    def listing_pages(
        self,
        *,
        states: Collection[JobState] | None = None,
        users: Collection[str] | None = None,
        after: int | None = None,
        history: bool = False,
        since: float | None = None,
        first: int | None = None,
        specs: ListingSpecs | None = None,
    ) -> Generator[list[tuple[object, ...]], None, None]:
        """listing_rows' rows, in pages read as they are taken; close it when stopping early.

        As job_pages reads: in one snapshot on a read connection of its own, pages of
        LISTING_PAGE rows and the tails' records among them. `first`: as job_pages'.
        `specs`: the listing's spec decoder, told the listing's size.
        """
        where, params = _listing_where(states, users, after, history, since)
        with self._reading() as db:
            if specs is not None:
                specs.count = _counter(db, where, params, first, "jobs")
            tails = self._listing_tails(states, users, after, history, since, db)
            cursor = db.execute(
                f"SELECT {_LISTING_COLUMNS} FROM jobs WHERE {where} {_order(first)}", params
            )
            yield from _among(iter(lambda: cursor.fetchmany(LISTING_PAGE), []), tails, _row_id)

    def _listing_tails(
        self,
        states: Collection[JobState] | None,
        users: Collection[str] | None,
        after: int | None,
        history: bool,
        since: float | None,
        db: sqlite3.Connection | None = None,
    ) -> list[tuple[object, ...]]:
        """The rows listing_rows adds for array tails (their records), by id."""
        tails = self._tail_jobs(states, users, after, history, since, db=db)
        return [listings.listing_row(job, job.spec) for job in tails]

    def _tail_jobs(
        self,
        states: Collection[JobState] | None,
        users: Collection[str] | None,
        after: int | None,
        history: bool,
        since: float | None,
        *,
        uid: int | None = None,
        db: sqlite3.Connection | None = None,
    ) -> list[Job]:
        """The array tails' records a listing lists (listing_rows', listing_page's), by
        id: every state's with `history` (since `since`), else the pending ones."""
        if history:
            wanted = list(JobState) if states is None else list(states)
            tails = self.tails(states=wanted, users=users, uid=uid, since=since, db=db)
        elif states is not None and JobState.PENDING not in states:
            return []
        else:
            tails = self.tails(states=[JobState.PENDING], users=users, uid=uid, db=db)
        return [job for job in (tail.record() for tail in tails) if after is None or job.id > after]

    def _tail_records(
        self,
        ids: Collection[int] | None,
        id_ranges: Sequence[tuple[int, int]],
        states: Collection[JobState] | None,
        users: Collection[str] | None,
        finished: bool | None,
        since: float | None,
        db: sqlite3.Connection | None = None,
    ) -> list[Job]:
        """What jobs() adds for array tails: a task named by its id alone, and each tail
        a range or no id filter at all takes in, as one record (Job.array_more). `db`:
        as tails' (with no ids only)."""
        if finished is True:
            wanted = [state for state in JobState if state.is_final]
        elif finished is False:
            wanted = [JobState.PENDING]
        else:
            wanted = list(JobState)
        if states is not None:
            wanted = [state for state in wanted if state in states]
        if not wanted:
            return []
        found: list[Job] = []
        if ids:
            found.extend(
                job
                for job in self._tail_tasks(ids).values()
                if job.state in wanted
                and (users is None or job.user in users)
                and (since is None or job.submit_time >= since)
            )
        if ids is None or id_ranges:
            found.extend(
                tail.record()
                for tail in self.tails(
                    states=wanted,
                    users=users,
                    since=since,
                    overlapping=list(id_ranges) if ids is not None or id_ranges else None,
                    db=db,
                )
            )
        return found


def _listing_where(
    states: Collection[JobState] | None,
    users: Collection[str] | None,
    after: int | None,
    history: bool,
    since: float | None,
) -> tuple[str, list[object]]:
    """Store.listing_rows' filters as a WHERE clause and its parameters."""
    clauses: list[str] = []
    params: list[object] = []
    if after is not None:
        clauses.append("id > ?")
        params.append(after)
    if states is None:
        if not history:
            clauses.append(f"state IN ({_ACTIVE_SQL})")
    else:
        clauses.append(f"state IN ({_marks(states)})")
        params.extend(state.value for state in states)
    if users is not None:
        clauses.append(f"user IN ({_marks(users)})")
        params.extend(users)
    if history and since is not None:
        clauses.append("submit_time >= ?")
        params.append(since)
    return " AND ".join(clauses) or "1", params


def _job_where(
    ids: Collection[int] | None,
    id_ranges: Sequence[tuple[int, int]],
    states: Collection[JobState] | None,
    users: Collection[str] | None,
    finished: bool | None,
    since: float | None,
    after: int | None,
) -> tuple[str, list[object]]:
    """Store.jobs' filters as a WHERE clause and its parameters."""
    clauses: list[str] = []
    params: list[object] = []
    if id_ranges:
        named = ["id BETWEEN ? AND ?"] * len(id_ranges)
        params.extend(bound for pair in id_ranges for bound in pair)
        if ids:
            named.append(f"id IN ({_marks(ids)})")
            params.extend(ids)
        clauses.append(f"({' OR '.join(named)})")
        ids = None
    if finished is False and states is None:
        clauses.append(f"state IN ({_ACTIVE_SQL})")
    elif finished is True:
        clauses.append(f"state NOT IN ({_ACTIVE_SQL})")
    for column, values in (("id", ids), ("state", states), ("user", users)):
        if values is not None:
            items = [v.value if isinstance(v, JobState) else v for v in values]
            clauses.append(f"{column} IN ({', '.join('?' * len(items))})")
            params.extend(items)
    if since is not None:
        clauses.append("submit_time >= ?")
        params.append(since)
    if after is not None:
        clauses.append("id > ?")
        params.append(after)
    return " AND ".join(clauses) or "1", params


def _stamped_pages(
    db: sqlite3.Connection,
    where: str,
    order: str,
    params: list[object],
    decode: Callable[[str], JobSpec],
    table: str = "jobs",
) -> Iterator[list[tuple[int, int | None, Job]]]:
    """(id, change number, Job) of the jobs rows `where` matches, by id, a page at a
    time; `table` is the FROM clause (the jobs table, or it NOT INDEXED)."""
    cursor = db.execute(
        f"SELECT changed, {_JOB_COLUMNS} FROM {table} WHERE {where} {order}", params
    )
    while page := cursor.fetchmany(LISTING_PAGE):
        yield [(row[1], row[0], _build_job(row[1:], decode)) for row in page]


def _known_pages(
    db: sqlite3.Connection,
    where: str,
    order: str,
    params: list[object],
    known: Callable[[int, int], T | None],
    decode: Callable[[str], JobSpec],
    table: str = "jobs",
) -> Iterator[list[tuple[int, int | None, Job | T]]]:
    """_stamped_pages, with what `known` gives for a row in place of its Job (see
    Store.job_pages): ids and change numbers first, then the other rows of each page
    whole, by id (a few) or as the page's id range (many), in the same snapshot."""
    cursor = db.execute(f"SELECT id, changed FROM {table} WHERE {where} {order}", params)
    while page := cursor.fetchmany(LISTING_PAGE):
        found: list[tuple[int, int | None, Job | T]] = []
        missing: dict[int, int] = {}  # id -> its place in found
        for job_id, changed in page:
            have = known(job_id, changed)
            if have is None:
                missing[job_id] = len(found)
                found.append((job_id, changed, None))  # type: ignore[arg-type] # filled below
            else:
                found.append((job_id, changed, have))
        rows: Iterable[tuple[Any, ...]] = ()
        if len(missing) > _IN_CHUNK:
            first, last = next(iter(missing)), next(reversed(missing))
            rows = db.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id BETWEEN ? AND ? AND {where}",
                [first, last, *params],
            )
        elif missing:
            rows = db.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id IN ({_marks(missing)})", list(missing)
            )
        for row in rows:
            at = missing.get(row[0])
            if at is not None:
                found[at] = (row[0], found[at][1], _build_job(row, decode))
        yield found


def _counter(
    db: sqlite3.Connection, where: str, params: list[object], first: int | None, table: str
) -> Callable[[], int]:
    """The rows `where` matches (at most `first`), counted in db's snapshot when asked."""

    def count() -> int:
        (found,) = db.execute(f"SELECT count(*) FROM {table} WHERE {where}", params).fetchone()
        return int(found) if first is None else min(int(found), first)

    return count


def history_floor(
    db: sqlite3.Connection, users: Collection[str] | None, since: float | None
) -> int | None:
    """The least job id of `users` (any when None) submitted at or after `since`.

    Read by index (jobs_user_submit, jobs_submit); past every id when no job is in the
    window; None when neither is given (no floor).

    Ids grow with submit times but need not follow them (a clock set back): this is a
    floor for a read by id, never a bound that could leave a job of the window out."""
    params: list[object]
    if users is not None:
        where, params = f"user IN ({_marks(users)})", list(users)
        if since is not None:
            where, params = f"{where} AND submit_time >= ?", [*params, since]
        sql = f"SELECT min(id) FROM jobs INDEXED BY jobs_user_submit WHERE {where}"
    elif since is not None:
        sql, params = (
            "SELECT min(id) FROM jobs INDEXED BY jobs_submit WHERE submit_time >= ?",
            [since],
        )
    else:
        return None
    (floor,) = db.execute(sql, params).fetchone()
    return _PAST_EVERY_ID if floor is None else int(floor)


_PAST_EVERY_ID = 10**MAX_ID_DIGITS


def _first(item: tuple[int, object, object]) -> int:
    return item[0]


def _order(first: int | None) -> str:
    """A paged read's order: by id, the first `first` rows only when given."""
    return "ORDER BY id" if first is None else f"ORDER BY id LIMIT {int(first)}"


def _among(
    pages: Iterable[list[R]], records: Sequence[R], id_of: Callable[[R], int]
) -> Iterator[list[R]]:
    """`pages` (rows by id, none empty), with `records` (tails' records, by id) put
    among them where their ids fall, a record after the row of its id; those past the
    last page come as a page of their own, last."""
    left = list(reversed(records))  # popped from the end, by id
    for page in pages:
        if left and id_of(left[-1]) <= id_of(page[-1]):
            last = id_of(page[-1])
            while left and id_of(left[-1]) <= last:
                page.append(left.pop())
            page.sort(key=id_of)  # stable: a row before a record of its id
        yield page
    if left:
        yield left[::-1]
