"""squeue, sacct, scontrol show job and the job log: what a caller may read of the jobs.

Everyone sees the queue, as in Slurm; under private_data a non-admin sees only their
own jobs, and a job's env values are its owner's and admins' only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from gbatch.core.model import IMPLICIT_PARTITION, Job, JobState
from gbatch.core.selection import on_any
from gbatch.head.daemon import Daemon
from gbatch.head.handlers.audit import audit
from gbatch.head.handlers.auth import is_admin, may_act_on
from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused
from gbatch.head.handlers.targets import MAX_ARRAY, named_job, parse_states, request_targets
from gbatch.head.store import LISTING_SORTS, ListingQuery, ListingSpecs, listing_specs
from gbatch.nodes.backend import BackendDown
from gbatch.protocol import codec, listings, replies, requests

LOG_CHUNK = 256 * 1024


def _job_to_wire(job: Job, *, owner_view: bool) -> dict[str, Any]:
    """A job's record as its reader may see it: env values only with `owner_view`.

    Env values are the owner's and admins' only (they often hold tokens); others get the
    names with empty values."""
    data = codec.job_to_wire(job)
    if not owner_view and "env" in data["spec"]:
        data["spec"]["env"] = dict.fromkeys(data["spec"]["env"], "")
    return data


def on_jobs(daemon: Daemon, caller: Caller, request: requests.ListJobs) -> dict[str, Any]:
    """squeue (active jobs) and sacct (`history`: every state): the jobs a listing asks for.

    Everyone sees the queue, as in Slurm; under private_data a non-admin sees only their
    own. The reply is made one of four ways, cheapest first: a view's page cut in the
    store's query, squeue's columns read a page at a time, records streamed as the reply
    is written, or Jobs read whole for the rest (jobs named by id, the TUI's table,
    expected starts, GPU use)."""
    states = parse_states(request.states)
    named, id_ranges = request_targets(daemon, request, None)
    ids = named if (request.ids or request.jobs) else None
    users: Sequence[str] | None = request.users or None
    admin = is_admin(daemon, caller)
    private = daemon.config.private_data and not admin  # a non-admin sees their own
    if private:
        if users is not None and caller.user not in users:
            return {"jobs": [], "now": daemon.clock()}
        users = [caller.user]
    if request.view_page:
        return _view_page(daemon, caller, request, states, users, private, ids)
    if request.columns and _narrow(request, ids):
        return _listing_columns(daemon, caller, request, states, users, private)
    if ids is None and not (
        request.table or request.columns or request.starts or request.gpu_usage
    ):
        return _streamed_jobs(daemon, caller, request, states, users, admin, private)
    if request.history:
        found = daemon.store.jobs(
            ids=ids, id_ranges=id_ranges, states=states, users=users, since=request.since
        )
    elif states is not None or ids is not None:
        found = daemon.store.jobs(
            ids=ids,
            id_ranges=id_ranges,
            states=states,
            users=users,
            finished=None if ids is not None else False,
        )
    elif private or _filtered(request):
        found = daemon.store.jobs(users=users, finished=False)
    else:
        # The queue as it is: a page is cut in the query (one row past it tells whether
        # more follow), not from every active job's Job.
        first = None if request.limit is None else request.limit + 1
        found = daemon.store.jobs(users=users, finished=False, after=request.after, first=first)
    if private:
        found = [j for j in found if j.uid == caller.uid]
    found, following = _page(_narrowed(found, request), request, _job_id)
    if request.columns:
        return {"columns": listings.jobs_to_columns(found), "now": daemon.clock(), **following}
    if request.table:  # brief, as columns: the TUI's queue every second
        return {"table": listings.jobs_to_table(found), "now": daemon.clock(), **following}
    now = daemon.clock()
    records: list[dict[str, Any]]
    if request.brief:  # no env in a brief record: the same for every caller
        records = [codec.job_to_wire(j, brief=True) for j in found]
    else:
        records = [_job_to_wire(j, owner_view=admin or j.uid == caller.uid) for j in found]
    reply: dict[str, Any] = {"jobs": records, "now": now, **following}
    if request.starts:
        reply["starts"] = _expected_starts(found, daemon.expected_starts, now)
    if request.gpu_usage:
        usage = daemon.store.gpu_usage([(j.id, j.attempt) for j in found])
        reply["gpu_usage"] = [[run[0], *u.to_wire()] for run, u in usage.items()]
    return reply


def _view_page(
    daemon: Daemon,
    caller: Caller,
    request: requests.ListJobs,
    states: Sequence[JobState] | None,
    users: Sequence[str] | None,
    private: bool,
    ids: object,
) -> dict[str, Any]:
    """A view's page of the narrow listing, sorted, narrowed and cut in the store's query.

    Store.listing_page does it: the TUI's queue at 100,000 jobs reads the rows it shows,
    not every job every second."""
    if not request.columns or not _narrow(request, ids):
        raise Refused(
            "invalid",
            "sort, reverse, shown_states, search, offset and counts need `columns` and "
            "no ids, names, partitions, nodes or starts",
        )
    sort = request.sort or "id"
    if sort not in LISTING_SORTS:
        raise Refused("invalid", f"sort: {sort!r}; use one of {', '.join(LISTING_SORTS)}")
    if request.limit is not None and request.limit < 1:
        raise Refused("invalid", f"limit: {request.limit}; give 1 or more jobs a page")
    if request.offset is not None and request.offset < 0:
        raise Refused("invalid", f"offset: {request.offset}; give 0 or more")
    query = ListingQuery(
        states=states,
        users=users,
        history=request.history,
        since=request.since,
        after=request.after,
        uid=caller.uid if private else None,
        shown_states=parse_states(request.shown_states),
        search=request.search.strip(),
        sort=sort,
        reverse=request.reverse,
        now=daemon.clock(),
    )
    page = daemon.store.listing_page(
        query, offset=request.offset or 0, limit=request.limit, counts=request.counts
    )
    reply: dict[str, Any] = {
        "columns": listings.listing_columns(page.rows, listing_specs(page.rows)),
        "now": query.now,
        "total": page.total,
    }
    if request.counts:
        reply["counts"] = page.counts
    return reply


def _listing_columns(
    daemon: Daemon,
    caller: Caller,
    request: requests.ListJobs,
    states: list[JobState] | None,
    users: Sequence[str] | None,
    private: bool,
) -> dict[str, Any]:
    """squeue's listing as columns, from the store's narrow rows read a page at a time.

    No Job per row: Store.listing_pages' rows go into the columns' JSON text
    (listings.ListingColumns), so that a listing of 1,000,000 jobs holds its text, not its
    rows (issue 16)."""
    limit = request.limit
    if limit is not None and limit < 1:
        raise Refused("invalid", f"limit: {limit}; give 1 or more jobs a page")
    following: dict[str, Any] = {}
    if request.after is not None or limit is not None:
        following["next"] = None
    # The whole listing (no page) is kept while the store is unchanged: asked again
    # (`watch squeue`, a lab's many squeues) it is sent as it was read.
    settled = None if following else daemon.store.settled()
    key = (
        tuple(states or ()) if states is not None else None,
        tuple(users) if users is not None else None,
        request.history,
        request.since,
        caller.uid if private else None,
        settled,
    )
    if settled is not None:
        kept = daemon.kept_columns.get(key)
        if kept is not None:
            return {"columns": kept, "now": daemon.clock()}
    specs = ListingSpecs()
    columns = listings.ListingColumns(specs, as_text=True, most_keys=_LISTING_KEYS)
    listed = 0
    last: int | None = None
    pages = daemon.store.listing_pages(
        states=states,
        users=users,
        history=request.history,
        since=request.since,
        after=request.after,
        # One row past the page tells whether more are left; a listing narrowed by uid
        # after the store's is read to its end (a page of it could come back short).
        first=None if private or limit is None else limit + 1,
        specs=specs,
    )
    try:
        for page in pages:
            if private:
                page = [row for row in page if row[1] == caller.uid]
            if limit is not None and listed + len(page) > limit:
                # One more is left: the page ends at the last listed.
                page = page[: limit - listed]
                columns.add(page)
                following["next"] = last if not page else _row_job_id(page[-1])
                break
            columns.add(page)
            listed += len(page)
            if page:
                last = _row_job_id(page[-1])
    finally:
        pages.close()
    made = columns.made()
    if settled is not None and daemon.store.settled() == settled:  # no write meanwhile
        made = daemon.kept_columns.keep(key, made, listed)
    return {"columns": made, "now": daemon.clock(), **following}


# Spec keys ListingColumns remembers at once for a listing.
_LISTING_KEYS = 10_000


def _streamed_jobs(
    daemon: Daemon,
    caller: Caller,
    request: requests.ListJobs,
    states: list[JobState] | None,
    users: Sequence[str] | None,
    admin: bool,
    private: bool,
) -> dict[str, Any]:
    """on_jobs' records of a listing not narrowed by ids, made while the reply is written.

    They come as replies.Streamed from the store's pages (Store.job_pages): at most a page
    of Jobs at once, however many are listed (issue 16: `sacct -a -S all` built every
    Job at once). Brief records of unchanged rows are the texts remembered
    (listings.BriefRecords). The same reply, byte for byte, as building the records whole
    (tests/unit/test_large_replies.py)."""
    limit, after = request.limit, request.after
    if limit is not None and limit < 1:
        raise Refused("invalid", f"limit: {limit}; give 1 or more jobs a page")
    brief = daemon.brief_records if request.brief else None
    narrowed = private or _filtered(request)
    specs = ListingSpecs()
    pages = daemon.store.job_pages(
        states=states,
        users=users,
        finished=None if request.history else False,
        since=request.since if request.history else None,
        after=after,
        # One row past the page tells whether more are left (when no filter after the
        # store's may leave rows out).
        first=None if narrowed or limit is None else limit + 1,
        known=None if brief is None else brief.known(),
        specs=specs,
    )
    following: dict[str, int | None] = {"next": None}

    def runs() -> Iterator[str]:
        listed = 0
        last = 0
        try:
            for page in pages:
                texts: list[str] = []
                for changed, item in page:
                    job = item if isinstance(item, Job) else item.job
                    if narrowed and not _shown(job, request, private, caller):
                        continue
                    if listed == limit:  # one more is left: the page ends at the last
                        following["next"] = last
                        yield ",".join(texts)
                        return
                    if not isinstance(item, Job):  # a brief record remembered
                        text = item.text
                    elif brief is not None:
                        text = brief.text(job, changed, keep=specs.size() <= brief.most)
                    else:
                        record = _job_to_wire(job, owner_view=admin or job.uid == caller.uid)
                        text = json.dumps(record, separators=replies.COMPACT)
                    texts.append(text)
                    listed += 1
                    last = job.id
                yield ",".join(texts)
        finally:
            pages.close()

    reply: dict[str, Any] = {"jobs": replies.Streamed(runs()), "now": daemon.clock()}
    if after is not None or limit is not None:
        reply["next"] = replies.Later(lambda: following["next"])
    return reply


T = TypeVar("T")


def _page(
    listed: list[T], request: requests.ListJobs, id_of: Callable[[T], int]
) -> tuple[list[T], dict[str, Any]]:
    """The page of `listed` (by id) that request.after and request.limit ask for.

    With it, {"next": the last id on it, or None when nothing is left} when they ask for
    a page, else {}."""
    if request.after is None and request.limit is None:
        return listed, {}
    if request.limit is not None and request.limit < 1:
        raise Refused("invalid", f"limit: {request.limit}; give 1 or more jobs a page")
    if request.after is not None:
        after = request.after
        listed = [item for item in listed if id_of(item) > after]
    if request.limit is None or len(listed) <= request.limit:
        return listed, {"next": None}
    listed = listed[: request.limit]
    return listed, {"next": id_of(listed[-1])}


def _row_job_id(row: Sequence[Any]) -> int:
    """The job id of a listing row (its first column)."""
    return int(row[0])


def _job_id(job: Job) -> int:
    """The id of `job`: _page's key for Jobs."""
    return job.id


