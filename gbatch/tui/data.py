"""The TUI's side of the daemon socket: typed snapshots, fetched off the UI thread.

No textual here. Every method blocks on the socket, so screens call them through
`asyncio.to_thread` inside a worker; one lock keeps the one connection to one
request at a time, whichever screen asks.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gbatch import wire
from gbatch.client import Client, DaemonUnavailable, ReplyTimeout, RequestFailed
from gbatch.model import Event, Job, NodeInfo

# What a screen shows as a status line instead of crashing: the daemon went away,
# did not answer in time, or refused.
LINK_ERRORS = (DaemonUnavailable, ReplyTimeout, RequestFailed)
# A screen refreshes every second: a daemon that takes longer than this is reported
# as not answering rather than freezing the view's data for the client's 30 s.
REQUEST_TIMEOUT_S = 5.0
ACTIONS = ("cancel", "hold", "release")


@dataclass(frozen=True)
class QueueSnapshot:
    """Every active job, and the daemon's clock when it listed them."""

    jobs: tuple[Job, ...]
    now: float


@dataclass(frozen=True)
class NodesSnapshot:
    nodes: tuple[NodeInfo, ...]
    owners: Mapping[int, str]  # job id -> user, for the jobs holding GPUs


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


def _reuse_or_decode(last: Job | None, data: dict[str, Any]) -> Job:
    if last is not None and wire.job_to_wire(last, brief=True) == data:
        return last
    return wire.job_from_wire(data)


class DaemonLink:
    """A thread-safe client for the TUI. Raises the LINK_ERRORS as Client does."""

    def __init__(self, socket_path: Path, timeout: float = REQUEST_TIMEOUT_S) -> None:
        self.socket_path = socket_path
        self._client = Client(socket_path, timeout=timeout)
        self._lock = threading.Lock()
        self._last_jobs: dict[int, Job] = {}  # the last queue reply's, by id
        self._decode_lock = threading.Lock()

    def _call(self, op: str, **args: Any) -> dict[str, Any]:
        with self._lock:
            return self._client.call(op, **args)

    def queue(self) -> QueueSnapshot:
        """Every active job. A job whose wire form is what the last reply's Job of
        that id encodes to is that same Job object: the views' caches then know it by
        identity (10,000 jobs, re-read every second, seldom change). Encoding a Job
        costs less than decoding one, and no reply is kept."""
        reply = self._call("jobs", brief=True)
        with self._decode_lock:
            last = self._last_jobs
            jobs = tuple(_reuse_or_decode(last.get(data["id"]), data) for data in reply["jobs"])
            self._last_jobs = {job.id: job for job in jobs}
        return QueueSnapshot(jobs, reply["now"])

    def nodes(self) -> NodesSnapshot:
        nodes = tuple(wire.node_from_wire(n) for n in self._call("nodes")["nodes"])
        held = sorted({job for node in nodes for job in node.allocations.values()})
        owners: dict[int, str] = {}
        if held:
            reply = self._call("jobs", ids=held, brief=True)
            owners = {j["id"]: j["user"] for j in reply["jobs"]}
        return NodesSnapshot(nodes, owners)

    def job(self, job_id: int) -> JobSnapshot:
        reply = self._call("job", id=job_id)
        events = tuple(wire.event_from_wire(e) for e in reply["events"])
        return JobSnapshot(wire.job_from_wire(reply["job"]), events, reply["now"])

    def log(self, job_id: int, offset: int) -> LogChunk:
        reply = self._call("logs", id=job_id, offset=offset)
        return LogChunk(reply["data"], reply["offset"], reply["done"])

    def act(self, op: str, job_id: int) -> ActionOutcome:
        """Cancel, hold or release one job; a refusal comes back as an outcome."""
        if op not in ACTIONS:
            raise ValueError(f"unknown action {op!r}")
        try:
            (result,) = self._call(op, ids=[job_id])["results"]
        except RequestFailed as err:
            return ActionOutcome(op, job_id, False, err.message)
        return ActionOutcome(op, job_id, bool(result["ok"]), str(result.get("error", "")))

    def close(self) -> None:
        with self._lock:
            self._client.close()
