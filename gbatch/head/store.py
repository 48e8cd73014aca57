"""The only module that speaks SQL: schema, migrations, transactions, queries.

SQLite in WAL mode with synchronous=FULL, so a commit that `sbatch` acknowledged
survives a power cut. Every write is one `BEGIN IMMEDIATE` transaction. The daemon
is the only writer; its threads share one connection behind a lock. A long read (a
listing streamed into its reply) takes a connection of its own (Store.job_pages), so
that writers are not kept waiting while it is read.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import sqlite3
import threading
import uuid
from collections.abc import (
    Callable,
    Collection,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
    Sized,
)
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from gbatch.core import arrays
from gbatch.core.dependency import NEVER_REASON, RefJob
from gbatch.core.gpuusage import GpuUsage
from gbatch.core.jobids import job_label
from gbatch.core.limits import PendingLimitReached
from gbatch.core.model import (
    ACTIVE_STATES,
    Event,
    IllegalTransition,
    Job,
    JobSpec,
    JobState,
    check_transition,
)
from gbatch.head import eventlog, fairshare, notify
from gbatch.head.notify import Policy
from gbatch.head.scheduler import BEGIN_TIME, HELD
from gbatch.head.secretbox import SecretBox, SecretKeyError
from gbatch.protocol import wire
from gbatch.site.config import make_private

_ACTIVE_SQL = ", ".join(f"'{s.value}'" for s in sorted(ACTIVE_STATES, key=lambda s: s.value))

SUBMITTED = "submitted"  # a submit event's reason (Store.events)

# Each entry moves the schema one version forward; never edit a released entry.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE jobs (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        uid         INTEGER NOT NULL,
        user        TEXT    NOT NULL,
        name        TEXT    NOT NULL,
        spec        TEXT    NOT NULL,
        state       TEXT    NOT NULL,
        reason      TEXT    NOT NULL DEFAULT '',
        held        INTEGER NOT NULL DEFAULT 0,
        submit_time REAL    NOT NULL,
        start_time  REAL,
        end_time    REAL,
        node        TEXT,
        gpus        TEXT    NOT NULL DEFAULT '',
        attempt     INTEGER NOT NULL DEFAULT 0,
        exit_code   INTEGER,
        exit_signal INTEGER,
        stop_state  TEXT
    );
    CREATE INDEX jobs_state ON jobs(state);
    CREATE INDEX jobs_runnable ON jobs(id) WHERE state = 'PENDING' AND held = 0;
    CREATE INDEX jobs_user_submit ON jobs(user, submit_time);
    CREATE TABLE events (
        id     INTEGER PRIMARY KEY,
        job_id INTEGER NOT NULL REFERENCES jobs(id),
        time   REAL    NOT NULL,
        state  TEXT    NOT NULL,
        reason TEXT    NOT NULL
    );
    CREATE INDEX events_job ON events(job_id);
    CREATE TABLE usage (
        user        TEXT PRIMARY KEY,
        gpu_seconds REAL NOT NULL,
        as_of       REAL NOT NULL
    );
    """,
    # 2: nodes an admin drained (gbatch node drain/resume); absent means in service.
    """
    CREATE TABLE drained_nodes (
        name   TEXT PRIMARY KEY,
        reason TEXT NOT NULL,
        since  REAL NOT NULL
    );
    """,
    # 3: GPUs are known by UUID too (indices can change across a host's reboot).
    """
    ALTER TABLE jobs ADD COLUMN gpu_uuids TEXT NOT NULL DEFAULT ''
    """,
    # 4: jobs' secret env values, sealed with the key file beside the store (one token per
    # job, gbatch/head/secretbox.py). Only names live in jobs.spec.
    """
    CREATE TABLE job_secrets (
        job_id INTEGER PRIMARY KEY REFERENCES jobs(id),
        sealed BLOB    NOT NULL
    )
    """,
    # 5: each user's pending jobs counted from an index of them alone (max_pending_jobs,
    # checked at every submit), never by a scan of the user's whole history.
    """
    CREATE INDEX jobs_pending_user ON jobs(user) WHERE state = 'PENDING'
    """,
    # 6: each user's runnable jobs in the planner's order, so that a pass reads a user's
    # first few of 500,000 (Store.runnable_jobs) instead of all of them. queue_priority
    # is the spec's priority - nice, copied at submit (a queued spec never changes).
    # jobs_queue covers what jobs_runnable did; one index less to update per job cancelled.
    """
    ALTER TABLE jobs ADD COLUMN queue_priority INTEGER NOT NULL DEFAULT 0;
    UPDATE jobs SET queue_priority =
        coalesce(json_extract(spec, '$.priority'), 0) - coalesce(json_extract(spec, '$.nice'), 0);
    CREATE INDEX jobs_queue ON jobs(user, queue_priority DESC, submit_time, id)
        WHERE state = 'PENDING' AND held = 0;
    DROP INDEX jobs_runnable
    """,
    # 7: the submitting shell's variables a job exports (sbatch --export), sealed like
    # job_secrets and apart from jobs.spec: a spec is shown to other users, these never.
    """
    CREATE TABLE job_submit_env (
        job_id INTEGER PRIMARY KEY REFERENCES jobs(id),
        sealed BLOB    NOT NULL
    )
    """,
    # 8: an array's pending tasks past its first few, as ONE record (its tail): the
    # positions not yet made jobs rows, and the spec they share. Their ids (array_id +
    # position, up to last_id) are reserved at submit; a task becomes a row when it
    # comes up (Store.refill_arrays) or is named alone (Store.materialise). A tail
    # cancelled whole stays, CANCELLED, as the record of those tasks (sacct).
    """
    CREATE TABLE array_tails (
        array_id    INTEGER PRIMARY KEY,
        last_id     INTEGER NOT NULL,
        uid         INTEGER NOT NULL,
        user        TEXT    NOT NULL,
        spec        TEXT    NOT NULL,
        state       TEXT    NOT NULL,
        reason      TEXT    NOT NULL DEFAULT '',
        held        INTEGER NOT NULL DEFAULT 0,
        submit_time REAL    NOT NULL,
        end_time    REAL,
        positions   TEXT    NOT NULL,
        remaining   INTEGER NOT NULL,
        secret      BLOB,
        submit_env  BLOB
    );
    CREATE INDEX array_tails_state ON array_tails(state, user)
    """,
    # 9: how busy each run kept its GPUs (gbatch/core/gpuusage.py): one row per run, folded
    # into at every node report while it runs; seff and sacct's TRESUsageInMax read it.
    """
    CREATE TABLE gpu_usage (
        job_id        INTEGER NOT NULL REFERENCES jobs(id),
        attempt       INTEGER NOT NULL,
        samples       INTEGER NOT NULL,
        util_samples  INTEGER NOT NULL,
        util_sum      REAL    NOT NULL,
        util_max      INTEGER NOT NULL,
        mem_max_mib   INTEGER NOT NULL,
        mem_total_mib INTEGER NOT NULL,
        PRIMARY KEY (job_id, attempt)
    ) WITHOUT ROWID
    """,
    # 10: the notifications outbox (gbatch/head/notify.py): one row per event and
    # destination, written in the transaction of the state change it tells of;
    # delivered (or gave_up) set once the outbox worker is done with it, and a delivered
    # row deleted notify_retention_days later (Store.prune_notifications). A job's
    # event is owed once per run: a second write of it is ignored (outbox_once).
    """
    CREATE TABLE outbox (
        id                INTEGER PRIMARY KEY,
        event_id          TEXT    NOT NULL,
        kind              TEXT    NOT NULL,
        channel           TEXT    NOT NULL,
        target            TEXT    NOT NULL,
        job_id            INTEGER,
        attempt           INTEGER,
        payload           TEXT    NOT NULL,
        created           REAL    NOT NULL,
        attempts          INTEGER NOT NULL DEFAULT 0,
        next_attempt_time REAL    NOT NULL,
        last_error        TEXT    NOT NULL DEFAULT '',
        delivered         REAL,
        gave_up           REAL
    );
    CREATE UNIQUE INDEX outbox_once ON outbox(job_id, attempt, kind, channel, target);
    CREATE INDEX outbox_due ON outbox(next_attempt_time)
        WHERE delivered IS NULL AND gave_up IS NULL
    """,
    # 11: the change feed. Every write of a jobs row sets its `changed` to the
    # transaction's number, one more than the largest before it (Store._change_number),
    # so the loop reads only the rows written since its last pass (Store.read_window).
    # Rows from before start at 0: a window's first read reads everything anyway.
    """
    ALTER TABLE jobs ADD COLUMN changed INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX jobs_changed ON jobs(changed)
    """,
    # 12: the node conditions on now (gbatch/head/notify.py Episodes): a row per node and
    # condition (GPU_FOREIGN, DISK_FULL, NODE_DOWN), written with the outbox rows of the
    # event that told it began and deleted when it ends, so a restarted gbatchd neither
    # tells again an episode still on nor forgets one that ended meanwhile.
    """
    CREATE TABLE node_episodes (
        node  TEXT NOT NULL,
        kind  TEXT NOT NULL,
        since REAL NOT NULL,
        PRIMARY KEY (node, kind)
    ) WITHOUT ROWID
    """,
)
# The key that seals job_secrets, beside the store in the daemon's home.
SECRET_KEY_FILE = "secrets.key"

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
# seek of the index (a query with their OR scanned the user's rows from the first:
# ~90 us at 1,000 rows in, against ~6): the rest of the key's priority and submit time,
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
T = TypeVar("T")
# Ids bound per `IN (...)` statement: well under SQLite's oldest variable limit (999).
_IN_CHUNK = 500

