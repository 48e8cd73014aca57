"""listing_page: one page of a sorted, filtered, searched listing, cut and counted in SQL.

For the TUI's queue view and the web page: sorted, cut and counted in SQL, and kept for
a refresh that finds nothing changed."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from gbatch.core.jobids import job_label
from gbatch.core.model import ACTIVE_STATES, Job, JobState
from gbatch.head.store.listing import _LISTING_COLUMNS, Listing
from gbatch.head.store.rows import _ACTIVE_SQL, ListingPage, _marks, _top_change
from gbatch.protocol import listings

# What listing_page sorts and searches by, as SQL over its `listing` (jobs' rows and
# array tails' records alike). The NODE(REASON) cell as squeue's %R prints it
# (formatting._nodelist_or_reason): the reason in parentheses for a pending or failed
# job, a held pending job's reason JobHeldUser unless it says JobHeld already.
_WHERE_SQL = (
    "CASE WHEN state IN ('PENDING', 'FAILED', 'TIMEOUT', 'OUT_OF_MEMORY', 'PREEMPTED') THEN '(' || "
    "CASE WHEN held AND state = 'PENDING' AND substr(reason, 1, 7) != 'JobHeld' "
    "THEN 'JobHeldUser' WHEN reason = '' THEN 'None' ELSE reason END || ')' "
    "ELSE COALESCE(node, '') END"
)
# The JOBID cell (jobids.job_label) of a job row: `N_K` for an array's task.
# The spec's JSON is parsed only for an array's task (a search reads every row's label).
_LABEL_SQL = (
    "CASE WHEN instr(spec, '\"array_task\"') = 0 THEN CAST(id AS TEXT) "
    "WHEN json_extract(spec, '$.array_task') IS NULL THEN CAST(id AS TEXT) "
    "ELSE (id - COALESCE(json_extract(spec, '$.array_pos'), 0)) || '_' || "
    "json_extract(spec, '$.array_task') END"
)
_STATE_RANK_SQL = (
    "CASE state "
    + " ".join(f"WHEN '{state.value}' THEN {rank}" for rank, state in enumerate(JobState))
    + " END"
)
# Elapsed seconds (TIME): none while pending or never started; `?` is the clock.
_ELAPSED_SQL = (
    "CASE WHEN state = 'PENDING' OR start_time IS NULL THEN 0 "
    "ELSE COALESCE(end_time, ?) - start_time END"
)
# listing_page's orders, by the TUI's queue column keys (rows.QUEUE_COLUMNS): the
# terms of ORDER BY, ties by job id. NAME is the job's whole name (the view cuts it).
LISTING_SORTS: Mapping[str, tuple[str, ...]] = {
    "id": ("id",),
    "user": ("user", "id"),
    "name": ("name", "id"),
    "state": (_STATE_RANK_SQL, "id"),
    "gpus": ("{gpus_n}", "id"),
    "time": (_ELAPSED_SQL, "id"),
    "where": (_WHERE_SQL, "id"),
}


@dataclass(frozen=True)
class ListingQuery:
    """What listing_page lists: listing_rows' filters, narrowed, searched and sorted.

    listing_rows' filters (states, users, history, since, after), then `uid` (one user's
    jobs: private_data), `shown_states` and `search` (text found, in any case, in the
    JOBID, USER, NAME or NODE(REASON) cell), in `sort` order (a LISTING_SORTS key;
    `reverse` reverses it), `now` the clock for the TIME sort.
    """

    states: Collection[JobState] | None = None
    users: Collection[str] | None = None
    history: bool = False
    since: float | None = None
    after: int | None = None
    uid: int | None = None
    shown_states: Collection[JobState] | None = None
    search: str = ""
    sort: str = "id"
    reverse: bool = False
    now: float = 0.0


# listing_page's pages kept for a refresh that finds nothing changed: a few views
# (users, sorts) at once, each a view's page (a whole listing's rows are not kept).
_KEPT_PAGES = 8
_KEPT_ROWS = 1000


# listing_page's compound: the cells its sort keys and search read, per side (a
# job row computes them, a tail's record carries them), and the tails' VALUES columns.
_JOB_CELLS = {"label": _LABEL_SQL, "gpus_n": "json_extract(spec, '$.gpus')"}
_TAIL_CELLS = {"label": "label", "gpus_n": "gpus_n"}
# listing_page's search: the text (lowered, as a LIKE pattern: `?`) in the JOBID cell,
# or in the USER, NAME or NODE(REASON) cell. LIKE folds ASCII letters alone, as SQLite's
# lower() does, so this matches what instr(lower(cell), text) did, without a lowered
# copy of every cell of every row.
_SEARCH_LABEL = "({label}) LIKE ? ESCAPE '\\'"
_SEARCH_CELLS = (
    f"user LIKE ? ESCAPE '\\' OR name LIKE ? ESCAPE '\\' OR ({_WHERE_SQL}) LIKE ? ESCAPE '\\'"
)
# A job row's search also finds a job across nodes by a node after its first (the
# NODE(REASON) cell shows them as a host list, gpu[01-02], which LIKE cannot read).
_SEARCH_JOB_CELLS = (
    f"{_SEARCH_CELLS} OR (state NOT IN "
    "('PENDING', 'FAILED', 'TIMEOUT', 'OUT_OF_MEMORY', 'PREEMPTED') "
    "AND peers LIKE ? ESCAPE '\\')"
)
# What a job row's JOBID cell (_LABEL_SQL) is made of: `N` or `N_K`.
_JOB_LABEL_CHARS = frozenset("0123456789_")


def _like_pattern(text: str) -> str:
    """A LIKE pattern matching the cells that contain `text` (its %, _ and \\ escaped)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


