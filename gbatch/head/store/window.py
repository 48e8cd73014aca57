"""The loop's planning window: each user's first few runnable jobs, in that user's queue order.

The window (RunnableWindow) is read whole once, then kept up to date from the rows
changed since (the change feed, migration 11); the pending reasons the loop writes back
go through here too."""

from __future__ import annotations

import bisect
import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gbatch.core.model import Job, JobSpec
from gbatch.head.store.db import Database
from gbatch.head.store.rows import (
    _JOB_COLUMNS,
    _build_job,
    _job_from_row,
    _marks,
    _top_change,
)

# The users with runnable jobs, one index seek each (a loose scan of jobs_queue) rather
# than a pass over every runnable job.
_QUEUED_USERS = """
    WITH RECURSIVE queued(user) AS (
        SELECT min(user) FROM jobs INDEXED BY jobs_queue WHERE state = 'PENDING' AND held = 0
        UNION ALL
        SELECT (
            SELECT min(user) FROM jobs INDEXED BY jobs_queue
            WHERE state = 'PENDING' AND held = 0 AND user > queued.user
        ) FROM queued WHERE queued.user IS NOT NULL
    )
    SELECT user FROM queued WHERE user IS NOT NULL
"""
# A user's runnable jobs in queue order (jobs_queue), the first `?`; and those after a
# key (queue_priority, submit_time, id) in that order. queue_priority comes first.
_USER_QUEUE_TEMPLATE = """
    SELECT queue_priority, {columns} FROM jobs INDEXED BY jobs_queue
    WHERE state = 'PENDING' AND held = 0 AND user = ?
    ORDER BY queue_priority DESC, submit_time, id LIMIT ?
"""
# A user's queue past a key (-queue_priority, submit_time, id), in three parts, each one
# seek of the index (a query with their OR scanned the user's rows from the first, the
# slower the further in): the rest of the key's priority and submit time,
# of its priority, then the lower priorities.
_USER_QUEUE_AFTER_TEMPLATES = tuple(
    f"""
    SELECT queue_priority, {{columns}} FROM jobs INDEXED BY jobs_queue
    WHERE state = 'PENDING' AND held = 0 AND user = ? AND {past}
    ORDER BY queue_priority DESC, submit_time, id LIMIT ?
"""
    for past in (
        "queue_priority = ? AND submit_time = ? AND id > ?",
        "queue_priority = ? AND submit_time > ?",
        "queue_priority < ?",
    )
)
_USER_QUEUE = _USER_QUEUE_TEMPLATE.format(columns=_JOB_COLUMNS)

# What the loop's window keeps of a job's spec (RunnableWindow): the stored spec's keys
# that the planner and the loop's filters read. The rest (command, env, mounts, output
# and the like) is the launch's, read with the whole job when it starts; and the name,
# dependency and array task only of the jobs that a dependency or a throttle filters
# (singletons match names, dependencies name tasks, throttles count an array's tasks).
_PLANNING_KEYS = (
    "image",
    "gpus",
    "time_limit",
    "priority",
    "nice",
    "partition",
    "cpus",
    "mem",
    "mem_per_gpu",
    "mem_per_cpu",
    "begin",
    "gpu_type",
    "constraint",
    "gpu_mem",
    "nodes",
    "nodelist",
    "exclude",
    "exclusive",
    "reservation",
    "qos",
    "qos_priority",
    "alternate",  # -p gpu,uni: the router's (gbatch/head/loop/route.py)
)
_FILTERED_KEYS = ("name", "dependency", "array_task", "array_pos", "array_throttle")
_PLANNING_AND_FILTERED_KEYS = (*_PLANNING_KEYS, *_FILTERED_KEYS)
# Jobs that ask the same are given one planning spec: a queue holds a few hundred kinds
# of job at most, so the window's 50,000 specs are as many shared objects.
_PLANNING_SPECS: dict[tuple[object, ...], JobSpec] = {}
_PLANNING_SPECS_MAX = 10_000