_JOB_COLUMNS = (
    "id, uid, user, spec, state, reason, held, submit_time, start_time, end_time, node, "
    "gpus, attempt, exit_code, exit_signal, stop_state, gpu_uuids"
)
_USER_QUEUE = _USER_QUEUE_TEMPLATE.format(columns=_JOB_COLUMNS)
# What a listing prints of a job (Store.listing_rows): no gpus, exit codes or attempt.
_LISTING_COLUMNS = (
    "id, uid, user, spec, state, reason, held, submit_time, start_time, end_time, node"
)
# What listing_page sorts and searches by, as SQL over its `listing` (jobs' rows and
# array tails' records alike). The NODE(REASON) cell as squeue's %R prints it
# (formatting._nodelist_or_reason): the reason in parentheses for a pending or failed
# job, a held pending job's reason JobHeldUser unless it says JobHeld already.
_WHERE_SQL = (
    "CASE WHEN state IN ('PENDING', 'FAILED', 'TIMEOUT', 'OUT_OF_MEMORY') THEN '(' || "
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
    """What listing_page lists: listing_rows' filters (states, users, history, since,
    after), then `uid` (one user's jobs: private_data), `shown_states` and `search`
    (text found, in any case, in the JOBID, USER, NAME or NODE(REASON) cell), in
    `sort` order (a LISTING_SORTS key), `now` the clock for the TIME sort."""

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


class ListingPage(NamedTuple):
    rows: list[tuple[object, ...]]  # listing_rows' form
    total: int  # rows in the whole listing, every filter applied
    counts: dict[str, int]  # rows per state value, before shown_states and search


# Columns set_state may write besides state and reason.
_UPDATABLE = frozenset(
    {
        "start_time",
        "end_time",
        "node",
        "gpus",
        "gpu_uuids",
        "attempt",
        "exit_code",
        "exit_signal",
        "stop_state",
    }
)


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

    @property
    def count(self) -> int:
        return max(len(self.specs), self.tail_count)


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
        """The tail as one Job: its first task, standing for the others (squeue's
        `N_[32-99999]`, sacct's)."""
        first, rest = arrays.take(self.positions, 1)
        return self.task(first[0], rest)

    def has(self, job_id: int) -> bool:
        return arrays.contains(self.positions, job_id - self.array_id)


@dataclass(frozen=True)
class Usage:
    """GPU-seconds a run used, to fold into its user's fair-share usage."""

    user: str
    gpu_seconds: float
    half_life: float


@dataclass(frozen=True)
class StateChange:
    """One state change, as set_state takes it; set_states takes many."""

    job_id: int
    new: JobState
    reason: str
    expect: Collection[JobState] | None = None
    fields: Mapping[str, object] = field(default_factory=dict)
    # An ended run's GPU-seconds, folded into its user's usage with the change.
    usage: Usage | None = None


class JobBrief(NamedTuple):
    """What a request over many jobs needs of each to decide on it: its owner and state.
    A tuple, built in well under a microsecond: a whole Job per row would cost 500,000
    of them for one user's sweep."""

    id: int
    uid: int
    user: str
    state: JobState


# A job's place in its user's queue: (-queue_priority, submit_time, id), ascending.
_QueueKey = tuple[int, float, int]


class RunnableWindow:
    """The loop's planning window: each user's first `per_user` runnable (pending, not
    held) jobs in that user's queue order, kept up to date by Store.read_window from
    the rows changed since its last read.

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
        """A read of the change feed stopped at `rows_per_read` rows, part way to the
        change number it reads up to: the window holds some of those changes, not all."""
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
        """`job`'s reason as its row has it now, where `job` is the window's (a reason
        the loop wrote since the read is not in the Job); any other Job's own."""
        written = self._reasons.get(job.id)
        if written is not None and self._jobs.get(job.id) is job:
            return written
        return job.reason

    def wrote(self, reasons: Mapping[int, str], change: int) -> None:
        """Take the reasons that transaction `change` wrote (set_pending_reasons: the
        UPDATE of each pending row whose reason differs and that the window holds as it
        is, the window read whole and not `behind`; nothing else): the rows it holds now
        have them, and a row it does not hold it would not take (held, or past its
        bound). A row not written (changed since the read) the feed reads again before
        the next plan, which drops the reason given here."""
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
        """The jobs put (id -> the new Job) and gone (id -> None) since the last call,
        or None when the window was read whole since: take all of jobs() then."""
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
        """Add the user's next rows (queue_priority, then _WINDOW_COLUMNS) in queue order,
        all past the user's keys held, `asked` of them read (by default what the window
        lacks): fewer than asked means none are left, and the window is unbounded;
        otherwise its bound is the last. Returns how many it took.

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
        """Take changed rows (queue_priority, then _WINDOW_COLUMNS); return (user, bound,
        how many) for each user whose window must read that many past its bound."""
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


class StoreError(Exception):
    """The store cannot do what was asked (a missing job, a full disk)."""


class StoreFull(StoreError):
    """A write found the store's disk full (SQLITE_FULL). Nothing of it was written:
    its transaction rolled back, and what was committed before is intact."""

    def __init__(self, directory: Path) -> None:
        super().__init__(f"the job store cannot write: disk full ({directory})")
        self.directory = directory


class JobNotFound(StoreError):
    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} does not exist")
        self.job_id = job_id


def _submitted_reason(submission: Submission, now: float) -> str:
    """A new job's pending reason: held, or waiting for its --begin (the loop would
    write BeginTime at its first pass; it is not woken for a job that cannot start), or
    none yet."""
    if submission.held or not submission.specs:
        return HELD if submission.held else ""
    begin = submission.specs[0].begin  # a submission's specs differ in array fields only
    return BEGIN_TIME if begin is not None and begin > now else ""


class Store:
    def __init__(
        self,
        path: Path,
        notify: Policy | None = None,
        feed: Callable[[Sequence[str]], None] | None = None,
    ) -> None:
        """`notify`: whom job events are owed to (none by default); they are written to
        the outbox with the state change they tell of. `feed`: given the event log's
        lines (gbatch/head/eventlog.py) of each transaction's events once it commits, in
        commit order; it must not raise."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._notify = notify or Policy()
        self._feed = feed
        self._feed_lines: list[str] = []  # the open transaction's, for the feed
        # Called (under the store's lock: it must not block) at the first write a full
        # disk fails since the last that committed: once per spell of full disk.
        self.on_full: Callable[[StoreFull], None] | None = None
        self._full = False
        self._change: int | None = None  # the open transaction's change number, once asked
        # listing_page's latest pages, by their query and the jobs' change number.
        self._pages: dict[tuple[object, ...], ListingPage] = {}
        # Write transactions begun (committed or not). All of them go through _write,
        # on this one object, gbatchd being the store's only writer.
        self._writes = 0
        # user -> (their pending jobs, the write transaction that left them so): what
        # submit_many's last commit knew. Used only while that transaction is the last
        # one written, so the count is exact (max_pending_jobs), not re-counted over the
        # user's pending jobs (~0.5 ms at 10,000) on each of a burst's submits.
        self._pending_known: dict[str, tuple[int, int]] = {}
        # Jobs' env values and commands are in it: the owner's alone, whatever the umask.
        # SQLite gives the -wal and -shm files the mode of the database file; ones left
        # by an older gbatch are closed here too.
        make_private(path)
        for companion in (f"{path}-wal", f"{path}-shm"):
            if os.path.exists(companion):
                make_private(Path(companion))
        self._lock = threading.RLock()
        # isolation_level=None: we issue BEGIN/COMMIT ourselves.
        self._db = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=30
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._migrate()
        self._secrets = SecretBox(path.parent / SECRET_KEY_FILE)
        # Idle read connections for job_pages (each used by one reader at a time).
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()

    def close(self) -> None:
        with self._readers_lock:
            for reader in self._readers:
                reader.close()
            self._readers.clear()
        with self._lock:
            self._db.close()

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """A read connection of its own, in one read transaction for the block: what it
        reads is one snapshot, and, the store being in WAL mode, writers on the main
        connection go on meanwhile (the snapshot holds back only the WAL's checkpoint).
        Not behind the store's lock: a read of 1,000,000 rows must not stop the loop."""
        with self._readers_lock:
            db = self._readers.pop() if self._readers else None
        if db is None:
            db = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=30
            )
            db.execute("PRAGMA query_only=1")
        try:
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("COMMIT")
        except BaseException:
            db.close()
            raise
        with self._readers_lock:
            if len(self._readers) < _IDLE_READERS:
                self._readers.append(db)
                return
        db.close()

    # -- schema ---------------------------------------------------------------------

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        with self._write():
            version = self.schema_version
            if version > len(MIGRATIONS):
                raise StoreError(
                    f"{self.path} has schema version {version}, newer than this gbatch "
                    f"knows ({len(MIGRATIONS)}). Upgrade gbatch"
                )
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                for statement in script.split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {number}")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction: committed when the block ends, rolled back
        when it raises. SQLite's own errors leave as StoreError (StoreFull for a full
        disk), never as sqlite3 exceptions."""
        with self._lock:
            self._feed_lines.clear()
            self._change = None
            self._writes += 1
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                    self._db.execute("COMMIT")
                except BaseException:
                    self._feed_lines.clear()
                    self._rollback()
                    raise
            except sqlite3.OperationalError as err:
                error = self._write_error(err)
                if isinstance(error, StoreFull) and not self._full:
                    self._full = True
                    if self.on_full is not None:
                        self.on_full(error)
                raise error from err
            self._full = False
            # After the commit (a line never tells of a change that rolled back), still
            # under the lock, so the lines are in the order the changes committed in.
            if self._feed is not None and self._feed_lines:
                lines, self._feed_lines = self._feed_lines, []
                self._feed(lines)

    def _change_number(self, db: sqlite3.Connection) -> int:
        """The open transaction's change number (migration 11), for every jobs row it
        writes: above every row's, so a reader that saw up to N asks for rows > N. One
        index seek per transaction that writes jobs; computed in it, so whichever
        connection wrote last, the numbers only grow."""
        if self._change is None:
            self._change = _top_change(db) + 1
        return self._change

    def _rollback(self) -> None:
        # On SQLITE_FULL SQLite may already have rolled the transaction back itself;
        # a second ROLLBACK would then raise and hide the error that matters.
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    def _write_error(self, err: sqlite3.OperationalError) -> StoreError:
        if _is_disk_full(err):
            return StoreFull(self.path.parent)
        return StoreError(f"could not write to {self.path}: {err}")

    # -- writes ---------------------------------------------------------------------

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
        """Queue several callers' submissions in ONE transaction (one fsync: group
        commit); return each one's ids, in order. Durable once this returns.

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
        # The partial index jobs_pending_user: the user's pending jobs only.
        row = db.execute(
            "SELECT count(*) FROM jobs INDEXED BY jobs_pending_user"
            " WHERE user = ? AND state = 'PENDING'",
            (user,),
        ).fetchone()
        tails = db.execute(
            "SELECT coalesce(sum(remaining), 0) FROM array_tails"
            " WHERE state = 'PENDING' AND user = ?",
            (user,),
        ).fetchone()
        return int(row[0]) + int(tails[0])

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

    def set_state(
        self,
        job_id: int,
        new: JobState,
        reason: str,
        now: float,
        *,
        expect: Collection[JobState] | None = None,
        usage: Usage | None = None,
        **fields: object,
    ) -> Job:
        """The one way a job changes state: check the edge, write it and its event.

        `expect`, when given, is the set of states the caller believes the job is in;
        a job found in another state raises IllegalTransition without writing, so a
        racing cancel and dispatch cannot both win. `usage`, when given, folds the
        ended run's GPU-seconds into its user's fair-share usage in the same
        transaction (a crash cannot record the end and lose the usage). `fields`
        updates other columns (start_time, end_time, node, gpus, attempt, exit_code,
        exit_signal, stop_state).

        On the move to CONFIGURING (a dispatch) the Job returned carries the values of
        its secret env (Job.secret_values) for the launch that follows; no other read
        decrypts them. Values that cannot be opened (the key file was replaced) are left
        out, and the launch refuses to start without them.
        """
        with self._write() as db:
            change = StateChange(job_id, new, reason, expect, fields)
            job, token, env_token = self._set_state_read(db, change, now)
            if usage is not None:
                self._accrue(db, usage, now)
        return self._opened(job, token, env_token)

    def set_states_read(
        self, changes: Sequence[StateChange], now: float
    ) -> list[Job | IllegalTransition | JobNotFound]:
        """set_state for each change, in ONE transaction (one fsync: a pass's starts),
        each answered as set_state answers (the Job, secrets opened on the move to
        CONFIGURING) or with why it was refused; a refused change undoes no other."""
        read: list[tuple[Job, Any, Any] | IllegalTransition | JobNotFound] = []
        with self._write() as db:
            for change in changes:
                try:
                    read.append(self._set_state_read(db, change, now))
                except (IllegalTransition, JobNotFound) as err:
                    read.append(err)
        return [each if isinstance(each, Exception) else self._opened(*each) for each in read]

    def _set_state_read(
        self, db: sqlite3.Connection, change: StateChange, now: float
    ) -> tuple[Job, Any, Any]:
        """Write `change`; the job after it and, on the move to CONFIGURING, its sealed
        secret env and submit env (None where it has none)."""
        self._set_state(db, change, now)
        job = self._get(db, change.job_id)
        assert job is not None
        configuring = change.new is JobState.CONFIGURING
        token = (
            db.execute("SELECT sealed FROM job_secrets WHERE job_id = ?", (job.id,)).fetchone()
            if configuring and job.spec.secret_env
            else None
        )
        env_token = (
            db.execute("SELECT sealed FROM job_submit_env WHERE job_id = ?", (job.id,)).fetchone()
            if configuring
            else None
        )
        return job, token, env_token

    def _opened(self, job: Job, token: Any, env_token: Any) -> Job:
        """`job` with the values of its sealed secret env and submit env, where they open."""
        if token is not None:
            with contextlib.suppress(SecretKeyError):
                values = self._secrets.open(bytes(token[0]))
                job = replace(job, secret_values=tuple(values.items()))
        if env_token is not None:
            with contextlib.suppress(SecretKeyError):
                values = self._secrets.open(bytes(env_token[0]))
                job = replace(job, submit_env=tuple(values.items()))
        return job

    def set_states(
        self, changes: Sequence[StateChange], now: float
    ) -> list[IllegalTransition | JobNotFound | None]:
        """Many set_state calls in ONE transaction (one fsync: a sweep such as
        `scancel --me` over thousands of jobs). Per change: None when written, else why
        not; a refused change does not undo the others."""
        outcomes: list[IllegalTransition | JobNotFound | None] = []
        with self._write() as db:
            for change in changes:
                try:
                    self._set_state(db, change, now)
                    if change.usage is not None:
                        self._accrue(db, change.usage, now)
                    outcomes.append(None)
                except (IllegalTransition, JobNotFound) as err:
                    outcomes.append(err)
        return outcomes

    def _set_state(self, db: sqlite3.Connection, change: StateChange, now: float) -> None:
        unknown = set(change.fields) - _UPDATABLE
        if unknown:
            raise ValueError(f"set_state cannot write {sorted(unknown)}")
        row = db.execute("SELECT state FROM jobs WHERE id = ?", (change.job_id,)).fetchone()
        if row is None:
            raise JobNotFound(change.job_id)
        current = JobState(row[0])
        if change.expect is not None and current not in change.expect:
            raise IllegalTransition(current, change.new)
        check_transition(current, change.new)
        columns = {
            "state": change.new.value,
            "reason": change.reason,
            **_encode(change.fields),
            "changed": self._change_number(db),
        }
        assignments = ", ".join(f"{name} = ?" for name in columns)
        db.execute(
            f"UPDATE jobs SET {assignments} WHERE id = ?", (*columns.values(), change.job_id)
        )
        self._insert_events(db, [(change.job_id, now, change.new.value, change.reason)])
        if self._notify.active and notify.may_notify(current, change.new):
            self._queue_job_events(db, change.job_id, now, old=current)

    def _insert_events(
        self, db: sqlite3.Connection, rows: Sequence[tuple[int, float, str, str]]
    ) -> None:
        """The one writer of `events` rows (job id, time, state, reason). With an event
        log, each row's line is kept for it, written once the transaction commits."""
        db.executemany("INSERT INTO events (job_id, time, state, reason) VALUES (?, ?, ?, ?)", rows)
        self._feed_events(rows)

    def _submitted_events(self, ids: Sequence[int], submit_time: float) -> None:
        """The jobs' submit events. They are not stored: each is the job row's own
        submit_time (Store.events tells it first), and a row of `events` and of its
        index was two of the nine pages each submit's commit wrote and fsync'd
        (bench_submit: ~15 us of a ~300 us submit). The event log still gets their
        lines."""
        pending = JobState.PENDING.value
        self._feed_events([(job_id, submit_time, pending, SUBMITTED) for job_id in ids])

    def _feed_events(self, rows: Sequence[tuple[int, float, str, str]]) -> None:
        """With an event log, each event's line, kept for the open transaction."""
        if self._feed is None or not rows:
            return
        jobs: dict[int, Job] = {}
        wanted = sorted({row[0] for row in rows})
        for part in _chunks(wanted):
            jobs.update((job.id, job) for job in self._select(f"id IN ({_marks(part)})", part))
        self._feed_lines.extend(
            eventlog.job_line(jobs[job_id], time, state, reason)
            for job_id, time, state, reason in rows
            if job_id in jobs
        )

    def _queue_job_events(
        self,
        db: sqlite3.Connection,
        job_id: int,
        now: float,
        *,
        old: JobState | None = None,
        kinds: tuple[str, ...] = (),
        ended_arrays: dict[int, Job] | None = None,
    ) -> int:
        """Outbox rows for the events of the job's change from `old` (or for `kinds`),
        one event id per kind, shared by its destinations. Returns the rows written.
        `ended_arrays`: an array task's end is noted there (array id -> task) for the
        caller to decide its array's END once, instead of here."""
        job = self._get(db, job_id)
        if job is None:
            return 0
        kinds = kinds or (notify.job_events(old, job) if old is not None else ())
        deliveries = self._notify.for_job(job, kinds)
        ids = {kind: uuid.uuid4().hex for kind in kinds}
        rows = []
        for delivery in deliveries:
            # A FAIL mailed as END keeps the event's id: FAIL's.
            event_id = ids.get(delivery.kind) or ids.get("FAIL") or uuid.uuid4().hex
            payload = notify.job_payload(job, delivery.kind, event_id, now)
            rows.append((delivery, event_id, job.id, job.attempt, json.dumps(payload)))
        written = self._insert_notifications(db, rows, now)
        if ended_arrays is not None and job.array_job_id is not None:
            ended_arrays[job.array_job_id] = job
        elif old is not None and job.array_job_id is not None:
            written += self._queue_array_events(db, job, kinds, now)
        return written

    def _queue_array_events(
        self, db: sqlite3.Connection, job: Job, kinds: tuple[str, ...], now: float
    ) -> int:
        """The whole-array mail (notify: ARRAY_KINDS) that task `job`'s change, whose
        event `kinds` are, makes due: BEGIN when it is the array's first task to start,
        END or FAIL when no task of the array is left to end. Written in the change's
        transaction, keyed to the array (outbox_once), so it is owed once."""
        array_id = job.array_job_id
        if array_id is None or self._notify.array_mail(job) is None:
            return 0
        if "BEGIN" in kinds:
            begun = db.execute(
                "SELECT 1 FROM jobs WHERE id BETWEEN ? AND ? AND id != ?"
                " AND start_time IS NOT NULL LIMIT 1",
                (array_id, self._array_last_id(db, array_id, job.spec), job.id),
            ).fetchone()
            if begun is not None:
                return 0
            event_id = uuid.uuid4().hex
            payload = json.dumps(notify.array_payload(job, "BEGIN", event_id, now))
            return self._insert_notifications(
                db,
                [
                    (each, event_id, array_id, notify.ARRAY_ATTEMPT, payload)
                    for each in self._notify.for_array(job, "BEGIN")
                ],
                now,
            )
        if job.state.is_final:
            return self._queue_array_end(db, job, now)
        return 0

    def _queue_tail_end(self, db: sqlite3.Connection, record: Job, now: float) -> int:
        """The END of a pending tail cancelled whole, `record` standing for its tasks:
        ONE event for them all (mailed with ARRAY_TASKS as `N_[32-99]`, posted to the
        webhooks that want END), then its array's END if that was its last."""
        event_id = uuid.uuid4().hex
        rows = [
            (
                each,
                event_id,
                record.id,
                record.attempt,
                json.dumps(notify.job_payload(record, each.kind, event_id, now)),
            )
            for each in self._notify.for_job(record, ("END",))
        ]
        written = self._insert_notifications(db, rows, now)
        if self._notify.array_mail(record) is not None:
            written += self._queue_array_end(db, record, now)
        return written

    def _queue_array_end(self, db: sqlite3.Connection, job: Job, now: float) -> int:
        """END or FAIL of `job`'s array (a task of it), if none of its tasks is left to
        end: no row still active and no pending tail (one cancelled counts as ended)."""
        array_id = job.array_job_id
        assert array_id is not None
        tail = self._tail_by_id(db, array_id)
        if tail is not None and not tail.state.is_final:
            return 0
        last = self._array_last_id(db, array_id, job.spec, tail)
        active = [state.value for state in JobState if not state.is_final]
        running = db.execute(
            f"SELECT 1 FROM jobs INDEXED BY jobs_state WHERE state IN ({_marks(active)})"
            " AND id BETWEEN ? AND ? LIMIT 1",
            (*active, array_id, last),
        ).fetchone()
        if running is not None:
            return 0
        counts = {
            JobState(state): int(n)
            for state, n in db.execute(
                "SELECT state, count(*) FROM jobs WHERE id BETWEEN ? AND ? GROUP BY state",
                (array_id, last),
            )
        }
        low, high, signal = db.execute(
            "SELECT coalesce(min(coalesce(exit_code, 0)), 0), coalesce(max(exit_code), 0),"
            " coalesce(max(exit_signal), 0) FROM jobs WHERE id BETWEEN ? AND ?",
            (array_id, last),
        ).fetchone()
        if tail is not None:  # its tasks, cancelled while one record, exited with nothing
            counts[tail.state] = counts.get(tail.state, 0) + arrays.count(tail.positions)
            low = 0
        kind, state = notify.array_end(counts)
        event_id = uuid.uuid4().hex
        tasks = {s.value: n for s, n in sorted(counts.items(), key=lambda i: i[0].value)}
        return self._insert_notifications(
            db,
            [
                (
                    each,  # a FAIL mailed as END says END, with FAIL's event id
                    event_id,
                    array_id,
                    notify.ARRAY_ATTEMPT,
                    json.dumps(
                        notify.array_payload(
                            job,
                            each.kind,
                            event_id,
                            now,
                            state=state,
                            tasks=tasks,
                            exit_codes=(int(low), int(high)),
                            max_signal=int(signal) or None,
                        )
                    ),
                )
                for each in self._notify.for_array(job, kind)
            ],
            now,
        )

    @staticmethod
    def _array_last_id(
        db: sqlite3.Connection, array_id: int, spec: JobSpec, tail: ArrayTail | None = None
    ) -> int:
        """The id of the array's last task: its ids are consecutive from `array_id`.
        From its expression, or its tail; an array of `count` copies with neither (all
        its tasks rows) is walked, its rows being those whose position is their offset."""
        if spec.array is not None:
            return array_id + len(arrays.indices(spec.array)) - 1
        if tail is not None:
            return tail.last_id
        last = array_id
        while True:
            rows = db.execute(
                "SELECT id, coalesce(json_extract(spec, '$.array_pos'), 0),"
                " json_extract(spec, '$.array_task') FROM jobs WHERE id BETWEEN ? AND ?"
                " ORDER BY id",
                (last + 1, last + 1000),
            ).fetchall()
            for job_id, pos, task in rows:
                if job_id != last + 1 or task is None or job_id - pos != array_id:
                    return last
                last = job_id
            if len(rows) < 1000:
                return last

    @staticmethod
    def _insert_notifications(
        db: sqlite3.Connection,
        rows: Sequence[tuple[notify.Delivery, str, int | None, int | None, str]],
        now: float,
    ) -> int:
        written = 0
        for delivery, event_id, job_id, attempt, payload in rows:
            written += db.execute(
                "INSERT OR IGNORE INTO outbox (event_id, kind, channel, target, job_id, attempt,"
                " payload, created, next_attempt_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    event_id,
                    delivery.kind,
                    delivery.channel,
                    delivery.target,
                    job_id,
                    attempt,
                    payload,
                    now,
                    now,
                ),
            ).rowcount
        return written

    def queue_job_event(self, job_id: int, kind: str, now: float) -> int:
        """Owe the event `kind` of a running job (a TIME_LIMIT_80 warning) to whoever
        asked for it; once per run however often asked. Returns the rows written."""
        if not self._notify.active:
            return 0
        with self._write() as db:
            return self._queue_job_events(db, job_id, now, kinds=(kind,))

    def queue_node_event(self, node: str, kind: str, reason: str, now: float) -> int:
        """Owe a node's event (NODE_DOWN) to the admins' webhooks that ask for it; and
        give it to the event log, whether or not a webhook asks for it."""
        if not self._notify.for_node(kind):
            if self._feed is not None:
                with self._lock:  # in order with the lines of committed changes
                    self._feed([eventlog.node_line(node, kind, reason, now)])
            return 0
        with self._write() as db:
            return self._queue_node_event(db, node, kind, reason, now)

    def _queue_node_event(
        self, db: sqlite3.Connection, node: str, kind: str, reason: str, now: float
    ) -> int:
        event_id = uuid.uuid4().hex
        payload = json.dumps(notify.node_payload(node, kind, reason, event_id, now))
        rows = [(each, event_id, None, None, payload) for each in self._notify.for_node(kind)]
        if self._feed is not None:
            self._feed_lines.append(eventlog.node_line(node, kind, reason, now))
        return self._insert_notifications(db, rows, now)

    def node_episodes(self) -> dict[str, frozenset[str]]:
        """node -> the conditions on there, as last recorded (record_episodes)."""
        with self._lock:
            rows = self._db.execute("SELECT node, kind FROM node_episodes").fetchall()
        on: dict[str, set[str]] = {}
        for node, kind in rows:
            on.setdefault(node, set()).add(kind)
        return {node: frozenset(kinds) for node, kinds in on.items()}

    def record_episodes(
        self, node: str, begun: Mapping[str, str], ended: Collection[str], now: float
    ) -> None:
        """In one transaction: the conditions of `node` that began (kind -> why) are on
        and owed to the admins' webhooks that ask (and to the event log); those `ended`
        are off."""
        with self._write() as db:
            for kind, why in begun.items():
                db.execute(
                    "INSERT OR REPLACE INTO node_episodes (node, kind, since) VALUES (?, ?, ?)",
                    (node, kind, now),
                )
                self._queue_node_event(db, node, kind, why, now)
            db.executemany(
                "DELETE FROM node_episodes WHERE node = ? AND kind = ?",
                [(node, kind) for kind in ended],
            )

    def forget_node_episodes(self, keep: Collection[str]) -> None:
        """End the episodes of every node but those in `keep` (those that left the
        inventory: one back later is told afresh)."""
        if not set(self.node_episodes()) - set(keep):
            return  # no write (no fsync) at every start
        with self._write() as db:
            db.execute(f"DELETE FROM node_episodes WHERE node NOT IN ({_marks(keep)})", tuple(keep))

    def due_notifications(
        self,
        now: float,
        limit: int,
        skip_targets: Collection[str] = (),
        skip_owners: Collection[str] = (),
    ) -> list[notify.Notification]:
        """Undelivered outbox rows whose next try is due, the longest due first; none to
        `skip_targets` nor of `skip_owners` (notify.owner: a job's user, "" for a node's)."""
        where = ""
        if skip_targets:
            where += f" AND target NOT IN ({_marks(skip_targets)})"
        if skip_owners:
            where += (
                " AND coalesce(json_extract(payload, '$.job.user'), '')"
                f" NOT IN ({_marks(skip_owners)})"
            )
        with self._lock:
            rows = self._db.execute(
                "SELECT id, event_id, kind, channel, target, payload, attempts FROM outbox"
                " WHERE delivered IS NULL AND gave_up IS NULL AND next_attempt_time <= ?"
                f"{where} ORDER BY next_attempt_time, id LIMIT ?",
                (now, *skip_targets, *skip_owners, limit),
            ).fetchall()
        return [
            notify.Notification(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6]) for r in rows
        ]

    def notification_delivered(self, row_id: int, now: float) -> None:
        with self._write() as db:
            db.execute(
                "UPDATE outbox SET delivered = ?, attempts = attempts + 1 WHERE id = ?",
                (now, row_id),
            )

    def notification_failed(
        self, row_id: int, error: str, now: float, retry_at: float | None
    ) -> None:
        """A try failed: try again at `retry_at`, or never (None: given up)."""
        with self._write() as db:
            db.execute(
                "UPDATE outbox SET attempts = attempts + 1, last_error = ?,"
                " next_attempt_time = coalesce(?, next_attempt_time),"
                " gave_up = CASE WHEN ? IS NULL THEN ? END WHERE id = ?",
                (error[:500], retry_at, retry_at, now, row_id),
            )

    def prune_notifications(self, before: float) -> int:
        """Delete the rows delivered before `before`; the number deleted. Rows given up
        on stay, with their last_error, for an admin to read."""
        with self._write() as db:
            return db.execute(
                "DELETE FROM outbox WHERE delivered IS NOT NULL AND delivered < ?", (before,)
            ).rowcount

    def outbox(self, job_id: int | None = None) -> list[dict[str, object]]:
        """Every outbox row (of one job), oldest first: for tests and inspection."""
        where, params = ("WHERE job_id = ?", (job_id,)) if job_id is not None else ("", ())
        with self._lock:
            cursor = self._db.execute(f"SELECT * FROM outbox {where} ORDER BY id", params)
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

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

    def set_running_reason(self, job_id: int, attempt: int, reason: str) -> bool:
        """Set the reason of a job still RUNNING its run `attempt` (the idle GPU flag
        going away). Not a state change, so no event row. False when it has moved on."""
        with self._write() as db:
            return bool(
                db.execute(
                    "UPDATE jobs SET reason = ?, changed = ?"
                    " WHERE id = ? AND attempt = ? AND state = 'RUNNING'",
                    (reason, self._change_number(db), job_id, attempt),
                ).rowcount
            )

    def idle_flagged_count(self, prefix: str) -> int:
        """How many RUNNING jobs have a reason starting with `prefix` (the metrics'
        flagged idle GPU hoarders)."""
        with self._lock:
            (count,) = self._db.execute(
                "SELECT count(*) FROM jobs WHERE state = 'RUNNING' AND substr(reason, 1, ?) = ?",
                (len(prefix), prefix),
            ).fetchone()
        return int(count)

    def note(self, job_id: int, state: JobState, reason: str, now: float) -> bool:
        """Record why a job in `state` stays there (a start whose outcome is unknown):
        its reason and an event, with no state change. False when it has left `state`."""
        with self._write() as db:
            changed = db.execute(
                "UPDATE jobs SET reason = ?, changed = ? WHERE id = ? AND state = ?",
                (reason, self._change_number(db), job_id, state.value),
            ).rowcount
            if changed:
                self._insert_events(db, [(job_id, now, state.value, reason)])
        return bool(changed)

    def set_held(self, job_id: int, held: bool, now: float) -> Job:
        """Hold or release a pending job (recorded as an event, state unchanged).

        Raises IllegalTransition when the job is no longer PENDING."""
        with self._write() as db:
            job = self._get(db, job_id)
            if job is None:
                raise JobNotFound(job_id)
            if job.state is not JobState.PENDING:
                # Checked inside the transaction: the loop may have just dispatched it.
                raise IllegalTransition(job.state, job.state)
            reason = "JobHeldUser" if held else ""
            db.execute(
                "UPDATE jobs SET held = ?, reason = ?, changed = ? WHERE id = ?",
                (held, reason, self._change_number(db), job_id),
            )
            event = "held by user" if held else "released"
            self._insert_events(db, [(job_id, now, job.state.value, event)])
            job = self._get(db, job_id)
        assert job is not None
        return job

    def update_spec(
        self,
        job_id: int,
        old: JobSpec,
        new: JobSpec,
        states: Collection[JobState],
        reason: str,
        now: float,
    ) -> Job:
        """scontrol update: replace the job's spec `old` with `new` (its name and
        queue_priority with it) and record `reason` as an event, in ONE transaction.

        Raises JobNotFound, and IllegalTransition (nothing written) when the job is no
        longer in one of `states` or its spec is no longer `old` (another update came
        first): the caller checked `new` against what it read."""
        with self._write() as db:
            job = self._get(db, job_id)
            if job is None:
                raise JobNotFound(job_id)
            if job.state not in states or job.spec != old:
                raise IllegalTransition(job.state, job.state)
            # A job found never satisfied stays so (the loop reads its reason), unless
            # its dependency is what changed: then the loop judges the new one.
            pending_reason = (
                ""
                if job.reason == NEVER_REASON and new.dependency != old.dependency
                else job.reason
            )
            db.execute(
                "UPDATE jobs SET spec = ?, name = ?, queue_priority = ?, reason = ?, changed = ?"
                " WHERE id = ?",
                (
                    json.dumps(new.to_dict()),
                    new.name,
                    new.effective_priority,
                    pending_reason,
                    self._change_number(db),
                    job_id,
                ),
            )
            self._insert_events(db, [(job_id, now, job.state.value, reason)])
            job = self._get(db, job_id)
        assert job is not None
        return job

    # -- bulk: many jobs, a bounded batch per call ------------------------------------
    #
    # A request over many jobs (`scancel -u`, a range of ids) calls these once per batch
    # of a few thousand: each call is one short read or one transaction, so the lock is
    # never held across the whole request and the loop and other requests run between
    # batches. They write what set_state and set_held write, by set rather than by row.

    def briefs(self, ids: Sequence[int]) -> list[JobBrief]:
        """Those of `ids` that name a job, by id."""
        found: list[JobBrief] = []
        with self._lock:
            for part in _chunks(ids):
                found.extend(
                    _brief(row)
                    for row in self._db.execute(
                        f"SELECT id, uid, user, state FROM jobs WHERE id IN ({_marks(part)})",
                        part,
                    )
                )
        missing = set(ids) - {brief.id for brief in found}
        found.extend(
            JobBrief(job.id, job.uid, job.user, job.state)
            for job in self._tail_tasks(missing).values()
        )
        return sorted(found, key=lambda brief: brief.id)

    def briefs_between(self, first: int, last: int, *, after: int, limit: int) -> list[JobBrief]:
        """The jobs with ids in first..last above `after`, by id, at most `limit`: page
        through a range with after = the last id of the page before."""
        # One lower bound: given two, SQLite seeks by one and filters by the other, and
        # each page would scan the range from its start again.
        with self._lock:
            rows = self._db.execute(
                "SELECT id, uid, user, state FROM jobs WHERE id BETWEEN ? AND ?"
                " ORDER BY id LIMIT ?",
                (max(first, after + 1), last, limit),
            ).fetchall()
        return [_brief(row) for row in rows]

    def pending_ids(
        self,
        *,
        after: int,
        limit: int,
        users: Collection[str] | None = None,
        uid: int | None = None,
    ) -> list[int]:
        """Pending jobs' ids above `after`, by id, at most `limit`; only those of `users`
        and of `uid` when given. Read in id order through the state index, whatever the
        filters, so paging through 500,000 reads each row once."""
        where = ["state = 'PENDING'", "id > ?"]
        params: list[object] = [after]
        if users is not None:
            where.append(f"user IN ({_marks(users)})")
            params.extend(users)
        if uid is not None:
            where.append("uid = ?")
            params.append(uid)
        with self._lock:
            rows = self._db.execute(
                f"SELECT id FROM jobs INDEXED BY jobs_state WHERE {' AND '.join(where)}"
                " ORDER BY id LIMIT ?",
                (*params, limit),
            ).fetchall()
        return [int(row[0]) for row in rows]

    def cancel_pending(self, ids: Sequence[int], reason: str, now: float) -> list[int]:
        """Cancel those of `ids` still PENDING, in ONE transaction: each becomes
        CANCELLED with `reason` and end_time `now`, with its event, as set_state would
        write it. Returns the ids cancelled, by id; the others had moved on (the loop
        dispatched them) or never existed."""
        check_transition(JobState.PENDING, JobState.CANCELLED)
        cancelled = JobState.CANCELLED.value
        return self._change_pending(
            ids,
            "state = ?, reason = ?, end_time = ?",
            (cancelled, reason, now),
            (now, cancelled, reason),
            cancelling=True,
        )

    def set_held_many(self, ids: Sequence[int], held: bool, now: float) -> list[int]:
        """Hold or release those of `ids` still PENDING, in ONE transaction, each as
        set_held would (flag, reason, an event). Returns the ids done, by id; the others
        are no longer pending or never existed."""
        reason, event = ("JobHeldUser", "held by user") if held else ("", "released")
        return self._change_pending(
            ids, "held = ?, reason = ?", (held, reason), (now, JobState.PENDING.value, event)
        )

    def _change_pending(
        self,
        ids: Sequence[int],
        assignments: str,
        values: tuple[object, ...],
        event: tuple[float, str, str],
        *,
        cancelling: bool = False,
    ) -> list[int]:
        """`UPDATE jobs SET <assignments>` for those of `ids` still PENDING, each with an
        event (time, state, reason), in one transaction; the ids changed, by id.
        `cancelling`: they end, and their END events go to the outbox."""
        done: list[int] = []
        with self._write() as db:
            for part in _chunks(ids):
                found = self._still_pending(db, part)
                if found:
                    db.execute(
                        f"UPDATE jobs SET {assignments}, changed = ? WHERE id IN ({_marks(found)})",
                        (*values, self._change_number(db), *found),
                    )
                    self._insert_events(db, [(job_id, *event) for job_id in found])
                    if cancelling:
                        self._queue_cancelled(db, found, event[0])
                    done.extend(found)
        return sorted(done)

    def _queue_cancelled(self, db: sqlite3.Connection, ids: Sequence[int], now: float) -> None:
        """END events of pending jobs just cancelled. Only the jobs that asked for mail
        or have webhooks of their own are read (one indexless filter in SQL), unless an
        admin's webhook wants every END: a sweep over 500,000 jobs reads none otherwise."""
        if not self._notify.active:
            return
        if not self._notify.hooks_want("END"):
            asked = [
                f"json_extract(spec, '$.{key}') IS NOT NULL"
                for key, on in (
                    ("mail_type", self._notify.mail),
                    ("notify", self._notify.user_prefixes),
                )
                if on
            ]
            if not asked:
                return
            ids = [
                int(row[0])
                for row in db.execute(
                    f"SELECT id FROM jobs WHERE id IN ({_marks(ids)}) AND ({' OR '.join(asked)})",
                    ids,
                )
            ]
        ended: dict[int, Job] = {}
        for job_id in ids:
            self._queue_job_events(db, job_id, now, old=JobState.PENDING, ended_arrays=ended)
        # Each array's end is decided once, after all of its tasks here are cancelled.
        for task in ended.values():
            if self._notify.array_mail(task) is not None:
                self._queue_array_end(db, task, now)

    @staticmethod
    def _still_pending(db: sqlite3.Connection, ids: Sequence[int]) -> list[int]:
        rows = db.execute(
            f"SELECT id FROM jobs WHERE state = 'PENDING' AND id IN ({_marks(ids)})", ids
        ).fetchall()
        return [int(row[0]) for row in rows]

    @staticmethod
    def _accrue(db: sqlite3.Connection, usage: Usage, now: float) -> None:
        row = db.execute(
            "SELECT gpu_seconds, as_of FROM usage WHERE user = ?", (usage.user,)
        ).fetchone()
        stored, as_of = (row[0], row[1]) if row else (0.0, now)
        total = fairshare.accrue(stored, as_of, usage.gpu_seconds, now, usage.half_life)
        db.execute(
            "INSERT INTO usage (user, gpu_seconds, as_of) VALUES (?, ?, ?)"
            " ON CONFLICT(user) DO UPDATE SET gpu_seconds = excluded.gpu_seconds,"
            " as_of = excluded.as_of",
            (usage.user, total, now),
        )

    def add_gpu_samples(self, samples: Sequence[tuple[int, int, GpuUsage]]) -> None:
        """Fold each (job id, attempt, sample) into that run's GPU usage: one
        transaction for a whole poll of the fleet, however many runs it samples."""
        if not samples:
            return
        with self._write() as db:
            db.executemany(
                "INSERT INTO gpu_usage (job_id, attempt, samples, util_samples, util_sum,"
                " util_max, mem_max_mib, mem_total_mib) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(job_id, attempt) DO UPDATE SET"
                " samples = samples + excluded.samples,"
                " util_samples = util_samples + excluded.util_samples,"
                " util_sum = util_sum + excluded.util_sum,"
                " util_max = max(util_max, excluded.util_max),"
                " mem_max_mib = max(mem_max_mib, excluded.mem_max_mib),"
                " mem_total_mib = max(mem_total_mib, excluded.mem_total_mib)",
                [(job_id, attempt, *usage.to_wire()) for job_id, attempt, usage in samples],
            )

    # -- reads ----------------------------------------------------------------------

    def running_gpus(self) -> list[tuple[int, int, str, tuple[int, ...]]]:
        """(job id, attempt, node, GPU indices) of every RUNNING job holding GPUs: the
        daemon's GPU sampling reads this each poll, without decoding any spec."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, attempt, node, gpus FROM jobs"
                " WHERE state = 'RUNNING' AND gpus != '' AND node IS NOT NULL"
            ).fetchall()
        return [
            (int(i), int(a), str(n), tuple(int(g) for g in g_.split(","))) for i, a, n, g_ in rows
        ]

    def gpu_usage(self, runs: Collection[tuple[int, int]]) -> dict[tuple[int, int], GpuUsage]:
        """The GPU usage recorded for each (job id, attempt) in `runs` that has any."""
        found: dict[tuple[int, int], GpuUsage] = {}
        wanted = set(runs)
        by_job: dict[int, set[int]] = {}
        for job_id, attempt in wanted:
            by_job.setdefault(job_id, set()).add(attempt)
        with self._lock:
            for chunk in _chunks(sorted(by_job)):
                rows = self._db.execute(
                    "SELECT job_id, attempt, samples, util_samples, util_sum, util_max,"
                    f" mem_max_mib, mem_total_mib FROM gpu_usage WHERE job_id IN ({_marks(chunk)})",
                    list(chunk),
                ).fetchall()
                for job_id, attempt, *values in rows:
                    if attempt in by_job[job_id]:
                        found[(job_id, attempt)] = GpuUsage.from_wire(values)
        return found

    def get(self, job_id: int) -> Job | None:
        """The job `job_id`: its row, or the pending array task its tail holds."""
        with self._lock:
            job = self._get(self._db, job_id)
            if job is None:
                tail = self._tail_of(self._db, job_id)
                if tail is not None:
                    return tail.task(job_id - tail.array_id)
            return job

    def _tail_tasks(self, ids: Collection[int]) -> dict[int, Job]:
        """Those of `ids` that are tasks held in array tails, as Jobs."""
        if not ids:
            return {}
        found: dict[int, Job] = {}
        for tail in self.tails(overlapping=[(min(ids), max(ids))]):
            for job_id in ids:
                if tail.has(job_id):
                    found[job_id] = tail.task(job_id - tail.array_id)
        return found

    def require(self, job_id: int) -> Job:
        job = self.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    def active_jobs(self) -> list[Job]:
        """Jobs not yet in a final state, oldest first."""
        return self._select(f"state IN ({_ACTIVE_SQL})", ())

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
        """Bring `window` (each user's first `window.per_user` runnable jobs, as
        runnable_jobs(per_user) reads them) up to date. `feed=False`: only a spread
        first read's next rows, not the change feed (the window stays as last read).

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
            Store._fill_window(db, window, user, wanted)
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

    def jobs_in(self, states: Collection[JobState]) -> list[Job]:
        """Jobs in any of `states`, oldest first (by the state index: cheap for the few
        allocated jobs among many finished ones)."""
        marks = ", ".join("?" * len(states))
        return self._select(f"state IN ({marks})", [s.value for s in states])

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
    ) -> list[Job]:
        """Jobs matching every given filter, by id. finished=True: final states only.
        `id_ranges` (FIRST, LAST): jobs with ids in them are matched as `ids` are.
        Array tasks still in a tail come as the tail's one record (Job.array_more),
        or each as itself when `ids` names it. `limit`: only the last `limit` rows by id.
        `after` and `first`, a page: only jobs with ids over `after`, and of the rows
        only the first `first` by id (tails' records all come, for the caller to cut:
        the first `first` of the whole are among them)."""
        asked_ids = ids
        where, params = _job_where(ids, id_ranges, states, users, finished, since, after)
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
        """What jobs() lists with these filters, by id, in pages read as they are taken:
        (the row's change number, its Job) each, an array tail's record with None for
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
        order = "ORDER BY id" if first is None else f"ORDER BY id LIMIT {int(first)}"
        decode = specs or ListingSpecs()
        with self._reading() as db:
            decode.count = _counter(db, where, params, first)
            records = self._tail_records(None, (), states, users, finished, since, db)
            tails = [job for job in records if after is None or job.id > after]
            tails.reverse()  # popped from the end, by id
            pages: Iterator[list[tuple[int, int | None, Any]]]
            if known is None:
                pages = _stamped_pages(db, where, order, params, decode)
            else:
                pages = _known_pages(db, where, order, params, known, decode)
            for page in pages:
                if tails and tails[-1].id <= page[-1][0]:
                    last = page[-1][0]
                    while tails and tails[-1].id <= last:
                        job = tails.pop()
                        page.append((job.id, None, job))
                    page.sort(key=_first)  # stable: a row before a record of its id
                yield [(changed, item) for _, changed, item in page]
            if tails:
                yield [(None, job) for job in reversed(tails)]

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
        """What jobs(states=states, users=users, finished=False) lists, by id, as the
        narrow rows a listing prints: (id, uid, user, spec, state, reason, held,
        submit_time, start_time, end_time, node, array_more), `spec` as its stored
        text (listing_spec decodes it; an array tail's record carries its JobSpec).
        With `history`, what jobs(states=states, users=users, since=since) lists: every
        state (squeue -t all, sacct). A page: with `after`, only ids greater; with
        `limit`, the first that many.

        No Job is built and the Job cache is not touched: at 100,000 pending jobs the
        cache (50,000) overflows and each listing rebuilt them all (~1.5 s); a Job per
        row is also most of a large listing's memory (issue 16). A page is read as one
        from SQLite, not cut from the whole listing."""
        where, params = _listing_where(states, users, after, history, since)
        with self._lock:
            rows: list[tuple[object, ...]] = self._db.execute(
                f"SELECT {_LISTING_COLUMNS}, NULL FROM jobs WHERE {where} ORDER BY id"
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

    def listing_page(
        self,
        query: ListingQuery,
        *,
        offset: int = 0,
        limit: int | None = None,
        counts: bool = False,
    ) -> ListingPage:
        """One page of a sorted, filtered listing: what listing_rows(states=
        query.states, users=query.users, history=query.history, since=query.since)
        lists (rows in its form, array tails' records among them), narrowed further by
        `query` (uid, shown states, search text), ordered by query.sort, from `offset`
        on, at most `limit` rows; with the number of rows the whole listing has, and
        with `counts`, its rows per state before the shown states and search narrow it.

        The sort, the filter and the cut are SQL's, so a page of 100,000 jobs costs
        what the query plan does, not a Job or a row per job in Python (the TUI's
        queue view asks for the rows it shows, every second). Tails join the rows as
        a VALUES table in a compound query, so they sort and count as one row each, as
        listing_rows lists them; SQLite merges the two sides of the compound, each in
        its order, so a page by id walks the primary key and stops (0.2 ms at
        100,000, where sorting all of them took 80). `sort`: a LISTING_SORTS key, ties
        by id; `reverse` reverses the whole order (ties too), as sorted(reverse=True).
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
                job_narrow.append(f"({_SEARCH_LABEL} OR {_SEARCH_CELLS})")
                job_params.extend([pattern] * 4)
            else:
                job_narrow.append(f"({_SEARCH_CELLS})")
                job_params.extend([pattern] * 3)
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
                    f"SELECT {_LISTING_COLUMNS}, NULL FROM jobs WHERE id IN ({_marks(ids)})", ids
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
        # 100,000: a page 12 ms against 33, the counts 17 against 36).
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
        """listing_rows' rows, in pages read as they are taken: as job_pages reads, in
        one snapshot on a read connection of its own, pages of LISTING_PAGE rows and the
        tails' records among them. `first`: as job_pages'. `specs`: the listing's spec
        decoder, told the listing's size. Close it when stopping early."""
        where, params = _listing_where(states, users, after, history, since)
        with self._reading() as db:
            if specs is not None:
                specs.count = _counter(db, where, params, first)
            if first is not None:
                where += f" ORDER BY id LIMIT {int(first)}"
            else:
                where += " ORDER BY id"
            tails = self._listing_tails(states, users, after, history, since, db)
            tails.reverse()  # popped from the end, by id
            cursor = db.execute(f"SELECT {_LISTING_COLUMNS}, NULL FROM jobs WHERE {where}", params)
            while page := cursor.fetchmany(LISTING_PAGE):
                if tails and _row_id(tails[-1]) <= _row_id(page[-1]):
                    last = _row_id(page[-1])
                    while tails and _row_id(tails[-1]) <= last:
                        page.append(tails.pop())
                    page.sort(key=_row_id)
                yield page
            if tails:
                yield tails[::-1]

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
        return [wire.listing_row(job, job.spec) for job in tails]

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

    def jobs_run_between(
        self, start: float, end: float, users: Collection[str] | None = None
    ) -> list[Job]:
        """Jobs (of `users`, when given) whose last run overlaps [start, end): started
        before `end`, and not ended before `start` (or not ended). sreport's question,
        asked a few times a month: a scan of the jobs table, no index of its own."""
        where = "start_time IS NOT NULL AND start_time < ? AND (end_time IS NULL OR end_time > ?)"
        params: list[object] = [end, start]
        if users is not None:
            where += f" AND user IN ({_marks(users)})"
            params.extend(users)
        return self._select(where, params)

    def events(self, job_id: int) -> list[Event]:
        """The job's events, oldest first; the first is its submit (PENDING, "submitted"
        at its submit_time), which is no stored row since jobs are submitted without one
        (_submitted_events). A store's older jobs have it stored: it is not told twice."""
        with self._lock:
            rows = self._db.execute(
                "SELECT job_id, time, state, reason FROM events WHERE job_id = ? ORDER BY id",
                (job_id,),
            ).fetchall()
            pending = JobState.PENDING.value
            if not rows or (rows[0][2], rows[0][3]) != (pending, SUBMITTED):
                found = self._db.execute(
                    "SELECT submit_time FROM jobs WHERE id = ?", (job_id,)
                ).fetchone()
                if found is not None:
                    rows.insert(0, (job_id, found[0], pending, SUBMITTED))
        return [Event(r[0], r[1], JobState(r[2]), r[3]) for r in rows]

    def usage(self, now: float, half_life: float) -> dict[str, float]:
        """Every user's stored GPU-seconds, decayed to `now`."""
        with self._lock:
            rows = self._db.execute("SELECT user, gpu_seconds, as_of FROM usage").fetchall()
        return {user: fairshare.decay(value, now - as_of, half_life) for user, value, as_of in rows}

    def active_counts(self) -> dict[str, int]:
        """How many jobs are in each active state."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT state, count(*) FROM jobs WHERE state IN ({_ACTIVE_SQL}) GROUP BY state"
            ).fetchall()
        return {state: int(n) for state, n in rows}

    def pending_counts(self, users: Collection[str] | None = None) -> dict[str, int]:
        """How many PENDING jobs (held ones too) each user has (of `users`, when given);
        users without any are left out. From the index of pending jobs alone."""
        where, params = "state = 'PENDING'", []
        if users is not None:
            where += f" AND user IN ({', '.join('?' * len(users))})"
            params = list(users)
        with self._lock:
            rows = self._db.execute(
                f"SELECT user, count(*) FROM jobs INDEXED BY jobs_pending_user WHERE {where}"
                " GROUP BY user",
                params,
            ).fetchall()
            tails = self._db.execute(
                f"SELECT user, sum(remaining) FROM array_tails WHERE {where} GROUP BY user",
                params,
            ).fetchall()
        counts = {user: int(n) for user, n in rows}
        for user, n in tails:
            counts[user] = counts.get(user, 0) + int(n)
        return counts

    def queue_counts(self) -> dict[tuple[str, str, str], int]:
        """(state, user, partition) -> how many jobs not yet ended are so, the tasks an
        array tail still holds counted one each; partition "" when a job names none.
        One grouped read over the state index: a scrape costs what the queue holds, never
        what history holds (metrics).

        On a read-only connection of its own, outside the store's lock: reading every
        pending job's partition out of its spec takes about 0.3 s for 270,000 of them,
        which must not hold up submits and the loop (WAL: a reader never blocks the
        writer, and sees the latest commit)."""
        active = [state.value for state in ACTIVE_STATES]
        marks = ", ".join("?" * len(active))
        columns = "state, user, coalesce(json_extract(spec, '$.partition'), '')"
        try:
            with contextlib.closing(
                sqlite3.connect(
                    self.path.absolute().as_uri() + "?mode=ro",
                    uri=True,
                    timeout=30,
                    isolation_level=None,
                )
            ) as db:
                db.execute("BEGIN")  # one snapshot for both: a tail's tasks become jobs
                rows = db.execute(
                    f"SELECT {columns}, count(*) FROM jobs INDEXED BY jobs_state"
                    f" WHERE state IN ({marks}) GROUP BY 1, 2, 3",
                    active,
                ).fetchall()
                tails = db.execute(
                    f"SELECT {columns}, sum(remaining) FROM array_tails"
                    f" WHERE state IN ({marks}) AND remaining > 0 GROUP BY 1, 2, 3",
                    active,
                ).fetchall()
        except sqlite3.Error as err:
            raise StoreError(f"cannot read the queue from {self.path}: {err}") from err
        counts: dict[tuple[str, str, str], int] = {}
        for state, user, partition, n in (*rows, *tails):
            key = (state, user, str(partition))
            counts[key] = counts.get(key, 0) + int(n)
        return counts

    # -- dependencies (gbatch/core/dependency.py) -------------------------------------------

    def ref_jobs(self, ids: Collection[int]) -> dict[int, RefJob]:
        """State and run times of those of `ids` that name a job: what the daemon
        evaluates dependencies on, for a whole queue in one read (by primary key)."""
        found: dict[int, RefJob] = {}
        ordered = sorted(ids)
        with self._lock:
            for part in _chunks(ordered):
                for job_id, state, start, end in self._db.execute(
                    "SELECT id, state, start_time, end_time FROM jobs"
                    f" WHERE id IN ({_marks(part)})",
                    part,
                ):
                    found[job_id] = RefJob(_STATE_NAMED[state], start, end)
        for job_id, job in self._tail_tasks(set(ids) - found.keys()).items():
            found[job_id] = RefJob(job.state, None, job.end_time)
        return found

    def array_tasks(self, array_id: int, most: int) -> dict[int, int] | None:
        """{task index: job id} of the array whose id is `array_id` (its first task's),
        or None when that job is not an array's first task. An array's tasks have
        consecutive ids, so the read stops at the first job past its end (`most`: the
        largest array there can be)."""
        found = self._array_tasks(array_id, most, one_per_tail=False)
        return None if found is None else found[0]

    def array_tasks_sampled(self, array_id: int, most: int) -> tuple[dict[int, int], bool] | None:
        """array_tasks' answer with the array's tail (its pending tasks that are not rows
        yet: one state, one end time) stood for by its first task, and whether it has a
        tail. What a dependency on the whole array (N_*) decides on: the tail's tasks
        answer alike, so one answers for all, and the read costs the array's rows."""
        return self._array_tasks(array_id, most, one_per_tail=True)

    def _array_tasks(
        self, array_id: int, most: int, *, one_per_tail: bool
    ) -> tuple[dict[int, int], bool] | None:
        tasks: dict[int, int] = {}
        with self._lock:
            cursor = self._db.execute(
                "SELECT id, json_extract(spec, '$.array_task'),"
                " coalesce(json_extract(spec, '$.array_pos'), 0)"
                " FROM jobs WHERE id BETWEEN ? AND ? ORDER BY id",
                (array_id, array_id + most - 1),
            )
            for job_id, task, pos in cursor:
                if task is None or job_id - pos != array_id:
                    break
                tasks[int(task)] = job_id
            cursor.close()
            tail = self._tail_by_id(self._db, array_id) if tasks else None
        if not tasks:
            return None
        if tail is None or not tail.positions:
            return tasks, False
        if one_per_tail:
            pos = tail.positions[0][0]
            tasks[arrays.index_at(tail.spec, pos)] = array_id + pos
            return tasks, True
        for first, last in tail.positions:
            for pos in range(first, last + 1):
                tasks[arrays.index_at(tail.spec, pos)] = array_id + pos
        return tasks, True

    def array_tasks_in(
        self, array_id: int, index_spans: Sequence[tuple[int, int]], most: int
    ) -> dict[int, int]:
        """{task index: job id} of those tasks of the array whose id is `array_id` whose
        index lies in `index_spans` (inclusive: N_K, N_[K-M]); empty when `array_id` is
        not an array's id. array_tasks' answer cut to those indices, at the cost of
        those tasks: the rows of their ids and the tail's positions among them, never
        the whole array (one task of a 100,000-task array is one task's work)."""
        return self.array_tasks_at(array_id, index_spans, most) or {}

    def array_tasks_at(
        self, array_id: int, index_spans: Sequence[tuple[int, int]], most: int
    ) -> dict[int, int] | None:
        """array_tasks_in's answer, but None when `array_id` is not an array's id (as
        array_tasks answers), so that an array none of whose tasks is named ({}) tells
        apart from a plain job: what dependencies on N_K and aftercorr read."""
        tasks: dict[int, int] = {}
        with self._lock:
            head = self._db.execute(
                "SELECT json_extract(spec, '$.array'), json_extract(spec, '$.array_task'),"
                " coalesce(json_extract(spec, '$.array_pos'), 0) FROM jobs WHERE id = ?",
                (array_id,),
            ).fetchone()
            if head is None or head[1] is None or head[2] != 0:
                return None
            wanted = arrays.overlap(arrays.position_spans(head[0], index_spans), ((0, most - 1),))
            for first, last in wanted:
                for job_id, task, pos in self._db.execute(
                    "SELECT id, json_extract(spec, '$.array_task'),"
                    " coalesce(json_extract(spec, '$.array_pos'), 0)"
                    " FROM jobs WHERE id BETWEEN ? AND ?",
                    (array_id + first, array_id + last),
                ):
                    if task is not None and job_id - pos == array_id:
                        tasks[int(task)] = job_id
            tail = self._tail_by_id(self._db, array_id) if wanted else None
        if tail is not None:
            for first, last in arrays.overlap(tail.positions, wanted):
                for pos in range(first, last + 1):
                    tasks[arrays.index_at(tail.spec, pos)] = array_id + pos
        named = arrays.position_spans(None, index_spans)  # the indices, merged
        return {task: job_id for task, job_id in tasks.items() if arrays.contains(named, task)}

    def array_ends(self, ids: Collection[int], most: int) -> dict[int, int]:
        """{array id: its last task's id} for those of `ids` that are an array's id (its
        first task's): `scancel N` and `squeue -j N` name the whole array, as in Slurm."""
        heads: list[int] = []
        ordered = sorted(ids)
        with self._lock:
            for part in _chunks(ordered):
                heads.extend(
                    int(row[0])
                    for row in self._db.execute(
                        f"SELECT id FROM jobs WHERE id IN ({_marks(part)})"
                        " AND json_extract(spec, '$.array_task') IS NOT NULL"
                        " AND coalesce(json_extract(spec, '$.array_pos'), 0) = 0",
                        part,
                    )
                )
        ends = {tail.array_id: tail.last_id for tail in self.tails() if tail.array_id in heads}
        for head in heads:
            if head in ends:
                continue
            tasks = self.array_tasks(head, most)
            if tasks:
                ends[head] = max(tasks.values())
        return ends

    def active_named(self, names: Collection[str]) -> list[tuple[int, str, str, JobState]]:
        """(id, user, name, state) of the jobs not yet ended that have one of `names`
        (singleton dependencies), read through the state index."""
        found: list[tuple[int, str, str, JobState]] = []
        ordered = sorted(names)
        with self._lock:
            for start in range(0, len(ordered), _IN_CHUNK):
                part = ordered[start : start + _IN_CHUNK]
                for job_id, user, name, state in self._db.execute(
                    f"SELECT id, user, name, state FROM jobs WHERE state IN ({_ACTIVE_SQL})"
                    f" AND name IN ({_marks(part)})",
                    part,
                ):
                    found.append((job_id, user, name, _STATE_NAMED[state]))
        return found

    # -- array tails (migration 8) ----------------------------------------------------

    def tails(
        self,
        *,
        states: Collection[JobState] | None = None,
        users: Collection[str] | None = None,
        uid: int | None = None,
        overlapping: Sequence[tuple[int, int]] | None = None,
        since: float | None = None,
        db: sqlite3.Connection | None = None,
    ) -> list[ArrayTail]:
        """Array tails matching every given filter, by array id. `overlapping`: only
        those whose ids meet one of these (FIRST, LAST) ranges. `db`: a read
        connection of _reading's to read them on (else the store's own)."""
        clauses: list[str] = []
        params: list[object] = []
        if states is not None:
            clauses.append(f"state IN ({_marks(states)})")
            params.extend(state.value for state in states)
        if users is not None:
            clauses.append(f"user IN ({_marks(users)})")
            params.extend(users)
        if uid is not None:
            clauses.append("uid = ?")
            params.append(uid)
        if since is not None:
            clauses.append("submit_time >= ?")
            params.append(since)
        if overlapping is not None:
            if not overlapping:
                return []
            clauses.append(
                "(" + " OR ".join(["(array_id <= ? AND last_id >= ?)"] * len(overlapping)) + ")"
            )
            params.extend(bound for first, last in overlapping for bound in (last, first))
        where = " AND ".join(clauses) or "1"
        query = f"SELECT {_TAIL_COLUMNS} FROM array_tails WHERE {where} ORDER BY array_id"
        if db is not None:
            rows = db.execute(query, params).fetchall()
        else:
            with self._lock:
                rows = self._db.execute(query, params).fetchall()
        return [_tail_from_row(row) for row in rows]

    def tail_of(self, job_id: int) -> ArrayTail | None:
        """The tail holding task `job_id` (a reserved id not yet a row), if any."""
        with self._lock:
            return self._tail_of(self._db, job_id)

    @staticmethod
    def _tail_of(db: sqlite3.Connection, job_id: int) -> ArrayTail | None:
        row = db.execute(
            f"SELECT {_TAIL_COLUMNS} FROM array_tails WHERE array_id <= ? AND last_id >= ?"
            " ORDER BY array_id DESC LIMIT 1",
            (job_id, job_id),
        ).fetchone()
        if row is None:
            return None
        tail = _tail_from_row(row)
        return tail if tail.has(job_id) else None

    def refill_arrays(self, window: int) -> int:
        """Make rows of pending arrays' next tasks, so that each has `window` pending
        rows for the planner (fewer when its tail runs out). Returns the rows made."""
        made = 0
        with self._lock:
            heads = [
                row[0]
                for row in self._db.execute(
                    "SELECT array_id FROM array_tails WHERE state = 'PENDING' AND held = 0"
                )
            ]
        if not heads:
            return 0
        with self._write() as db:
            for array_id in heads:
                tail = self._tail_by_id(db, array_id)
                if tail is None or tail.state is not JobState.PENDING:
                    continue
                (waiting,) = db.execute(
                    "SELECT count(*) FROM jobs INDEXED BY jobs_state"
                    " WHERE state = 'PENDING' AND id BETWEEN ? AND ?",
                    (tail.array_id, tail.last_id),
                ).fetchone()
                if waiting < window:
                    taken, _ = arrays.take(tail.positions, window - int(waiting))
                    made += self._materialise(db, tail, taken)
        return made

    def materialise(self, ids: Collection[int]) -> list[int]:
        """Make rows of those of `ids` that are array tasks still in a tail (a request
        names them alone: cancel, hold, update, requeue one task), in the tail's state.
        The ids made."""
        made: list[int] = []
        with self._write() as db:
            by_tail: dict[int, tuple[ArrayTail, list[int]]] = {}
            for job_id in sorted(set(ids)):
                known = next(
                    (t for t, _ in by_tail.values() if t.array_id <= job_id <= t.last_id), None
                )
                tail = known or self._tail_of(db, job_id)
                if tail is None or not tail.has(job_id):
                    continue
                by_tail.setdefault(tail.array_id, (tail, []))[1].append(job_id - tail.array_id)
            for tail, positions in by_tail.values():
                self._materialise(db, tail, positions)
                made.extend(tail.array_id + pos for pos in positions)
        return made

    @staticmethod
    def _tail_by_id(db: sqlite3.Connection, array_id: int) -> ArrayTail | None:
        row = db.execute(
            f"SELECT {_TAIL_COLUMNS} FROM array_tails WHERE array_id = ?", (array_id,)
        ).fetchone()
        return None if row is None else _tail_from_row(row)

    def _materialise(
        self, db: sqlite3.Connection, tail: ArrayTail, positions: Sequence[int]
    ) -> int:
        """Rows for the tail's tasks at `positions`, as submit would have written them;
        the tail keeps the rest (and goes when none is left)."""
        if not positions:
            return 0
        ids = [tail.array_id + pos for pos in positions]
        change = self._change_number(db)
        db.executemany(
            "INSERT INTO jobs (id, uid, user, name, spec, state, reason, held, submit_time,"
            " end_time, queue_priority, changed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    tail.array_id + pos,
                    tail.uid,
                    tail.user,
                    tail.spec.name,
                    json.dumps(tail.task_spec(pos).to_dict()),
                    tail.state.value,
                    tail.reason,
                    tail.held,
                    tail.submit_time,
                    tail.end_time,
                    tail.spec.effective_priority,
                    change,
                )
                for pos in positions
            ],
        )
        self._submitted_events(ids, tail.submit_time)
        if tail.state is not JobState.PENDING:
            self._insert_events(
                db,
                [
                    (job_id, tail.end_time or tail.submit_time, tail.state.value, tail.reason)
                    for job_id in ids
                ],
            )
        sealed = db.execute(
            "SELECT secret, submit_env FROM array_tails WHERE array_id = ?", (tail.array_id,)
        ).fetchone()
        for table, token in zip(("job_secrets", "job_submit_env"), sealed, strict=True):
            if token is not None:
                db.executemany(
                    f"INSERT INTO {table} (job_id, sealed) VALUES (?, ?)",
                    [(job_id, token) for job_id in ids],
                )
        rest = arrays.without(tail.positions, positions)
        if rest:
            db.execute(
                "UPDATE array_tails SET positions = ?, remaining = ? WHERE array_id = ?",
                (json.dumps(rest), arrays.count(rest), tail.array_id),
            )
        else:
            db.execute("DELETE FROM array_tails WHERE array_id = ?", (tail.array_id,))
        return len(ids)

    def cancel_tails(self, array_ids: Collection[int], reason: str, now: float) -> int:
        """Cancel the pending tails of `array_ids` whole: each stays as one CANCELLED
        record of its tasks (sacct's `N_[32-99999]`). Returns how many tasks."""
        return self._change_tails(
            array_ids, "state = 'CANCELLED', reason = ?, end_time = ?", (reason, now), ended=now
        )

    def hold_tails(self, array_ids: Collection[int], held: bool) -> int:
        """Hold or release the pending tails of `array_ids`; how many tasks."""
        reason = "JobHeldUser" if held else ""
        return self._change_tails(array_ids, "held = ?, reason = ?", (held, reason))

    def _change_tails(
        self,
        array_ids: Collection[int],
        assignments: str,
        values: tuple[object, ...],
        *,
        ended: float | None = None,
    ) -> int:
        """`UPDATE array_tails SET <assignments>` of those of `array_ids` pending; how many
        tasks. `ended`: they end then, which may end their arrays (the whole-array mail)."""
        ordered = sorted(array_ids)
        done = 0
        with self._write() as db:
            for part in _chunks(ordered):
                where = f"state = 'PENDING' AND array_id IN ({_marks(part)})"
                rows = db.execute(
                    f"SELECT array_id, remaining FROM array_tails WHERE {where}", part
                ).fetchall()
                db.execute(f"UPDATE array_tails SET {assignments} WHERE {where}", (*values, *part))
                done += sum(int(n) for _, n in rows)
                if ended is not None and self._notify.active:
                    for array_id, _ in rows:
                        tail = self._tail_by_id(db, int(array_id))
                        if tail is not None:
                            self._queue_tail_end(db, tail.record(), ended)
        return done

    def update_tail_spec(self, array_id: int, spec: JobSpec) -> None:
        """scontrol update of a whole array: its waiting tasks take `spec` (any task's
        new spec: each task's index is put back as it becomes a row)."""
        with self._write() as db:
            tail = self._tail_by_id(db, array_id)
            if tail is None or tail.state is not JobState.PENDING:
                return
            base = replace(spec, array_task=tail.spec.array_task, array_pos=tail.spec.array_pos)
            db.execute(
                "UPDATE array_tails SET spec = ? WHERE array_id = ?",
                (json.dumps(base.to_dict()), array_id),
            )

    def set_array_throttle(self, array_id: int, last_id: int, throttle: int | None) -> None:
        """scontrol update ArrayTaskThrottle: the array's rows still to end and its tail
        get the new limit, in one transaction."""
        with self._write() as db:
            for job_id, text in db.execute(
                f"SELECT id, spec FROM jobs WHERE id BETWEEN ? AND ? AND state IN ({_ACTIVE_SQL})",
                (array_id, last_id),
            ).fetchall():
                spec = replace(_decode_spec(text), array_throttle=throttle)
                db.execute(
                    "UPDATE jobs SET spec = ?, changed = ? WHERE id = ?",
                    (json.dumps(spec.to_dict()), self._change_number(db), job_id),
                )
            tail = self._tail_by_id(db, array_id)
            if tail is not None:
                spec = replace(tail.spec, array_throttle=throttle)
                db.execute(
                    "UPDATE array_tails SET spec = ? WHERE array_id = ?",
                    (json.dumps(spec.to_dict()), array_id),
                )

    def drain_node(self, name: str, reason: str, now: float) -> None:
        """Take a node out of scheduling (its running jobs carry on)."""
        with self._write() as db:
            db.execute(
                "INSERT INTO drained_nodes (name, reason, since) VALUES (?, ?, ?)"
                " ON CONFLICT(name) DO UPDATE SET reason = excluded.reason",
                (name, reason, now),
            )

    def resume_node(self, name: str) -> bool:
        """Put a drained node back in service; False when it was not drained."""
        with self._write() as db:
            return db.execute("DELETE FROM drained_nodes WHERE name = ?", (name,)).rowcount > 0

    def drained_nodes(self) -> dict[str, str]:
        """Drained node -> the admin's reason."""
        with self._lock:
            rows = self._db.execute("SELECT name, reason FROM drained_nodes").fetchall()
        return {name: reason for name, reason in rows}

    def drain_times(self) -> dict[str, float]:
        """Drained node -> when it was drained (epoch seconds)."""
        with self._lock:
            rows = self._db.execute("SELECT name, since FROM drained_nodes").fetchall()
        return {name: since for name, since in rows}

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM jobs").fetchone()[0])

    # -- helpers --------------------------------------------------------------------

    def _select(self, where: str, params: Iterable[object]) -> list[Job]:
        return self._select_raw(f"{where} ORDER BY id", params)

    def _select_raw(self, tail: str, params: Iterable[object]) -> list[Job]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE {tail}", tuple(params)
            ).fetchall()
        if len(rows) > _JOB_CACHE_MAX:
            decode = _uncached()
            return [_build_job(row, decode) for row in rows]
        return [_job_from_row(row) for row in rows]

    @staticmethod
    def _get(db: sqlite3.Connection, job_id: int) -> Job | None:
        row = db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _job_from_row(row) if row else None


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