def _narrow(request: requests.ListJobs, ids: object) -> bool:
    """Whether the store's narrow rows serve the listing, with no Job read.

    They do for the queue or the history by state, user and submit time alone (no ids,
    names, partitions, nodes or expected starts)."""
    return not (
        ids is not None or request.names or request.partitions or request.nodes or request.starts
    )


def _filtered(request: requests.ListJobs) -> bool:
    """Whether _narrowed may leave out jobs of the store's answer."""
    return bool(request.names or request.partitions or request.nodes)


def _narrowed(found: list[Job], request: requests.ListJobs) -> list[Job]:
    """The jobs of `found` that squeue's -n (names), -p (partitions) and -w (nodes) keep.

    A job passes when it matches one of each list given (-w: any of its nodes). A job
    queued before partitions existed is in the implicit partition, as squeue shows it."""
    if request.names:
        names = set(request.names)
        found = [j for j in found if j.spec.name in names]
    if request.partitions:
        parts = set(request.partitions)
        found = [j for j in found if _in_partitions(j, parts)]
    if request.nodes:
        hosts = set(request.nodes)
        found = [j for j in found if on_any(j, hosts)]
    return found


def _in_partitions(job: Job, partitions: Collection[str]) -> bool:
    """Whether `job` is in one of `partitions`: a waiting job of -p gpu,uni is in both."""
    return (job.spec.partition or IMPLICIT_PARTITION) in partitions or (
        job.spec.alternate in partitions and job.state is JobState.PENDING
    )