def planning_spec(data: Mapping[str, object]) -> JobSpec:
    """The spec the loop's window keeps of a job whose stored spec is `data`.

    `data` is as JobSpec.to_dict writes it. The spec keeps only what plan() and the
    loop's filters read, and is shared with every job that asks the same.
    """
    get = data.get
    filtered = get("dependency") is not None or get("array_throttle") is not None
    keys = _PLANNING_AND_FILTERED_KEYS if filtered else _PLANNING_KEYS
    # -w/-x's node lists are lists: as tuples, the key is hashable.
    key = tuple(tuple(v) if isinstance(v, list) else v for v in map(get, keys))
    spec = _PLANNING_SPECS.get(key)
    if spec is None:
        if len(_PLANNING_SPECS) >= _PLANNING_SPECS_MAX:
            _PLANNING_SPECS.clear()
        kept = {name: data[name] for name in keys if data.get(name) is not None}
        spec = _PLANNING_SPECS[key] = JobSpec.from_dict({"name": "", "command": [], **kept})
    return spec


def planning_job(job: Job) -> Job:
    """`job` as the loop's window holds it (its spec a planning_spec)."""
    return replace(job, spec=planning_spec(job.spec.to_dict()))


# The window's rows carry, in the spec's place, the values of those keys that SQLite
# takes out of the stored spec (json_extract, in C): a short JSON array, the same text
# for the jobs that ask the same (a filtered job's holds its name and array task too),
# so a row costs a dict lookup, not a decode of its whole spec.
_PLANNING_SQL = (
    "CASE WHEN json_extract(spec, '$.dependency') IS NULL"
    " AND json_extract(spec, '$.array_throttle') IS NULL THEN json_extract(spec, {plain})"
    " ELSE json_extract(spec, {filtered}) END"
).format(
    plain=", ".join(f"'$.{key}'" for key in _PLANNING_KEYS),
    filtered=", ".join(f"'$.{key}'" for key in _PLANNING_AND_FILTERED_KEYS),
)
_WINDOW_COLUMNS = _JOB_COLUMNS.replace("spec,", f"{_PLANNING_SQL} AS spec,", 1)
_WINDOW_QUEUE = _USER_QUEUE_TEMPLATE.format(columns=_WINDOW_COLUMNS)
_WINDOW_QUEUE_AFTER = tuple(
    template.format(columns=_WINDOW_COLUMNS) for template in _USER_QUEUE_AFTER_TEMPLATES
)
# The changed rows past a (change number, id) up to a change number, but those of the
# loop's own reason writes ({own}: their numbers), in that order (the index's), the
# first so many (-1: all).
_WINDOW_CHANGES = (
    f"SELECT queue_priority, {_WINDOW_COLUMNS} FROM jobs INDEXED BY jobs_changed"
    " WHERE (changed, id) > (?, ?) AND changed <= ? AND changed NOT IN ({own})"
    " ORDER BY changed, id LIMIT ?"
)
_PLANNING_BY_TEXT: dict[str, JobSpec] = {}


def _decode_planning_spec(text: str) -> JobSpec:
    """The planning spec of a window row's planning values (_PLANNING_SQL)."""
    spec = _PLANNING_BY_TEXT.get(text)
    if spec is None:
        values = json.loads(text)
        keys = _PLANNING_KEYS if len(values) == len(_PLANNING_KEYS) else _PLANNING_AND_FILTERED_KEYS
        if len(_PLANNING_BY_TEXT) >= _PLANNING_SPECS_MAX:
            _PLANNING_BY_TEXT.clear()
        spec = _PLANNING_BY_TEXT[text] = planning_spec(dict(zip(keys, values, strict=True)))
    return spec


# A job's place in its user's queue: (-queue_priority, submit_time, id), ascending.
_QueueKey = tuple[int, float, int]