LISTING_PAGE = 1000
"""Rows job_pages reads at once."""
# Read connections kept idle for job_pages (a listing streaming holds one).
_IDLE_READERS = 4


def _stamped_pages(
    db: sqlite3.Connection,
    where: str,
    order: str,
    params: list[object],
    decode: Callable[[str], JobSpec],
) -> Iterator[list[tuple[int, int | None, Job]]]:
    """(id, change number, Job) of the jobs rows `where` matches, by id, a page at a
    time."""
    cursor = db.execute(
        f"SELECT changed, {_JOB_COLUMNS} FROM jobs WHERE {where} ORDER BY id", params
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
) -> Iterator[list[tuple[int, int | None, Job | T]]]:
    """_stamped_pages, with what `known` gives for a row in place of its Job (see
    Store.job_pages): ids and change numbers first, then the other rows of each page
    whole, by id (a few) or as the page's id range (many), in the same snapshot."""
    cursor = db.execute(f"SELECT id, changed FROM jobs WHERE {where} {order}", params)
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
    db: sqlite3.Connection, where: str, params: list[object], first: int | None
) -> Callable[[], int]:
    """The rows `where` matches (at most `first`), counted in db's snapshot when asked."""

    def count() -> int:
        (found,) = db.execute(f"SELECT count(*) FROM jobs WHERE {where}", params).fetchone()
        return int(found) if first is None else min(int(found), first)

    return count