_TAIL_PAGE_COLUMNS = (
    "id, tail, user, name, state, reason, held, start_time, end_time, node, gpus_n, label"
)


def _where(clauses: Sequence[str], cells: Mapping[str, str]) -> str:
    return " AND ".join(clause.format(**cells) for clause in clauses) or "1"


def _key_names(keys: Sequence[str]) -> list[str]:
    return [f"k{at}" for at in range(len(keys))]


def _page_side(
    table: str, tail: str, where: Sequence[str], keys: Sequence[str], cells: Mapping[str, str]
) -> str:
    """One side of listing_page's compound: (id, tail, the sort keys) from `table`."""
    columns = ["id", f"{tail} AS tail"]
    columns += [
        f"{key.format(**cells)} AS {name}" for key, name in zip(keys, _key_names(keys), strict=True)
    ]
    return f"SELECT {', '.join(columns)} FROM {table} WHERE {_where(where, cells)}"


def _kept_row(row: tuple[object, ...], records: Sequence[Job]) -> tuple[object, ...]:
    """A row of a page listing_page kept: a job row as it was read; a tail's (its index
    among `records` alone) built afresh from its record."""
    at = row[-1]
    return row if at is None else _tail_row(records[int(at)])  # type: ignore[call-overload]


def _tail_row(job: Job) -> tuple[object, ...]:
    """A tail's record as a listing_rows row (its JobSpec in the spec cell)."""
    return listings.listing_row(job, job.spec)