def _shown(job: Job, request: requests.ListJobs, private: bool, caller: Caller) -> bool:
    """Whether a listing shows `job`: _narrowed's filters, and `private`: the caller's own."""
    return (
        (not private or job.uid == caller.uid)
        and (not request.names or job.spec.name in request.names)
        and (not request.partitions or _in_partitions(job, request.partitions))
        and (not request.nodes or on_any(job, request.nodes))
    )


def _expected_starts(
    found: Sequence[Job], reserved: Mapping[int, float], now: float
) -> list[list[float]]:
    """[job id, expected start] of the pending jobs in `found` that have one.

    The planner's reservation, else a --begin time still to come (as Slurm shows it)."""
    starts: list[list[float]] = []
    for job in found:
        if job.state is not JobState.PENDING:
            continue
        at = reserved.get(job.id)
        if at is None and job.spec.begin is not None and job.spec.begin > now:
            at = job.spec.begin
        if at is not None:
            starts.append([job.id, at])
    return starts


def on_job(daemon: Daemon, caller: Caller, request: requests.ShowJob) -> dict[str, Any]:
    """scontrol show job: a job's record, events and GPU use (with_tasks: its array's tasks).

    Anyone may read a job's record and command; its env values are the owner's and
    admins' only."""
    found = named_job(daemon, caller, request.id, "job", request.task)
    owner_view = may_act_on(daemon, caller, found)
    if not owner_view and found.spec.env:
        audit(daemon, caller, "job_env", found, "refused: env values withheld, not the owner")
    others: list[Job] = []
    if request.with_tasks and request.task is None and found.array_job_id == found.id:
        # An array's id: Slurm shows each of its tasks.
        last = daemon.store.array_ends([found.id], MAX_ARRAY).get(found.id, found.id)
        others = daemon.store.jobs(id_ranges=[(found.id + 1, last)]) if last > found.id else []
    usage = daemon.store.gpu_usage([(found.id, found.attempt)]).get((found.id, found.attempt))
    return {
        "job": _job_to_wire(found, owner_view=owner_view),
        "events": [codec.event_to_wire(e) for e in daemon.store.events(found.id)],
        "tasks": [_job_to_wire(j, owner_view=owner_view) for j in others],
        "now": daemon.clock(),
        "gpu_usage": None if usage is None else usage.to_wire(),
    }