def _first(item: tuple[int, object, object]) -> int:
    return item[0]


class ListingSpecs:
    """Spec decoding for one listing read in pages, decided at the first spec it
    decodes, by the listing's size (`count`, asked then): one no larger than the shared
    spec cache decodes through it, as listing_specs does (a queue listed again decodes
    none); a larger one leaves it alone (it would only churn it, and hold 10,000 of its
    specs resident after it: ~25 MB at 100,000 sweep jobs) and remembers at most
    _LISTING_SPECS of its own at once (a sweep's specs differ row by row)."""

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


def _chunks(ids: Sequence[int]) -> Iterator[Sequence[int]]:
    for start in range(0, len(ids), _IN_CHUNK):
        yield ids[start : start + _IN_CHUNK]


def _marks(values: Collection[object]) -> str:
    return ", ".join("?" * len(values))


_STATE_NAMED: dict[object, JobState] = {s.value: s for s in JobState}  # a lookup, not Enum()


def _brief(row: tuple[int, int, str, str]) -> JobBrief:
    return JobBrief(row[0], row[1], row[2], _STATE_NAMED[row[3]])


def _is_disk_full(err: sqlite3.OperationalError) -> bool:
    """SQLITE_FULL: the disk (or SQLite's max_page_count) has no room for the write."""
    code = getattr(err, "sqlite_errorcode", None)
    if code is not None:
        return bool(code & 0xFF == sqlite3.SQLITE_FULL)
    return "database or disk is full" in str(err)