class Pages(Listing):
    """listing_page: a sorted, filtered, searched page of a listing, and its counts."""

    def listing_page(
        self,
        query: ListingQuery,
        *,
        offset: int = 0,
        limit: int | None = None,
        counts: bool = False,
    ) -> ListingPage:
        """One page of a sorted, filtered, searched listing, with its counts.

        The listing is what listing_rows(states=query.states, users=query.users,
        history=query.history, since=query.since) lists (rows in its form, array tails'
        records among them), narrowed further by `query` (uid, shown states, search
        text), ordered by query.sort. The page is from `offset` on, at most `limit` rows;
        it comes with the number of rows the whole narrowed listing has, and with
        `counts`, its rows per state before the shown states and search narrow it. An
        unknown query.sort raises ValueError.

        The sort, the filter and the cut are SQL's, so a page of 100,000 jobs costs
        what the query plan does, not a Job or a row per job in Python (the TUI's
        queue view asks for the rows it shows, every second). Tails join the rows as
        a VALUES table in a compound query, so they sort and count as one row each, as
        listing_rows lists them; SQLite merges the two sides of the compound, each in
        its order, so a page by id walks the primary key and stops (far faster at
        100,000 than sorting all of them). query.sort: a LISTING_SORTS key, ties by id;
        query.reverse reverses the whole order (ties too), as sorted(reverse=True).
        """
        if query.sort not in LISTING_SORTS:
            raise ValueError(f"unknown listing sort {query.sort!r}")
        base, params = self._page_base(query)
        records = self._tail_jobs(
            query.states, query.users, query.after, query.history, query.since, uid=query.uid
        )
        # What narrows the listing, per side: a job row's JOBID cell is digits and `_`
        # alone, so a search for any other character never reads it (building it is
        # most of a search's cost at 100,000 rows); a tail's record carries its own.
        narrow: list[str] = []
        narrow_params: list[object] = []
        job_narrow: list[str] = []
        job_params: list[object] = []
        if query.shown_states is not None:
            states_in = f"state IN ({_marks(query.shown_states)})"
            values = [state.value for state in query.shown_states]
            narrow.append(states_in)
            narrow_params.extend(values)
            job_narrow.append(states_in)
            job_params.extend(values)
        if query.search:
            pattern = _like_pattern(query.search.lower())
            narrow.append(f"({_SEARCH_LABEL} OR {_SEARCH_CELLS})")
            narrow_params.extend([pattern] * 4)
            if _JOB_LABEL_CHARS.issuperset(query.search):
                job_narrow.append(f"({_SEARCH_LABEL} OR {_SEARCH_JOB_CELLS})")
                job_params.extend([pattern] * 5)
            else:
                job_narrow.append(f"({_SEARCH_JOB_CELLS})")
                job_params.extend([pattern] * 4)
        keys = LISTING_SORTS[query.sort][:-1]  # the terms before the id
        # Each side of the compound: (id, tail, sort keys), its own filter; the keys
        # are the output's columns (a compound orders by its columns alone).
        sides = [
            _page_side("jobs", "NULL", base + job_narrow, keys, _JOB_CELLS),
        ]
        side_params = [*params, *job_params]
        tail_values: list[object] = []
        prefix = ""
        if records:
            prefix = (
                f"WITH tails({_TAIL_PAGE_COLUMNS}) AS (VALUES "
                + ", ".join(["(" + _marks(range(12)) + ")"] * len(records))
                + ") "
            )
            for at, job in enumerate(records):
                tail_values.extend((job.id, at, job.user, job.spec.name, job.state.value))
                tail_values.extend((job.reason, job.held, job.start_time, job.end_time))
                tail_values.extend((job.node, job.spec.gpus, job_label(job)))
            sides.append(_page_side("tails", "tail", narrow, keys, _TAIL_CELLS))
        clock = [query.now] * sum(key == _ELAPSED_SQL for key in keys)
        page_params: list[object] = [*tail_values, *clock, *side_params]
        if records:
            page_params += [*clock, *narrow_params]
        direction = " DESC" if query.reverse else ""
        order = ", ".join(f"{name}{direction}" for name in [*_key_names(keys), "id"])
        page_params.extend((-1 if limit is None else limit, offset))
        compound = " UNION ALL ".join(sides)
        if query.search:
            # A search reads every row whatever the order: the page's query counts
            # them too (a window over the whole), where a second scan counted them.
            compound = f"SELECT *, COUNT(*) OVER () FROM ({compound})"
        page_sql = f"{prefix}{compound} ORDER BY {order} LIMIT ? OFFSET ?"
        with self._lock:
            # The same page asked again (the TUI's refresh, every second) while no job
            # row has changed is the page read last: each write of a row gives it a
            # change number above every other (migration 11), and the tails' records
            # are among the query's parameters (their rows are built afresh below).
            key = (page_sql, tuple(page_params), counts, _top_change(self._db))
            kept = self._pages.get(key)
            if kept is not None:
                return ListingPage(
                    [_kept_row(row, records) for row in kept.rows],
                    kept.total,
                    dict(kept.counts),
                )
            per_state = self._page_counts(query, base, params, records) if counts else {}
            picked = self._db.execute(page_sql, page_params).fetchall()
            if counts and not narrow:
                total = sum(per_state.values())
            elif limit is not None and len(picked) < limit and (picked or not offset):
                total = offset + len(picked)  # the page holds the end of the listing
            elif query.search and picked:
                total = int(picked[0][-1])
            else:
                count_sides = [
                    f"(SELECT COUNT(*) FROM jobs WHERE {_where(base + job_narrow, _JOB_CELLS)})"
                ]
                count_params = [*tail_values, *side_params]
                if records:
                    count_sides.append(
                        f"(SELECT COUNT(*) FROM tails WHERE {_where(narrow, _TAIL_CELLS)})"
                    )
                    count_params += narrow_params
                (total,) = self._db.execute(
                    f"{prefix}SELECT {' + '.join(count_sides)}", count_params
                ).fetchone()
            ids = [row[0] for row in picked if row[1] is None]
            by_id = {
                row[0]: row
                for row in self._db.execute(
                    f"SELECT {_LISTING_COLUMNS} FROM jobs WHERE id IN ({_marks(ids)})", ids
                )
            }
            # Kept with a tail's index in the last cell (a job row's is NULL there).
            kept = ListingPage(
                [by_id[row[0]] if row[1] is None else (row[1],) for row in picked],
                total,
                dict(per_state),
            )
            if len(kept.rows) <= _KEPT_ROWS:  # a view's page, not a whole listing
                if len(self._pages) >= _KEPT_PAGES:
                    self._pages.pop(next(iter(self._pages)))  # the oldest
                self._pages[key] = kept
        page = [by_id[row[0]] if row[1] is None else _tail_row(records[row[1]]) for row in picked]
        return ListingPage(page, total, per_state)

    @staticmethod
    def _page_base(query: ListingQuery) -> tuple[list[str], list[object]]:
        """listing_page's WHERE over the jobs table before shown_states and search."""
        base: list[str] = []
        params: list[object] = []
        if query.after is not None:
            base.append("id > ?")
            params.append(query.after)
        if query.states is None:
            if not query.history:
                base.append(f"state IN ({_ACTIVE_SQL})")
        else:
            base.append(f"state IN ({_marks(query.states)})")
            params.extend(state.value for state in query.states)
        # `+user`: not by the user index. Each of a user's rows looked up for its state
        # costs more than the state index's rows looked up for their user (measured at
        # 100,000 jobs, both for a page and for the counts: bench/bench_tui.py).
        if query.users is not None:
            base.append(f"+user IN ({_marks(query.users)})")
            params.extend(query.users)
        if query.uid is not None:
            base.append("uid = ?")
            params.append(query.uid)
        if query.history and query.since is not None:
            base.append("submit_time >= ?")
            params.append(query.since)
        return base, params

    def _page_counts(
        self, query: ListingQuery, base: list[str], params: list[object], records: list[Job]
    ) -> dict[str, int]:
        """Rows per state of listing_page's listing before shown_states and search. The
        queue's from indexes alone where they serve it (pending jobs, by far the most,
        from jobs_pending_user), else one GROUP BY; the tails' records counted here.
        Called holding the lock."""
        if query.history or query.after is not None or query.uid is not None or query.states:
            rows = self._db.execute(
                f"SELECT state, COUNT(*) FROM jobs WHERE {_where(base, _JOB_CELLS)} GROUP BY state",
                params,
            ).fetchall()
        else:
            users = list(query.users) if query.users is not None else []
            of_users = f" AND +user IN ({_marks(users)})" if query.users is not None else ""
            others = [s.value for s in ACTIVE_STATES if s is not JobState.PENDING]
            rows = self._db.execute(
                f"SELECT state, COUNT(*) FROM jobs WHERE state IN ({_marks(others)})"
                f"{of_users} GROUP BY state",
                [*others, *users],
            ).fetchall()
            of_users = of_users.replace("+user", "user")  # the index's own column
            (pending,) = self._db.execute(
                "SELECT COUNT(*) FROM jobs INDEXED BY jobs_pending_user "
                f"WHERE state = 'PENDING'{of_users}",
                users,
            ).fetchone()
            if pending:
                rows.append((JobState.PENDING.value, pending))
        per_state = {str(state): int(count) for state, count in rows}
        for job in records:
            per_state[job.state.value] = per_state.get(job.state.value, 0) + 1
        return per_state