class RunnableWindow:
    """The loop's planning window: each user's first `per_user` runnable jobs, in queue order.

    Runnable: pending, not held; the order is that user's queue order. The window is
    kept up to date by Store.read_window from the rows changed since its last read.

    Per user: the keys of the jobs held, sorted, and, where the user's window was full
    at its last read, its bound: the window then held exactly the user's runnable jobs
    with keys up to the bound, and the store may hold more past it. A user without a
    bound had all of theirs in the window. A changed row leaves the window, and comes
    back in when it is runnable and within the bound; a window over `per_user` drops
    its last; a bounded one under it reads the next ones past its bound.

    Its Jobs are planning views (planning_job): their spec holds only what the planner
    and the loop's filters read, shared among jobs that ask the same, so the window
    costs a Job and its keys per job; a job that starts is read whole from the store.

    The loop's own reason writes (Store.set_pending_reasons with the window) are not
    read back: such a write changes only rows the window holds as they are now (none
    written since its read), so the window keeps the reasons written beside its Jobs
    (`reason`), and its reads skip that transaction's rows (`_own`; or `seen` moves on,
    where nothing else was written since).

    With `rows_per_read`, a first read is spread over several reads: each reads that
    many rows (and one, which tells whether they were a user's last), the next users'
    (listed at the first) in their queue order, a user's window over two reads or more
    where it does not fit what is left of one (the next read goes on past the last row
    read, the user's bound), and the read that fills the last user then takes every
    change since the first (`complete` from then on).
    Until then the window holds only the users filled so far: what it holds is right,
    but not all of it.

    It also bounds a read of the change feed: one that finds more changed rows than a
    read takes (a new user's burst of 1,000 jobs, one transaction's) reads them in
    (change, id) order over several reads, each on past the last row read, up to the
    largest change number there was at the first of them (`behind` until then). Each
    row read is put as any change is (a user short of jobs reads the next ones as they
    are now: the feed reads such a row again if it changed since), so once those reads
    reach that number the window is what a whole read then gives; the changes after it
    are the next reads'.
    """

    def __init__(self, per_user: int, rows_per_read: int | None = None) -> None:
        self.per_user = per_user
        self.rows_per_read = rows_per_read
        # The largest change number read; None: never read (a first read reads all).
        # While a first read is spread (_unfilled), the number when it began.
        self.seen: int | None = None
        # The users a spread first read has yet to fill, the next one last.
        self._unfilled: list[str] = []
        # A read of the change feed part way (see `behind`): (the change number it reads
        # up to, and the change number and id of the last row it read).
        self._feed: tuple[int, int, int] | None = None
        # The change numbers past `seen` of the loop's own reason writes (wrote): their
        # rows are in the window as written, and the feed skips them.
        self._own: list[int] = []
        # id -> its Job, and its key apart: no tuple of the two, an object more per job
        # for the cyclic GC to walk (the Jobs are ~all the loop's tracked objects).
        self._jobs: dict[int, Job] = {}
        self._key_of: dict[int, _QueueKey] = {}
        self._keys: dict[str, list[_QueueKey]] = {}
        self._bounds: dict[str, _QueueKey] = {}
        self._list: list[Job] | None = None  # jobs(), until the window changes
        # Since take_changes: id -> the Job put, or None for one gone; whole: the window
        # was read whole since (a first read), so every job is a change.
        self._changed: dict[int, Job | None] = {}
        self._whole = True
        # id -> the reason the loop wrote to that job's row since the window read it
        # (its Job still has the reason read); gone when the row is read again.
        self._reasons: dict[int, str] = {}

    @property
    def complete(self) -> bool:
        """Read, and not in the middle of a spread first read: it holds every user's."""
        return self.seen is not None and not self._unfilled

    @property
    def behind(self) -> bool:
        """Whether a read of the change feed stopped part way, at `rows_per_read` rows.

        Part way to the change number it reads up to: the window holds some of those
        changes, not all.
        """
        return self._feed is not None

    def clear(self) -> None:
        self._unfilled.clear()
        self._feed = None
        self._own.clear()
        self._jobs.clear()
        self._key_of.clear()
        self._keys.clear()
        self._bounds.clear()
        self._list = None
        self._changed.clear()
        self._whole = True
        self._reasons.clear()

    def reason(self, job: Job) -> str:
        """`job`'s reason as its row has it now, where `job` is the window's; else its own.

        A reason the loop wrote since the read is not in the window's Job.
        """
        written = self._reasons.get(job.id)
        if written is not None and self._jobs.get(job.id) is job:
            return written
        return job.reason

    def wrote(self, reasons: Mapping[int, str], change: int) -> None:
        """Take the reasons that transaction `change` wrote to the rows the window holds.

        The transaction is set_pending_reasons': the UPDATE of each pending row whose
        reason differs and that the window holds as it is, the window read whole and not
        `behind`; nothing else. The rows it holds now have them, and a row it does not
        hold it would not take (held, or past its bound). A row not written (changed
        since the read) the feed reads again before the next plan, which drops the
        reason given here.
        """
        jobs, written = self._jobs, self._reasons
        for job_id, reason in reasons.items():
            held = jobs.get(job_id)
            if held is None:
                continue
            if held.reason == reason:
                written.pop(job_id, None)
            else:
                written[job_id] = reason
        if self.seen == change - 1:
            self.seen = change  # nothing else written since the read
        else:
            self._own.append(change)

    def take_changes(self) -> dict[int, Job | None] | None:
        """The jobs put (id -> the new Job) and gone (id -> None) since the last call.

        None when the window was read whole since: take all of jobs() then.
        """
        changed, self._changed = self._changed, {}
        if self._whole:
            self._whole = False
            return None
        return changed

    def jobs(self) -> list[Job]:
        """The window's jobs, by id."""
        if self._list is None:
            jobs = self._jobs
            self._list = [jobs[job_id] for job_id in sorted(jobs)]
        return self._list

    def lacks(self, user: str) -> int:
        """How many more of the user's rows the window takes (per_user, less those held)."""
        return self.per_user - len(self._keys.get(user, ()))

    def fill(self, user: str, rows: Iterable[Sequence[Any]], asked: int | None = None) -> int:
        """Add the user's next rows, in queue order; returns how many it took.

        Each row is (queue_priority, then _WINDOW_COLUMNS), all past the user's keys
        held, `asked` of them read (by default what the window lacks): fewer than asked
        means none are left, and the window is unbounded; otherwise its bound is the
        last.

        A row the window holds already (a spread read's, read at an earlier key and
        written since: its priority lowered) leaves its old place: the change feed
        reads it again when the read completes."""
        if asked is None:
            asked = self.lacks(user)
        keys = self._keys.setdefault(user, [])
        jobs, key_of = self._jobs, self._key_of
        got = 0
        for row in rows:
            key: _QueueKey = (-row[0], row[8], row[1])
            job = _build_job(row[1:], _decode_planning_spec)
            old = key_of.get(row[1])
            if old is not None:
                del keys[bisect.bisect_left(keys, old)]
            jobs[row[1]] = job
            key_of[row[1]] = key
            self._changed[row[1]] = job
            self._reasons.pop(row[1], None)
            keys.append(key)
            got += 1
        self._list = None
        if got < asked:
            self._bounds.pop(user, None)
        else:
            self._bounds[user] = keys[-1]
        if not keys:
            del self._keys[user]
        return got

    def apply(self, rows: Iterable[Sequence[Any]]) -> list[tuple[str, _QueueKey, int]]:
        """Take changed rows; return (user, bound, how many) for each user left short.

        Each row is (queue_priority, then _WINDOW_COLUMNS). A user returned is one whose
        window must read that many past its bound.
        """
        touched: set[str] = set()
        jobs, key_of, per_user, changed = self._jobs, self._key_of, self.per_user, self._changed
        for row in rows:
            job_id = row[1]
            old = jobs.pop(job_id, None)
            if old is not None:
                changed[job_id] = None
                self._reasons.pop(job_id, None)
                keys = self._keys[old.user]
                del keys[bisect.bisect_left(keys, key_of.pop(job_id))]
                touched.add(old.user)
            if row[5] != "PENDING" or row[7]:
                continue
            user = row[3]
            key = (-row[0], row[8], job_id)
            bound = self._bounds.get(user)
            if bound is not None and key > bound:
                continue  # past the window: the store's order keeps it for later
            job = changed[job_id] = _build_job(row[1:], _decode_planning_spec)
            jobs[job_id] = job
            key_of[job_id] = key
            bisect.insort(self._keys.setdefault(user, []), key)
            touched.add(user)
        if touched:
            self._list = None
        short: list[tuple[str, _QueueKey, int]] = []
        for user in touched:
            keys = self._keys.get(user, [])
            bound = self._bounds.get(user)
            if len(keys) > per_user:
                for key in keys[per_user:]:
                    del jobs[key[2]]
                    del key_of[key[2]]
                    changed[key[2]] = None
                    self._reasons.pop(key[2], None)
                del keys[per_user:]
                self._bounds[user] = keys[-1]
            elif len(keys) < per_user and bound is not None:
                short.append((user, bound, per_user - len(keys)))
            if not keys and bound is None:
                self._keys.pop(user, None)
        return short