def _encode(fields: Mapping[str, object]) -> dict[str, object]:
    encoded: dict[str, object] = {}
    for name, value in fields.items():
        if name in ("gpus", "gpu_uuids"):
            assert isinstance(value, tuple | list)
            value = ",".join(str(g) for g in value)
        elif isinstance(value, JobState):
            value = value.value
        encoded[name] = value
    return encoded


# A spec changes only by scontrol update (which writes new JSON text), and decoding it
# is most of the cost of reading a job: the loop reads every active job several times a
# second. Keyed by the JSON text.
# Bounded with the Job cache below (each entry costs about 1 KB with its key); a
# listing larger than either leaves both alone (_uncached).
_SPEC_CACHE: dict[str, JobSpec] = {}
_SPEC_CACHE_MAX = 50_000


def listing_spec(spec: str | JobSpec) -> JobSpec:
    """The JobSpec of a listing_rows row's spec cell (stored text, or a tail's JobSpec)."""
    return spec if isinstance(spec, JobSpec) else _decode_spec(spec)


def listing_specs(rows: Sized) -> Callable[[str | JobSpec], JobSpec]:
    """listing_spec for a listing of `rows`; past the spec cache's size, a decoder that
    leaves the cache alone (see _uncached)."""
    if len(rows) <= _SPEC_CACHE_MAX:
        return listing_spec
    # listing_columns asks once per distinct spec: nothing to remember here.
    return lambda spec: spec if isinstance(spec, JobSpec) else _spec_from_text(spec)


