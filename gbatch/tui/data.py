"""The TUI's side of the daemon socket: typed snapshots, fetched off the UI thread.

No textual here. Every method blocks on the socket, so screens call them through
`asyncio.to_thread` inside a worker; one lock keeps the one connection to one
request at a time, whichever screen asks.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gbatch.core.model import Event, Job, JobSpec, JobState, NodeInfo
from gbatch.protocol import codec, listings, requests
from gbatch.protocol.client import Client, DaemonUnavailable, ReplyTimeout, RequestFailed
from gbatch.tui.activity import LANE_S, SPARK_S, Activity, activity_from_wire
from gbatch.tui.rows import QueueFilter

# What a screen shows as a status line instead of crashing: the daemon went away,
# did not answer in time, or refused.
LINK_ERRORS = (DaemonUnavailable, ReplyTimeout, RequestFailed)
# A screen refreshes every second: a daemon that takes longer than this is reported
# as not answering rather than freezing the view's data for the client's 30 s.
REQUEST_TIMEOUT_S = 5.0
ACTIONS = tuple(requests.JOB_ACTIONS)
# The finished-jobs view lists jobs submitted this long ago at most (sacct -S).
FINISHED_WINDOW_S = 7 * 86400.0
_STATE_OF = {state.value: state for state in JobState}


# The samples a sparkline's read carries: a few per cell (activity.SPARK_W).
SPARK_POINTS = 120
# How often the nodes view reads the GPUs' activity again (it refreshes every second).
ACTIVITY_EVERY_S = 5.0

# The page read before the view has a size (`gbatch tui`'s early read): a tall
# terminal's worth of rows and a margin.
FIRST_PAGE_ROWS = 200


@dataclass(frozen=True)
class QueueView:
    """What the queue view lists, all but which page: filter, active or finished jobs, and order.

    The filter is mine, state and text; the jobs are the active ones or (`finished`) those
    that ended; the order is a QUEUE_COLUMNS key, `reverse` for the whole order.
    """

    filter: QueueFilter
    finished: bool = False
    sort: str = "id"
    reverse: bool = False


@dataclass(frozen=True)
class QueuePage:
    """Rows `offset`.. of the listing `view` asks for, out of `total`, with the counts per state.

    The rows come as the daemon sorted and filtered them. `counts` are per state over the
    jobs mine/all selects (before the state and text filters); `now` is the daemon's clock
    when it listed them.
    """

    view: QueueView
    jobs: tuple[Job, ...]
    now: float
    offset: int = 0
    total: int = 0
    counts: Mapping[JobState, int] = field(default_factory=dict)
    # The array tasks' ids as squeue shows them, `N_K`, by job id (JobDecoder).
    labels: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodesSnapshot:
    nodes: tuple[NodeInfo, ...]
    owners: Mapping[int, str]  # job id -> user, for the jobs holding GPUs
    # Each GPU's utilisation of late and the runs that held it (None: not read).
    activity: Activity | None = None


@dataclass(frozen=True)
class JobSnapshot:
    job: Job
    events: tuple[Event, ...]
    now: float


@dataclass(frozen=True)
class LogChunk:
    data: str
    offset: int  # where the next read starts
    done: bool  # the job is final and its log read out: stop following


@dataclass(frozen=True)
class ActionOutcome:
    """What the daemon said to one cancel/hold/release: `error` is its reason."""

    op: str
    job_id: int
    ok: bool
    error: str = ""


class JobDecoder:
    """Decodes the daemon's queue listings into Jobs and array labels, reusing unchanged Jobs.

    The listings are ListJobs `columns` (listings.listing_columns), for a view that re-reads
    the same queue every second.

    A job whose row and spec equal the last listing's of its id is the same Job object
    as then (the views' caches know it by identity); each spec of a listing is decoded
    once, and only when a job needs it. An array's tasks share their array's spec (and
    so their cells, formatted once): their `N_K` ids come back beside the jobs, as
    labels. Holds the last listing's jobs only.

    The narrow listing, not `table`: the daemon serves it from the store's rows without
    building a Job per row (several times faster at 100,000 jobs: bench/bench_tui.py).
    """

    def __init__(self) -> None:
        self._last: dict[int, tuple[tuple[Any, ...], str, Job]] = {}

    def decode(self, columns: Mapping[str, Any]) -> tuple[tuple[Job, ...], dict[int, str]]:
        last = self._last
        known: dict[int, tuple[tuple[Any, ...], str, Job]] = {}
        wire_specs: list[dict[str, Any]] = columns["specs"]
        # Each spec as text, compared per row in C: an index means another spec in
        # another listing, and comparing the dicts row by row cost more than the rest.
        spec_texts = [json.dumps(spec, sort_keys=True) for spec in wire_specs]
        specs: dict[int, JobSpec] = {}
        more = {at: tuple((a, b) for a, b in spans) for at, spans in columns["more"]}
        # A job across nodes' other nodes (names only), sent only when some job has any.
        peers = {
            at: tuple((str(name), ()) for name in names) for at, names in columns.get("peers", ())
        }
        labels: dict[int, str] = {}
        jobs = []
        rows = zip(*(columns[name] for name in listings.LISTING_COLUMNS), strict=True)
        for at, row in enumerate(rows):
            job_id, index, array = row[0], row[3], row[-2]
            spans = more.get(at, ())
            if array is not None:
                labels[job_id] = listings.array_label(array, row[-1], spans)
                row = (*row, spans)  # a tail's tasks are part of what it is
            others: tuple[tuple[str, tuple[int, ...]], ...] = peers.get(at, ()) if peers else ()
            if others:
                row = (*row, others)  # its nodes are part of what it is
            seen = last.get(job_id)
            if seen is not None and seen[0] == row and seen[1] == spec_texts[index]:
                job = seen[2]
            else:
                spec = specs.get(index)
                if spec is None:
                    spec = specs[index] = JobSpec.from_dict(wire_specs[index])
                job = listings.job_from_listing(row, spec, spans, others)
            known[job_id] = (row, spec_texts[index], job)
            jobs.append(job)
        self._last = known
        return tuple(jobs), labels


class DaemonLink:
    """A thread-safe client for the TUI. Raises the LINK_ERRORS as Client does."""

    def __init__(self, socket_path: Path, timeout: float = REQUEST_TIMEOUT_S) -> None:
        self.socket_path = socket_path
        self._client = Client(socket_path, timeout=timeout)
        self._lock = threading.Lock()
        self._decoder = JobDecoder()
        self._decode_lock = threading.Lock()
        self._prefetched: tuple[QueueView, Future[QueuePage]] | None = None
        self._prefetch_lock = threading.Lock()  # one queue() takes the prefetched read
        self._activity: tuple[float, Activity] | None = None  # (monotonic time read, it)

    def _call(self, request: requests.Request) -> dict[str, Any]:
        with self._lock:
            return self._client.call(request)

    def prefetch_queue(self, view: QueueView) -> None:
        """Start reading `view`'s first page now, in a thread, for the next `queue_page()`.

        The next `queue_page()` of that view from the top returns that read, waiting for it
        if need be.

        `gbatch tui` calls this before it imports textual: the daemon lists the jobs
        and the reply is decoded while the import runs, instead of after the app has
        started. A failed read raises from that `queue_page()` as a fresh one would.
        """
        future: Future[QueuePage] = Future()

        def read() -> None:
            try:
                future.set_result(self._read_page(view, 0, FIRST_PAGE_ROWS))
            except BaseException as err:  # handed to whoever waits for the read
                future.set_exception(err)

        self._prefetched = (view, future)
        threading.Thread(target=read, name="gbatch-prefetch", daemon=True).start()

    def prefetched_queue(self) -> QueuePage | None:
        """The prefetch_queue read, taken, if it has already succeeded; else None.

        Once taken, the next `queue_page()` reads anew. None when there is none, it is still
        running, or it failed (the next `queue_page()` then reads anew and raises as that
        read does).
        """
        with self._prefetch_lock:
            if self._prefetched is None or not self._prefetched[1].done():
                return None
            future = self._prefetched[1]
            self._prefetched = None
        if future.exception() is not None:
            return None
        return future.result()

    def queue_page(
        self,
        view: QueueView,
        offset: int = 0,
        limit: int = FIRST_PAGE_ROWS,
        *,
        now: float | None = None,
    ) -> QueuePage:
        """Rows `offset`..`offset + limit` of the queue, sorted and filtered as `view` says.

        The daemon sorts and filters. With view.finished, the rows are of the jobs that
        ended among those submitted in the FINISHED_WINDOW_S before `now`, as `sacct -S`.
        Decoded by JobDecoder: an unchanged job is the very Job object of the last reply.
        """
        with self._prefetch_lock:
            prefetched = self._prefetched
            if prefetched is not None and prefetched[0] == view and offset == 0:
                self._prefetched = None
            else:
                prefetched = None
        if prefetched is not None:
            return prefetched[1].result()
        return self._read_page(view, offset, limit, now)

    def _read_page(
        self, view: QueueView, offset: int, limit: int, now: float | None = None
    ) -> QueuePage:
        filt = view.filter
        narrowed: dict[str, Any] = {
            "users": (filt.user,) if filt.mine else (),
            "shown_states": (filt.state.code,) if filt.state is not None else (),
            "search": filt.text.strip(),
            "sort": view.sort,
            "reverse": view.reverse,
        }
        if view.finished:
            since = (time.time() if now is None else now) - FINISHED_WINDOW_S
            finals = tuple(state.code for state in JobState if state.is_final)
            narrowed.update(history=True, states=finals, since=since)
        request = requests.ListJobs(
            columns=True, counts=True, offset=offset, limit=limit, **narrowed
        )
        reply = self._call(request)
        with self._decode_lock:
            jobs, labels = self._decoder.decode(reply["columns"])
        counts = {_STATE_OF[state]: count for state, count in reply["counts"].items()}
        return QueuePage(view, jobs, reply["now"], offset, reply["total"], counts, labels)

    def nodes(self) -> NodesSnapshot:
        nodes = tuple(codec.node_from_wire(n) for n in self._call(requests.ListNodes())["nodes"])
        held = sorted({job for node in nodes for job in node.allocations.values()})
        owners: dict[int, str] = {}
        if held:
            reply = self._call(requests.ListJobs(ids=tuple(held), brief=True))
            owners = {j["id"]: j["user"] for j in reply["jobs"]}
        try:
            activity: Activity | None = self.activity()
        except RequestFailed:  # a daemon without the history (older): the rows still show
            activity = None
        return NodesSnapshot(nodes, owners, activity)

    def activity(self) -> Activity:
        """Each GPU's last 10 minutes of utilisation and the runs on it in the last 6 hours.

        Two reads of what the web page's charts read (the head's sample history, the
        timeline), at the daemon's clock; a run's user is "" where private_data hides it.
        Read again once ACTIVITY_EVERY_S has passed, not at each refresh: a sparkline's
        cell is 30 s, a lane's 10 minutes, and the timeline reads each GPU's history."""
        cached = self._activity
        if cached is not None and time.monotonic() - cached[0] < ACTIVITY_EVERY_S:
            return cached[1]
        asked = time.time()  # the TUI runs on the head: the daemon's clock, near enough
        history = self._call(
            requests.ShowGpuHistory(start=asked - SPARK_S, end=asked + 1, points=SPARK_POINTS)
        )
        now = float(history["now"])
        timeline = self._call(requests.ShowTimeline(start=now - LANE_S, end=now + 1))
        read = activity_from_wire(history, timeline, now)
        self._activity = (time.monotonic(), read)
        return read

    def job(self, job_id: int) -> JobSnapshot:
        reply = self._call(requests.ShowJob(id=job_id))
        events = tuple(codec.event_from_wire(e) for e in reply["events"])
        return JobSnapshot(codec.job_from_wire(reply["job"]), events, reply["now"])

    def log(self, job_id: int, offset: int) -> LogChunk:
        reply = self._call(requests.ReadLog(id=job_id, offset=offset))
        return LogChunk(reply["data"], reply["offset"], reply["done"])

    def act(self, op: str, job_id: int) -> ActionOutcome:
        """Cancel, hold, release or requeue one job; a refusal comes back as an outcome."""
        action = requests.JOB_ACTIONS.get(op)
        if action is None:
            raise ValueError(f"unknown action {op!r}")
        try:
            failures = self._call(action(ids=(job_id,)))["results"]  # only what failed
        except RequestFailed as err:
            return ActionOutcome(op, job_id, False, err.message)
        if failures:
            return ActionOutcome(op, job_id, False, str(failures[0]["error"]))
        return ActionOutcome(op, job_id, True, "")

    def close(self) -> None:
        with self._lock:
            self._client.close()