def on_logs(daemon: Daemon, caller: Caller, request: requests.ReadLog) -> dict[str, Any]:
    """gbatch logs: a chunk of a job's log from `offset`; `done` once final and read out.

    Its owner's and admins' only."""
    found = named_job(daemon, caller, request.id, "logs", request.task)
    if not may_act_on(daemon, caller, found):
        audit(daemon, caller, "logs", found, "refused: not the owner")
        raise Refused(
            "permission",
            f"Access/permission denied: job {found.id} is "
            f"{found.user}'s, and only its owner may read its log",
        )
    offset = request.offset
    if offset < 0:
        raise Refused("invalid", "offset must be a non-negative integer")
    sent = daemon.store.cluster_job(found.id)
    if sent is not None:
        return _cluster_log(daemon, found, sent.partition, offset)
    path = daemon.paths.job_log(found.id)
    if request.label and daemon.paths.task_log(found.id).exists():
        path = daemon.paths.task_log(found.id)  # its tasks' lines, each with its rank
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(LOG_CHUNK)
    except FileNotFoundError:
        data = b""
    final = found.state.is_final or (found.state is JobState.PENDING and found.attempt == 0)
    return {
        "data": data.decode("utf-8", errors="replace"),
        "offset": offset + len(data),
        "done": final and len(data) < LOG_CHUNK,
        "state": found.state.value,
    }


def _cluster_log(daemon: Daemon, job: Job, partition: str, offset: int) -> dict[str, Any]:
    """A chunk of a cluster job's output file, read on the cluster's login node."""
    backend = daemon.clusters.backends.get(partition)
    if backend is None:
        raise Refused(
            "unavailable",
            f"job {job.id} ran on cluster partition {partition}, gone from the inventory",
        )
    try:
        data = backend.read_log(job, offset, LOG_CHUNK)
    except BackendDown as err:
        raise Refused(
            "unavailable", f"cannot read job {job.id}'s output on cluster {partition}: {err}"
        ) from None
    return {
        "data": data.decode("utf-8", errors="replace"),
        "offset": offset + len(data),
        "done": job.state.is_final and len(data) < LOG_CHUNK,
        "state": job.state.value,
    }