def _spec_from_text(text: str) -> JobSpec:
    return JobSpec.from_dict(json.loads(text))


def _uncached() -> Callable[[str], JobSpec]:
    """A spec decoder for one listing larger than the caches: it would only churn them
    (each is emptied when full) and leave up to 50,000 of its specs and jobs resident
    for good after its reply (~200 MB after one listing of 100,000, issue 16). Specs
    read again within the listing are still decoded once; all go with the listing."""
    seen: dict[str, JobSpec] = {}

    def decode(text: str) -> JobSpec:
        spec = seen.get(text)
        if spec is None:
            spec = seen[text] = _spec_from_text(text)
        return spec

    return decode


def _row_id(row: Sequence[object]) -> int:
    job_id = row[0]
    assert isinstance(job_id, int)
    return job_id


def _top_change(db: sqlite3.Connection) -> int:
    """The largest change number a jobs row has (0: none yet; migration 11)."""
    (top,) = db.execute("SELECT max(changed) FROM jobs INDEXED BY jobs_changed").fetchone()
    return int(top or 0)


def _kept_row(row: tuple[object, ...], records: Sequence[Job]) -> tuple[object, ...]:
    """A row of a page listing_page kept: a job row as it was read; a tail's (its index
    among `records` alone) built afresh from its record."""
    at = row[-1]
    return row if at is None else _tail_row(records[int(at)])  # type: ignore[call-overload]