class Window(Database):
    """The loop's reads of runnable jobs, and the pending reasons it writes back.

    Read whole (runnable_jobs), or kept up to date in a RunnableWindow from the change
    feed.
    """

    def runnable_jobs(self, per_user: int | None = None) -> list[Job]:
        """Pending jobs that are not held: what the planner considers, by id.

        With `per_user`, only each user's first `per_user` in that user's queue order:
        queue_priority (the spec's priority - nice) descending, then submit time, then
        id, which is the order plan() keeps among one user's jobs. Read through the
        jobs_queue index, so a user with 500,000 waiting jobs costs what `per_user` do.
        The loop keeps such a window up to date with read_window instead.
        """
        if per_user is None:
            return self._select("state = 'PENDING' AND held = 0", ())
        with self._lock:
            users = [row[0] for row in self._db.execute(_QUEUED_USERS)]
            rows = [
                row[1:] for user in users for row in self._db.execute(_USER_QUEUE, (user, per_user))
            ]
        return sorted(map(_job_from_row, rows), key=lambda job: job.id)

    def read_window(self, window: RunnableWindow) -> list[Job]:
        """update_window(window), then its jobs, by id."""
        self.update_window(window)
        return window.jobs()

    def update_window(self, window: RunnableWindow, feed: bool = True) -> None:
        """Bring `window` up to date: each user's first `window.per_user` runnable jobs.

        As runnable_jobs(per_user) reads them. `feed=False`: only a spread first read's
        next rows, not the change feed (the window stays as last read).

        Its first read reads every user's first jobs; each read after reads only the
        rows written since (the change feed, migration 11: `changed` above the last
        number seen), and, for a user whose full window lost jobs, the next ones in
        that user's queue order. A job unchanged since the last read is the same Job,
        a planning view of it (planning_job), with the reason read (see
        RunnableWindow.reason).

        With `window.rows_per_read`, the first read is spread over as many reads as
        that takes: each reads that many rows (and one) of the next users' windows, in their
        queue order (a user's over two reads or more where it does not fit: the next
        goes on past the last row read), and returns the window as filled so far
        (`window.complete` is False). The read that fills the last user then takes the
        rows written since the first began, as any later read does: a row taken by a
        fill and written again after is read again and takes its new place. So every
        row unchanged since the first read is where a whole read puts it (each read of
        a user's takes all the runnable rows between its bound and its last), and every
        row changed is read again from the change feed.
        With `window.rows_per_read`, a read of the change feed takes at most that many
        rows too (less those a spread first read's fill took): a read that finds more
        leaves the window `behind`, and the next reads go on from the last row read
        (RunnableWindow), up to the change number the first of them stopped at.
        RunnableWindow.take_changes tells what a read changed, at no cost in the size
        of the window (its jobs() sorts them all when they changed).
        """
        with self._lock:
            db = self._db
            top = _top_change(db)
            if window.seen is None:
                window.clear()
                users = [user for (user,) in db.execute(_QUEUED_USERS).fetchall()]
                window._unfilled = users[::-1]
                window.seen = top
            unfilled = window._unfilled
            budget = window.rows_per_read
            read = 0
            if unfilled:
                while unfilled and (budget is None or read < budget):
                    user = unfilled[-1]
                    lacks = window.lacks(user)
                    # One row past the budget: a queue of `budget` rows is read in one.
                    asked = lacks if budget is None else min(lacks, budget - read + 1)
                    got = self._fill_window(db, window, user, asked)
                    read += got
                    if got < asked or window.lacks(user) <= 0:
                        unfilled.pop()
                if unfilled:
                    return
            if feed:
                rest = None if budget is None else max(budget - read, 0)
                self._read_changes(db, window, top, rest)

    @staticmethod
    def _fill_window(db: sqlite3.Connection, window: RunnableWindow, user: str, count: int) -> int:
        """Read the next `count` of `user`'s runnable rows into `window`: the first, or
        those past the user's bound where the window has one (a user part read, or a
        full window that lost jobs). Returns how many it read."""
        bound = window._bounds.get(user)
        if bound is None:
            return window.fill(user, db.execute(_WINDOW_QUEUE, (user, count)), count)
        queue_priority, submit_time, job_id = -bound[0], bound[1], bound[2]
        rows: list[Any] = []
        for query, past in zip(
            _WINDOW_QUEUE_AFTER,
            (
                (queue_priority, submit_time, job_id),
                (queue_priority, submit_time),
                (queue_priority,),
            ),
            strict=True,
        ):
            rows += db.execute(query, (user, *past, count - len(rows))).fetchall()
            if len(rows) == count:
                break
        return window.fill(user, rows, count)

    @staticmethod
    def _read_changes(
        db: sqlite3.Connection, window: RunnableWindow, top: int, budget: int | None = None
    ) -> None:
        """Bring `window`, once read, up to change `top` (the largest there is): the rows
        written since its last read, and the next ones of users whose full window lost
        jobs. With `budget`, at most that many changed rows: where there are more, the
        window is left `behind`, and the next reads go on from the last row read up to
        the change number the first of them had as `top`. Under the store's lock."""
        seen = window.seen
        assert seen is not None
        feed = window._feed
        if feed is None:
            if top <= seen:
                return
            feed = (top, seen + 1, 0)  # every row past `seen`: ids start at 1
        end, change, after = feed
        if budget is None:
            end = top
        own = window._own
        rows = db.execute(
            _WINDOW_CHANGES.format(own=_marks(own)),
            (change, after, end, *own, -1 if budget is None else budget + 1),
        ).fetchall()
        behind = budget is not None and len(rows) > budget
        if behind:
            del rows[budget:]
        for user, _bound, wanted in window.apply(rows):
            Window._fill_window(db, window, user, wanted)
        if behind:
            if rows:
                after = rows[-1][1]
                (change,) = db.execute("SELECT changed FROM jobs WHERE id = ?", (after,)).fetchone()
            window._feed = (end, change, after)
        else:
            window._feed = None
            window.seen = end
            if own:
                window._own = [number for number in own if number > end]

    def set_pending_reasons(
        self, reasons: Mapping[int, str], window: RunnableWindow | None = None
    ) -> None:
        """Record why pending jobs wait. Not a state change, so no event row.

        With `window` (the loop's, read whole and not `behind`), the rows written are not
        read back by it: only a row the window holds as it is now is written (its
        `changed` up to the window's `seen`, or one of the loop's own reason writes
        since), and after the commit the window takes the reasons written
        (RunnableWindow.wrote). A row changed since the plan read it (a hold, a priority
        update, another reason) is not written: that reason is stale, and the next pass
        reads the row and plans the job again. The rows' `changed` is set as by every
        write, so the change feed still tells anyone else of them."""
        if not reasons:
            return
        known = window if window is not None and window.complete and not window.behind else None
        sql = (
            "UPDATE jobs SET reason = ?, changed = ?"
            " WHERE id = ? AND state = 'PENDING' AND reason != ?"
        )
        read: tuple[object, ...] = ()  # the window's: rows as it holds them
        if known is not None:
            sql += f" AND (changed <= ? OR changed IN ({_marks(known._own)}))"
            read = (known.seen, *known._own)
        with self._write() as db:
            change = self._change_number(db)
            db.executemany(
                sql, [(reason, change, job_id, reason, *read) for job_id, reason in reasons.items()]
            )
        if known is not None:
            known.wrote(reasons, change)