def _tail_row(job: Job) -> tuple[object, ...]:
    """A tail's record as a listing_rows row (its JobSpec in the spec cell)."""
    return wire.listing_row(job, job.spec)


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


def _decode_spec(text: str) -> JobSpec:
    spec = _SPEC_CACHE.get(text)
    if spec is None:
        if len(_SPEC_CACHE) >= _SPEC_CACHE_MAX:
            _SPEC_CACHE.clear()
        spec = _SPEC_CACHE[text] = JobSpec.from_dict(json.loads(text))
    return spec


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
)
_FILTERED_KEYS = ("name", "dependency", "array_task", "array_pos", "array_throttle")
_PLANNING_AND_FILTERED_KEYS = (*_PLANNING_KEYS, *_FILTERED_KEYS)
# Jobs that ask the same are given one planning spec: a queue holds a few hundred kinds
# of job at most, so the window's 50,000 specs are as many shared objects.
_PLANNING_SPECS: dict[tuple[object, ...], JobSpec] = {}
_PLANNING_SPECS_MAX = 10_000


def planning_spec(data: Mapping[str, object]) -> JobSpec:
    """The spec the loop's window keeps of a job whose stored spec is `data` (as
    JobSpec.to_dict writes it): only what plan() and the loop's filters read, shared
    with every job that asks the same."""
    get = data.get
    filtered = get("dependency") is not None or get("array_throttle") is not None
    keys = _PLANNING_AND_FILTERED_KEYS if filtered else _PLANNING_KEYS
    key = tuple(map(get, keys))
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
    ) = row
    assert isinstance(spec, str) and isinstance(gpus, str) and isinstance(state, str)
    assert isinstance(gpu_uuids, str)
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
    )
