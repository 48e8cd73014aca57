"""The JSON the daemon and its clients exchange over the socket: model objects to and
from it, and the protocol itself: one type per request, and the kinds of error a
reply may carry."""

from __future__ import annotations

import inspect  # already loaded by dataclasses (gbatch.core.model): no start-up cost
import json
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace  # loaded by gbatch.core.model already
from math import isfinite
from operator import attrgetter
from types import UnionType
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Literal,
    NamedTuple,
    Union,
    dataclass_transform,
    get_args,
    get_origin,
    get_type_hints,
)

from gbatch.core.jobids import format_spans, merge_spans
from gbatch.core.model import (
    Event,
    Gpu,
    Job,
    JobSpec,
    JobState,
    NodeInfo,
    NodeState,
    PartitionInfo,
)

if TYPE_CHECKING:  # only sshare's replies carry these (start-up)
    from gbatch.core.limits import UserShare

# What a listing (squeue, sacct) prints of a spec; the rest (command, env, mounts)
# stays home, which makes a 1,000-job reply a third of the size.
_BRIEF_SPEC_FIELDS = (
    "name",
    "gpus",
    "time_limit",
    "retries",
    "priority",
    "nice",
    "image",
    "partition",  # squeue's PARTITION column and -p
    "array_throttle",  # squeue's N_[4-15%2]
)
_brief_values = attrgetter(*_BRIEF_SPEC_FIELDS)


def job_to_wire(job: Job, *, brief: bool = False) -> dict[str, Any]:
    """`brief`: only the spec fields listings show (command comes back empty)."""
    spec = _brief_spec(job.spec) if brief else job.spec.to_dict()
    if brief and job.spec.array_task is not None:
        # Listings show an array task as N_K. Not in jobs_to_table's shared specs: there
        # an array's tasks would no longer share one.
        spec.update(array_task=job.spec.array_task, array_pos=job.spec.array_pos)
    return {
        "id": job.id,
        "uid": job.uid,
        "user": job.user,
        "spec": spec,
        "state": job.state.value,
        "submit_time": job.submit_time,
        "reason": job.reason,
        "held": job.held,
        "start_time": job.start_time,
        "end_time": job.end_time,
        "node": job.node,
        "gpus": list(job.gpus),
        "gpu_uuids": list(job.gpu_uuids),
        "attempt": job.attempt,
        "exit_code": job.exit_code,
        "exit_signal": job.exit_signal,
        "stop_state": job.stop_state.value if job.stop_state else None,
        **({"array_more": [list(span) for span in job.array_more]} if job.array_more else {}),
    }


COMPACT = (",", ":")  # json.dumps's separators for reply lines: no spaces to send


class BriefRecord(NamedTuple):
    """A listed job's brief record as BriefRecords remembers it."""

    changed: int  # the row's change number (the store's change feed) it was made from
    job: Job
    text: str  # json.dumps(job_to_wire(job, brief=True)) with COMPACT separators


class BriefRecords:
    """Listings' brief job records' JSON text (job_to_wire(job, brief=True)),
    remembered per job with the change number of the row it was made from: every write
    of a jobs row gives it a new, higher number (the store's change feed), so a job
    whose number is the same is unchanged, and a queue of 10,000 mostly unchanged jobs
    is listed again reading two numbers a row, without its Jobs built, nor their
    records made and encoded. Shared by handler threads: a race makes a record twice,
    never a wrong one."""

    def __init__(self, most: int = 20_000) -> None:
        # Jobs remembered, ~1.5 kB each: once full, all are forgotten at the next
        # listing, and a listing longer than this makes the rest without keeping them.
        self.most = most
        self._made: dict[int, BriefRecord] = {}

    def known(self) -> Callable[[int, int], BriefRecord | None]:
        """For one listing: the record remembered for (job id, change number), if any
        (Store.job_pages' `known`)."""
        made = self._made
        if len(made) >= self.most:
            made = self._made = {}  # replaced, not cleared: a listing under way keeps its

        def find(job_id: int, changed: int) -> BriefRecord | None:
            record = made.get(job_id)
            return record if record is not None and record.changed == changed else None

        return find

    def text(self, job: Job, changed: int | None, *, keep: bool = True) -> str:
        """The brief record's text of `job`, read from a row of change number `changed`
        (None: not a row, an array tail's record, which is not remembered). `keep`:
        remember it (a listing larger than the bound keeps none: sacct -a of 1,000,000
        would hold 20,000 records of finished jobs, ~55 MB, for nothing)."""
        text = json.dumps(job_to_wire(job, brief=True), separators=COMPACT)
        made = self._made
        if keep and changed is not None and len(made) < self.most:
            made[job.id] = BriefRecord(changed, job, text)
        return text


class Streamed:
    """A reply's list made while the reply is written (a listing streamed from the
    store): `runs` yields the JSON text of its items a run at a time, each run's items
    joined by "," without brackets. encode_reply's pieces write it as the list it is;
    materialised() decodes it for a caller in-process. Taken once."""

    def __init__(self, runs: Iterator[str]) -> None:
        self.runs = runs

    def close(self) -> None:
        """Stop it where it is (a reply not written to its end): the store's read ends."""
        close = getattr(self.runs, "close", None)
        if close is not None:
            close()


class Later:
    """A reply's value known only once the Streamed values before it have been written
    (a page's "next"): `value()` is asked for when its turn comes."""

    def __init__(self, value: Callable[[], object]) -> None:
        self.value = value


def materialised(reply: dict[str, Any]) -> dict[str, Any]:
    """`reply` with its Streamed values (in it or in its mappings) decoded into lists
    and its Later values asked for, in order: what a client reading its line would
    decode."""
    out: dict[str, Any] = {}
    for key, value in reply.items():
        if isinstance(value, Streamed):
            value = json.loads("[" + ",".join(run for run in value.runs if run) + "]")
        elif isinstance(value, Later):
            value = value.value()
        elif isinstance(value, dict):
            value = materialised(value)
        out[key] = value
    return out


def jobs_to_table(jobs: Sequence[Job]) -> dict[str, Any]:
    """Brief jobs as a table, for a client that lists thousands every second (the TUI):
    `{"specs": [brief spec, ...], "rows": [[spec index, id, uid, user, state, ...], ...]}`
    (job_to_wire's fields in its order, the spec replaced by its index; then, for an
    array task, its array's id and task index, else two nulls: see table_labels).
    Jobs alike in their brief spec (an array's tasks) share one entry of `specs`, and
    a row is a list, not a mapping: a third of job_to_wire's bytes to encode and parse."""
    specs: list[dict[str, Any]] = []
    spec_index: dict[tuple[Any, ...], int] = {}
    rows = []
    for job in jobs:
        spec = job.spec
        key = _brief_values(spec)
        at = spec_index.get(key)
        if at is None:
            at = spec_index[key] = len(specs)
            specs.append(_brief_spec(spec))
        rows.append(
            [
                at,
                job.id,
                job.uid,
                job.user,
                job.state.value,
                job.submit_time,
                job.reason,
                job.held,
                job.start_time,
                job.end_time,
                job.node,
                list(job.gpus),
                list(job.gpu_uuids),
                job.attempt,
                job.exit_code,
                job.exit_signal,
                job.stop_state.value if job.stop_state else None,
                job.array_job_id,
                spec.array_task,
                *([[list(span) for span in job.array_more]] if job.array_more else []),
            ]
        )
    return {"specs": specs, "rows": rows}


# Where jobs_to_table's rows carry an array task's array id and task index (a row of
# an older daemon ends before).
_TABLE_ARRAY_AT = 17


def table_labels(table: Mapping[str, Any]) -> dict[int, str]:
    """The ids of a job table's array tasks as Slurm shows them, `N_K` by job id. Kept
    beside the jobs, not in their specs: an array's tasks share one spec (and its cells,
    formatted once) in a view of thousands of them."""
    at = _TABLE_ARRAY_AT
    return {
        row[1]: array_label(row[at], row[at + 1], row[at + 2] if len(row) > at + 2 else ())
        for row in table["rows"]
        if len(row) > at + 1 and row[at] is not None
    }


def array_label(array: int, task: int, more: Sequence[Sequence[int]]) -> str:
    """`N_K`, or `N_[K-M]` for a record standing for more pending tasks (array_more)."""
    if not more:
        return f"{array}_{task}"
    spans = merge_spans([(task, task)], [(a, b) for a, b in more])
    return f"{array}_[{format_spans(spans)}]"


def job_from_row(row: Sequence[Any], spec: JobSpec) -> Job:
    """One row of jobs_to_table's (its spec already decoded).

    Built without Job's __init__: a frozen dataclass sets each of its 18 fields through
    object.__setattr__, half of what decoding 10,000 rows costs the TUI at each read.
    The fields go straight into the new object's __dict__ instead, which gives an
    equal Job (tests/unit/test_wire.py checks every field against Job(...)).
    """
    (
        _,
        job_id,
        uid,
        user,
        state,
        submit_time,
        reason,
        held,
        start_time,
        end_time,
        node,
        gpus,
        gpu_uuids,
        attempt,
        exit_code,
        exit_signal,
        stop_state,
        *extra,  # an array task's array id and index (table_labels), its array_more
    ) = row
    job: Job = _new_object(Job)
    job.__dict__.update(
        id=job_id,
        uid=uid,
        user=user,
        spec=spec,
        state=_STATES[state],
        submit_time=submit_time,
        reason=reason,
        held=held,
        start_time=start_time,
        end_time=end_time,
        node=node,
        gpus=tuple(gpus),
        gpu_uuids=tuple(gpu_uuids),
        attempt=attempt,
        exit_code=exit_code,
        exit_signal=exit_signal,
        stop_state=_STATES[stop_state] if stop_state else None,
        secret_values=(),  # never on the wire
        submit_env=(),  # likewise
        array_more=tuple((a, b) for a, b in extra[2]) if len(extra) > 2 else (),
    )
    return job


def jobs_from_table(table: Mapping[str, Any]) -> list[Job]:
    """jobs_to_table's jobs, in its order, each as job_from_wire would give it from the
    brief record: each shared spec decoded once, and an array task's (with its
    array_task and array_pos, from the row's array id and task index) once per task."""
    specs = [JobSpec.from_dict(spec) for spec in table["specs"]]
    tasks: dict[tuple[int, int, int], JobSpec] = {}
    at = _TABLE_ARRAY_AT
    jobs = []
    for row in table["rows"]:
        if len(row) > at + 1 and row[at] is not None:
            spec = _task_spec(tasks, specs, row[0], row[at + 1], row[1] - row[at])
        else:
            spec = specs[row[0]]
        jobs.append(job_from_row(row, spec))
    return jobs


def _task_spec(
    tasks: dict[tuple[int, int, int], JobSpec],
    specs: Sequence[JobSpec],
    index: int,
    task: int,
    pos: int,
) -> JobSpec:
    """An array task's spec: the shared spec `specs[index]` with its task index and
    position, made once per task and kept in `tasks`."""
    key = (index, task, pos)
    found = tasks.get(key)
    if found is None:
        found = tasks[key] = replace(specs[index], array_task=task, array_pos=pos)
    return found


# A listing's columns (ListJobs' `columns`), one list per field, a row's values at one
# index in each; the spec is an index into "specs" (brief specs, each once), and
# "array"/"task" an array task's array id and task index (nulls for other jobs).
# "more" is sparse: [[row, [[first, last], ...]], ...] for the records standing for more
# pending tasks (Job.array_more).
_ROW_COLUMNS = (
    "id",
    "uid",
    "user",
    "spec",
    "state",
    "reason",
    "held",
    "submit_time",
    "start_time",
    "end_time",
    "node",
)


def listing_columns(
    rows: Sequence[Sequence[Any]], spec_of: Callable[[Any], JobSpec]
) -> dict[str, Any]:
    """Listing rows as columns: rows of `_ROW_COLUMNS` then array_more (the head's
    Store.listing_rows), each row's spec cell a key that `spec_of` decodes (called once
    per distinct key). Brief specs alike are sent once."""
    columns = ListingColumns(spec_of)
    columns.add(rows)
    return columns.made()


class ListingColumns:
    """listing_columns' columns made a page of rows at a time. With `as_text`, each
    column is kept as its JSON text (a Streamed value, the text encode_reply writes for
    the list) and the rows are let go page by page: a listing of 1,000,000 jobs holds
    ~80 bytes of text a row instead of a dozen objects (issue 16). `most_keys`: spec
    keys whose entry is remembered at once (a sweep's specs are each their own)."""

    def __init__(
        self, spec_of: Callable[[Any], JobSpec], *, as_text: bool = False, most_keys: int = 0
    ) -> None:
        self._spec_of = spec_of
        self._as_text = as_text
        self._most_keys = most_keys
        self._columns: dict[str, list[Any]] = {
            name: [] for name in (*_ROW_COLUMNS, "array", "task")
        }
        self._specs: list[dict[str, Any]] = []
        self._brief_index: dict[tuple[Any, ...], int] = {}
        # spec key -> (index into specs, array task, array position)
        self._known: dict[Any, tuple[int, int | None, int]] = {}
        self._more: list[list[Any]] = []
        self._count = 0

    def add(self, rows: Sequence[Sequence[Any]]) -> None:
        """The next rows, in the listing's order."""
        if not rows:
            return
        page: dict[str, list[Any]] = {}
        for name, values in zip(_ROW_COLUMNS, zip(*rows, strict=False), strict=False):
            page[name] = list(values)
        known, most = self._known, self._most_keys
        spec_column = []
        arrays: list[int | None] = []
        tasks: list[int | None] = []
        for job_id, key in zip(page["id"], page["spec"], strict=True):
            entry = known.get(key)
            if entry is None:
                spec = self._spec_of(key)
                brief = _brief_values(spec)
                at = self._brief_index.get(brief)
                if at is None:
                    at = self._brief_index[brief] = len(self._specs)
                    self._specs.append(_brief_spec(spec))
                if most and len(known) >= most:
                    known.clear()
                entry = known[key] = (at, spec.array_task, spec.array_pos)
            spec_column.append(entry[0])
            if entry[1] is None:
                arrays.append(None)
                tasks.append(None)
            else:
                arrays.append(job_id - entry[2])
                tasks.append(entry[1])
        page["spec"] = spec_column
        page["held"] = [bool(held) for held in page["held"]]
        page["array"] = arrays
        page["task"] = tasks
        for name, column in page.items():
            if self._as_text:  # "[a,b]" -> "a,b": a run of Streamed's
                self._columns[name].append(json.dumps(column, separators=COMPACT)[1:-1])
            else:
                self._columns[name].extend(column)
        self._more.extend(
            [self._count + at, [list(span) for span in row[11]]]
            for at, row in enumerate(rows)
            if row[11]
        )
        self._count += len(rows)

    def made(self) -> dict[str, Any]:
        """The columns, in listing_columns' order (taken once when `as_text`)."""
        made = {name: self._column(name) for name in _ROW_COLUMNS}
        made["specs"] = self._specs
        made["array"] = self._column("array")
        made["task"] = self._column("task")
        made["more"] = self._more
        return made

    def _column(self, name: str) -> Any:
        values = self._columns[name]
        return Streamed(iter(values)) if self._as_text else values


def listing_row(job: Job, spec: object) -> tuple[object, ...]:
    """A Job as one of listing_columns' rows, `spec` in its spec cell (the head's
    Store.listing_rows selects the same columns from the jobs table)."""
    return (
        job.id,
        job.uid,
        job.user,
        spec,
        job.state.value,
        job.reason,
        job.held,
        job.submit_time,
        job.start_time,
        job.end_time,
        job.node,
        job.array_more,
    )


def jobs_to_columns(jobs: Sequence[Job]) -> dict[str, Any]:
    """listing_columns of Jobs already built (a listing the narrow query cannot serve)."""
    specs = {id(job.spec): job.spec for job in jobs}
    rows = [listing_row(job, id(job.spec)) for job in jobs]
    return listing_columns(rows, specs.__getitem__)


def jobs_from_columns(columns: Mapping[str, Any]) -> list[Job]:
    """listing_columns' rows as Jobs, in order, for squeue's cells: each shared spec
    decoded once (an array task's once per task). The fields a listing does not send
    (gpus, gpu_uuids, attempt, exit code and signal, stop_state) are left empty."""
    specs = [JobSpec.from_dict(spec) for spec in columns["specs"]]
    tasks: dict[tuple[int, int, int], JobSpec] = {}
    more = {at: tuple((a, b) for a, b in spans) for at, spans in columns["more"]}
    jobs = []
    for at, row in enumerate(zip(*(columns[name] for name in LISTING_COLUMNS), strict=True)):
        job_id, index, array, task = row[0], row[3], row[-2], row[-1]
        if array is not None:
            spec = _task_spec(tasks, specs, index, task, job_id - array)
        else:
            spec = specs[index]
        jobs.append(job_from_listing(row, spec, more.get(at, ())))
    return jobs


# A listing_columns row read across its columns: the row's values, then the array
# task's array id and task index (nulls for other jobs).
LISTING_COLUMNS = (*_ROW_COLUMNS, "array", "task")


def job_from_listing(
    row: Sequence[Any], spec: JobSpec, array_more: tuple[tuple[int, int], ...]
) -> Job:
    """One row of listing_columns' (values in LISTING_COLUMNS order, its spec already
    decoded), built as job_from_row builds one. The fields a listing does not send
    (gpus, gpu_uuids, attempt, exit code and signal, stop_state) are left empty."""
    job_id, uid, user, _, state, reason, held, submit, start, end, node = row[:11]
    job: Job = _new_object(Job)
    job.__dict__.update(
        id=job_id,
        uid=uid,
        user=user,
        spec=spec,
        state=_STATES[state],
        submit_time=submit,
        reason=reason,
        held=held,
        start_time=start,
        end_time=end,
        node=node,
        gpus=(),
        gpu_uuids=(),
        attempt=0,
        exit_code=None,
        exit_signal=None,
        stop_state=None,
        secret_values=(),
        submit_env=(),
        array_more=array_more,
    )
    return job


_STATES = {state.value: state for state in JobState}
_new_object = object.__new__
# What job_from_row's shortcut relies on: a Job keeps its fields in its __dict__ and
# its __init__ does nothing but set them.
assert not hasattr(Job, "__slots__") and not hasattr(Job, "__post_init__")


def _brief_spec(spec: JobSpec) -> dict[str, Any]:
    return {**dict(zip(_BRIEF_SPEC_FIELDS, _brief_values(spec), strict=True)), "command": []}


def job_from_wire(data: Mapping[str, Any], spec: JobSpec | None = None) -> Job:
    """`spec`, when given, is data["spec"] already decoded (a client that meets the same
    spec in thousands of jobs decodes it once)."""
    return Job(
        id=data["id"],
        uid=data["uid"],
        user=data["user"],
        spec=JobSpec.from_dict(data["spec"]) if spec is None else spec,
        state=JobState(data["state"]),
        submit_time=data["submit_time"],
        reason=data["reason"],
        held=data["held"],
        start_time=data["start_time"],
        end_time=data["end_time"],
        node=data["node"],
        gpus=tuple(data["gpus"]),
        gpu_uuids=tuple(data.get("gpu_uuids", ())),
        attempt=data["attempt"],
        exit_code=data["exit_code"],
        exit_signal=data["exit_signal"],
        stop_state=JobState(data["stop_state"]) if data["stop_state"] else None,
        array_more=tuple((a, b) for a, b in data.get("array_more", ())),
    )


def event_to_wire(event: Event) -> dict[str, Any]:
    return {
        "job_id": event.job_id,
        "time": event.time,
        "state": event.state.value,
        "reason": event.reason,
    }


def event_from_wire(data: Mapping[str, Any]) -> Event:
    return Event(data["job_id"], data["time"], JobState(data["state"]), data["reason"])


def node_to_wire(node: NodeInfo) -> dict[str, Any]:
    return {
        "name": node.name,
        "state": node.state.value,
        "reason": node.reason,
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "memory_total_mib": g.memory_total_mib,
                "memory_used_mib": g.memory_used_mib,
                "utilization_pct": g.utilization_pct,
                "foreign_processes": g.foreign_processes,
                "simulated": g.simulated,
            }
            for g in node.gpus
        ],
        "allocations": {str(index): job for index, job in node.allocations.items()},
        "address": node.address,
        "partitions": list(node.partitions),
        "cpus_total": node.cpus_total,
        "mem_total_mb": node.mem_total_mb,
        "cpus_allocated": node.cpus_allocated,
        "mem_allocated_mb": node.mem_allocated_mb,
        "reason_time": node.reason_time,
        "reason_user": node.reason_user,
    }


def node_from_wire(data: Mapping[str, Any]) -> NodeInfo:
    return NodeInfo(
        name=data["name"],
        state=NodeState(data["state"]),
        reason=data["reason"],
        gpus=tuple(Gpu(**g) for g in data["gpus"]),
        allocations={int(index): job for index, job in data["allocations"].items()},
        address=data.get("address", ""),
        partitions=tuple(data.get("partitions", ())),
        cpus_total=data.get("cpus_total"),
        mem_total_mb=data.get("mem_total_mb"),
        cpus_allocated=data.get("cpus_allocated", 0),
        mem_allocated_mb=data.get("mem_allocated_mb", 0),
        reason_time=data.get("reason_time"),
        reason_user=data.get("reason_user", ""),
    )


def partition_to_wire(partition: PartitionInfo) -> dict[str, Any]:
    return {
        "name": partition.name,
        "max_time": partition.max_time,
        "default": partition.default,
        "nodes": list(partition.nodes),
        "default_time": partition.default_time,
    }


def partition_from_wire(data: Mapping[str, Any]) -> PartitionInfo:
    nodes = data.get("nodes")
    return PartitionInfo(
        data["name"],
        data.get("max_time"),
        bool(data.get("default", False)),
        tuple(str(n) for n in nodes) if isinstance(nodes, list) else (),
        data.get("default_time"),
    )


def share_to_wire(share: UserShare) -> dict[str, Any]:
    limits = share.limits
    return {
        "user": share.user,
        "usage": share.usage,
        "effective_usage": share.effective_usage,
        "fairshare": share.fairshare,
        "pending": share.pending,
        "running": share.running,
        "gpus": share.gpus,
        "limits": {
            "max_pending_jobs": limits.max_pending_jobs,
            "max_running_jobs": limits.max_running_jobs,
            "max_gpus": limits.max_gpus,
            "max_array_size": limits.max_array_size,
        },
    }


def share_from_wire(data: Mapping[str, Any]) -> UserShare:
    from gbatch.core.limits import UserLimits, UserShare  # deferred: only sshare reads these

    limits = data["limits"]
    return UserShare(
        user=data["user"],
        usage=data["usage"],
        effective_usage=data["effective_usage"],
        fairshare=data["fairshare"],
        pending=data["pending"],
        running=data["running"],
        gpus=data["gpus"],
        limits=UserLimits(
            max_pending_jobs=limits["max_pending_jobs"],
            max_running_jobs=limits["max_running_jobs"],
            max_gpus=limits["max_gpus"],
            max_array_size=limits["max_array_size"],
        ),
    )


# -- requests and errors ---------------------------------------------------------------
#
# One type per request the daemon serves: its `op` and its fields, as named on the
# socket. The client encodes them (encode_request), the daemon decodes them
# (decode_request), and mypy checks both ends and every call site.

ErrorKind = Literal[
    "invalid", "not_found", "permission", "unavailable", "internal", "unauthenticated"
]
"""Why a request failed, as a reply's `kind` says: invalid (bad input, bad request),
not_found (no such job or node), permission (not yours, not an admin, not in the
token's scopes), unavailable (a component is missing or failing: no docker engine, a
full disk), internal (a bug), unauthenticated (a token that lets nobody in: malformed,
altered, expired, revoked, or signed with a key the daemon does not have)."""
ERROR_KINDS: tuple[ErrorKind, ...] = get_args(ErrorKind)


def error_reply(kind: ErrorKind, message: str) -> dict[str, Any]:
    """A reply that refuses: one line for the user, `kind` for the exit status."""
    return {"ok": False, "kind": kind, "error": message}


def error_kind(value: object) -> ErrorKind:
    """A reply's `kind`; one this client does not know (from a newer daemon) reads as
    internal."""
    for kind in ERROR_KINDS:
        if value == kind:
            return kind
    return "internal"


@dataclass_transform(kw_only_default=True, frozen_default=True)
class _Request:
    """What every request type is: a frozen record of keyword-only fields (the class's
    own annotations, defaults from its body) whose `op` names it on the socket; mypy
    reads it as a frozen dataclass. Not dataclasses.dataclass: that writes each class's
    methods with exec, 1 ms a class here, and every command would pay it at start-up.
    `secret`: fields whose values a refusal never shows (they may hold tokens)."""

    op: ClassVar[str]
    _fields: ClassVar[tuple[str, ...]]
    _defaults: ClassVar[dict[str, Any]]
    _secret: ClassVar[frozenset[str]]

    def __init_subclass__(cls, *, op: str, secret: tuple[str, ...] = ()) -> None:
        cls.op = op
        cls._fields = tuple(inspect.get_annotations(cls))
        cls._defaults = {name: cls.__dict__[name] for name in cls._fields if name in cls.__dict__}
        cls._secret = frozenset(secret)

    def __init__(self, **values: Any) -> None:
        for name in self._fields:
            if name in values:
                value = values.pop(name)
            elif name in self._defaults:
                value = self._defaults[name]
            else:
                raise TypeError(f"{type(self).__name__}: {name} is required")
            object.__setattr__(self, name, value)
        if values:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(values)}")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment]  # fields hold lists and dicts

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"{type(self).__name__}({shown})"


class Ping(_Request, op="ping"):
    """The daemon's pid, version, home, active job counts and nodes."""


class Submit(_Request, op="submit", secret=("secret_env", "submit_env")):
    """Queue `spec` (JobSpec.to_dict(), its time_limit in seconds), or `count` copies
    of it (an array), or one task per index of `array` (an --array expression; it wins
    over count). secret_env: the values of the spec's secret_env names, sent beside
    the spec and never inside it; submit_env: the submitting shell's variables the job
    exports (spec.export), likewise. Replies {"ids": [...]}. `test_only`: queue
    nothing; reply {"test": {"start", "node", "gpus"}} (start: epoch seconds or null
    when the planner cannot tell; node: null likewise)."""

    spec: dict[str, Any]
    secret_env: dict[str, str] | None = None
    count: int = 1
    held: bool = False
    submit_env: dict[str, str] | None = None
    array: str | None = None
    test_only: bool = False
    # A parameter sweep ({"names": [...], "rows": [[...], ...]}, gbatch/jobspec/sweep.py): one
    # task per row, as an array 0-(rows-1); not with `array`. name_template names each
    # task ("{name}-lr{lr}").
    sweep: dict[str, Any] | None = None
    name_template: str | None = None


class Cancel(_Request, op="cancel"):
    """Cancel `ids` and the jobs in `ranges` ("FIRST-LAST", e.g. an array's "12-511");
    with neither, the caller's active jobs that `users` and `states` (names or codes)
    select. Replies {"results": [{"id", "ok": false, "error"}, ...], "done", "failed"}:
    the jobs that failed (at most 1,000 listed; "failed" counts them all) and how many
    were cancelled."""

    ids: tuple[int, ...] = ()
    ranges: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    # Job id texts (gbatch/core/jobids.py: N, N_K, N_[K-M], FIRST-LAST), as the commands
    # send them: N names a whole array when N is an array's id, as in Slurm.
    jobs: tuple[str, ...] = ()


class Hold(_Request, op="hold"):
    """Hold pending jobs (`ids`, `ranges`). Replies {"results", "done", "failed"} as
    Cancel does."""

    ids: tuple[int, ...] = ()
    ranges: tuple[str, ...] = ()
    jobs: tuple[str, ...] = ()  # as Cancel.jobs


class Release(_Request, op="release"):
    """Release held jobs (`ids`, `ranges`). Replies as Cancel does."""

    ids: tuple[int, ...] = ()
    ranges: tuple[str, ...] = ()
    jobs: tuple[str, ...] = ()  # as Cancel.jobs


class Requeue(_Request, op="requeue"):
    """Queue jobs again (`ids`, `ranges`; a running one once its run has ended). Replies
    as Cancel does."""

    ids: tuple[int, ...] = ()
    ranges: tuple[str, ...] = ()
    jobs: tuple[str, ...] = ()  # as Cancel.jobs


class ListJobs(_Request, op="jobs"):
    """squeue and sacct: the active jobs, or with `history` every state since `since`;
    narrowed by ids, users and states (names or codes), and by job names, partitions
    and nodes (squeue -n, -p, -w). `brief`: listings' spec fields only; `table`: brief,
    as jobs_to_table's rows; `columns`: listing_columns' (squeue). Replies
    {"jobs"|"table"|"columns", "now"}, and with `starts`
    also "starts": [[job id, expected start], ...] for the pending jobs listed that
    have an estimate (the planner's reservation, or a --begin time to come); with
    `gpu_usage` also "gpu_usage": [[job id, *GpuUsage.to_wire()], ...] for the listed
    jobs whose current run has GPU samples (sacct's TRESUsageInMax). A page: with
    `after`, only jobs with greater ids; with `limit`, at most that many, and "next"
    (the last id listed) in the reply when more are left, else null.

    A view's page (with `columns`, by state, user and submit time alone): `sort` (a
    queue column: id, user, name, state, gpus, time, where; `reverse` the whole
    order), `shown_states` and `search` (text in the JOBID, USER, NAME or NODE(REASON)
    cell, any case) narrow and order the listing in the daemon, `offset` skips that
    many rows of it, and the reply has "total" (the rows of the whole narrowed
    listing); with `counts`, also "counts": {state: rows} before `shown_states` and
    `search` narrow it. The TUI's queue asks for the rows it shows."""

    ids: tuple[int, ...] = ()
    jobs: tuple[str, ...] = ()  # as Cancel.jobs; an array's id lists all its tasks
    users: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    history: bool = False
    since: float | None = None
    brief: bool = False
    table: bool = False
    names: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    starts: bool = False
    gpu_usage: bool = False
    columns: bool = False
    after: int | None = None
    limit: int | None = None
    sort: str = ""
    reverse: bool = False
    shown_states: tuple[str, ...] = ()
    search: str = ""
    offset: int | None = None
    counts: bool = False

    @property
    def view_page(self) -> bool:
        """Whether it asks for a view's page (sorted, searched, counted or offset)."""
        return bool(
            self.sort
            or self.reverse
            or self.shown_states
            or self.search
            or self.offset is not None
            or self.counts
        )


class ShowJob(_Request, op="job"):
    """One job's record and events. Replies {"job", "events", "now", "tasks",
    "gpu_usage"}: `gpu_usage` is GpuUsage.to_wire() of its current run, or None; `tasks`,
    with `with_tasks` when `id` is an array's and no `task` is named, its other tasks'
    records (scontrol show job N shows each task, as Slurm); else empty."""

    id: int
    task: int | None = None  # with it, `id` is an array's id: its task `task` (N_K)
    with_tasks: bool = False


class UpdateJob(_Request, op="update"):
    """scontrol update: change job `id`'s `changes`, each one of UPDATE_KEYS (any case)
    with its value as the user wrote it (the daemon reads and checks it). Replies
    {"id", "changes": ["TimeLimit 1:00:00 -> 30:00", ...]}."""

    id: int
    changes: dict[str, str]
    task: int | None = None  # with it, `id` is an array's id: its task `task` (N_K)


# What `scontrol update` changes, in Slurm's spelling, and the other names Slurm takes
# for them (keys are matched in any case, as Slurm's are).
UPDATE_KEYS = (
    "TimeLimit",
    "Priority",
    "Nice",
    "JobName",
    "Dependency",
    "NumGPUs",
    "Gres",
    "Partition",
    "Comment",
    "ArrayTaskThrottle",
)
_UPDATE_ALIASES = {"name": "JobName"}


def update_key(text: str) -> str | None:
    """`text` as one of UPDATE_KEYS (any case, or an alias Slurm takes); None if none."""
    lowered = text.lower()
    return next(
        (key for key in UPDATE_KEYS if key.lower() == lowered), _UPDATE_ALIASES.get(lowered)
    )


class ListNodes(_Request, op="nodes"):
    """The fleet's nodes. Replies {"nodes": [...], "default_partition", "partitions":
    [{"name", "nodes", "default", "default_time", "max_time"}, ...]} (times in seconds,
    null: none set / unlimited)."""


class ReadLog(_Request, op="logs"):
    """A chunk of a job's log from byte `offset`. Replies {"data", "offset", "done", "state"}."""

    id: int
    task: int | None = None  # with it, `id` is an array's id: its task `task` (N_K)
    offset: int = 0


class DrainNode(_Request, op="node_drain"):
    """Admins: place no more jobs on node `name`, saying why."""

    name: str
    reason: str


class ResumeNode(_Request, op="node_resume"):
    """Admins: place jobs on a drained node again."""

    name: str


class InstallAgent(_Request, op="node_install"):
    """Admins: copy the agent to `names` (none: every remote node). Replies {"results"}."""

    names: tuple[str, ...] = ()


class GetHostKey(_Request, op="node_hostkey"):
    """Admins: the SSH host key node `name` offers, and how known_hosts stands on it."""

    name: str


class TrustHostKey(_Request, op="node_trust"):
    """Admins: pin node `name`'s host key if it still has `fingerprint`; a different
    key already pinned is replaced only with `replace`."""

    name: str
    fingerprint: str
    replace: bool = False


class ShowShares(_Request, op="shares"):
    """sshare: users' fair-share figures, what their jobs hold and their limits. The
    caller's own row; `users` or `all_users` (every user with jobs, usage or a limits
    entry) are for admins, bar the caller's own name. Replies {"users": [...], "now"}."""

    users: tuple[str, ...] = ()
    all_users: bool = False


class ShowPriorities(_Request, op="priorities"):
    """sprio: pending jobs (narrowed by `ids` and `users`) with what orders them: the
    user's fair-share factor, the job's priority and nice, its age. Under private_data
    a non-admin sees only their own. Replies {"jobs": [{"id", "user", "partition",
    "array_job_id", "array_task", "priority", "nice", "fairshare", "submit_time",
    "rank"}, ...], "now"}; rank is the job's place (1 first) among the jobs shown, in
    the planner's order."""

    ids: tuple[int, ...] = ()
    users: tuple[str, ...] = ()


class ReportUsage(_Request, op="usage_report"):
    """sreport: GPU-seconds that runs spent inside [start, end), summed by user (or by
    the user's Unix group with `by_group`). The caller's own row; `users`, `all_users`
    and `by_group` are for admins. Replies {"rows": [{"name", "gpu_seconds", "jobs"},
    ...], "start", "end", "now"}."""

    start: float
    end: float
    users: tuple[str, ...] = ()
    all_users: bool = False
    by_group: bool = False


class Metrics(_Request, op="metrics"):
    """What `GET /metrics` shows (gbatch/api/metrics.py renders it for Prometheus): a
    snapshot of the queue, the fleet and the daemon's counters, every user's. Under
    private_data, admins only. Replies {"now", "uptime", "jobs": [[state, user,
    partition, count], ...] (jobs not yet ended), "nodes": [node_to_wire, ...],
    "round_trips": {node: [seconds, age in seconds]} (SSH; measured nodes only),
    "shares": [[user, decayed GPU-seconds, fair-share factor], ...], "daemon":
    head/metrics.DaemonMetrics.to_wire()}."""


class Shutdown(_Request, op="shutdown"):
    """Admins: stop the daemon (jobs carry on). Replies {"pid"}."""


class MintToken(_Request, op="token"):
    """An API token for the caller, or with `user` (admins) for that Unix user (a
    service account); `scopes` as head/tokens.SCOPES names them (none: all), valid
    `lifespan` seconds. Socket callers only. Replies {"token", "jti", "user", "scopes",
    "expires", "kid"}."""

    lifespan: int = 3600
    scopes: tuple[str, ...] = ()
    user: str | None = None


class ListTokens(_Request, op="tokens"):
    """The caller's unexpired tokens (with `all_users`, admins: everyone's), never the
    tokens themselves. Replies {"tokens": [{"jti", "user", "scopes", "issued",
    "expires", "revoked"}, ...], "now"}."""

    all_users: bool = False


class RevokeToken(_Request, op="token_revoke"):
    """Refuse token `jti` from now on: its owner's or an admin's. Replies {"jti", "user"}."""

    jti: str


class RotateTokenKey(_Request, op="token_rotate"):
    """Admins: sign new tokens with a new key; the old keys still verify their tokens
    until those expire, unless `drop_old`. Replies {"kid"}."""

    drop_old: bool = False


class WithToken(_Request, op="with_token", secret=("token",)):
    """`request` (one request object, as encode_request makes it) made by the user the
    API token `token` was issued to, within its scopes, whoever sends it: the HTTP API
    sends every request so. The caller is the token's user, never the socket's peer."""

    token: str
    request: dict[str, Any]


Request = (
    Ping
    | Submit
    | Cancel
    | Hold
    | Release
    | Requeue
    | ListJobs
    | ShowJob
    | UpdateJob
    | ListNodes
    | ReadLog
    | DrainNode
    | ResumeNode
    | InstallAgent
    | GetHostKey
    | TrustHostKey
    | ShowShares
    | ShowPriorities
    | ReportUsage
    | Metrics
    | Shutdown
    | MintToken
    | ListTokens
    | RevokeToken
    | RotateTokenKey
    | WithToken
)
REQUESTS: Mapping[str, type[Request]] = {cls.op: cls for cls in get_args(Request)}


def encode_request(request: Request) -> dict[str, Any]:
    """The JSON object for `request`: its op and every field (tuples become lists)."""
    return {"op": request.op, **vars(request)}


REPLY_PIECE_ITEMS = 1000
"""The most items of one list (a listing's rows or one of its columns) that
encode_reply turns into text at once."""


def encode_reply(reply: Mapping[str, Any]) -> list[bytes]:
    """A reply's line, `json.dumps(reply, separators=COMPACT) + "\n"` byte for byte, as
    a list of pieces (concatenated, they are that line): reply_pieces', taken whole."""
    return list(reply_pieces(reply))


def reply_pieces(reply: Mapping[str, Any]) -> Generator[bytes, None, None]:
    """A reply's line, `json.dumps(reply, separators=COMPACT) + "\n"` byte for byte,
    in pieces made as they are taken: the daemon writes each before the next is made.
    A Streamed list's items go in as its runs come, a Later value once the values
    before it are written.

    A large listing's reply is never one string: json.dumps of 100,000 jobs would hold
    their whole text twice (the str, then its bytes) beside the reply's objects, and
    glibc keeps such large blocks' pages once freed (issue 16). Each long list is
    encoded REPLY_PIECE_ITEMS items at a time with json.dumps's own separators, so the
    client, which reads one line, cannot tell."""
    if all(type(key) is str and _small(item) for key, item in reply.items()):
        # A submit's or an action's few fields: one encode (the walk below was ~20 us).
        yield _COMPACT_JSON.encode(reply).encode() + b"\n"
        return
    yield from _coalesced(_encoded(reply))


# json.dumps(value, separators=COMPACT) without an encoder made for each call (~1 us).
_COMPACT_JSON = json.JSONEncoder(separators=COMPACT)
_JSON_SCALARS = (str, int, float, bool, type(None))


def _small(value: object) -> bool:
    """A scalar, or a short list of scalars: encoded whole, as _encode would."""
    if isinstance(value, _JSON_SCALARS):
        return True
    return (
        isinstance(value, list | tuple)
        and len(value) <= 16
        and all(isinstance(item, _JSON_SCALARS) for item in value)
    )


def _coalesced(pieces: Iterable[bytes], least: int = 64 * 1024) -> Iterator[bytes]:
    """`pieces` with each run of small ones joined (a small reply is one piece): one
    write each, not one per key."""
    run: list[bytes] = []
    size = 0
    for piece in pieces:
        if len(piece) >= least:
            if run:
                yield b"".join(run)
                run, size = [], 0
            yield piece
            continue
        run.append(piece)
        size += len(piece)
        if size >= least:
            yield b"".join(run)
            run, size = [], 0
    if run:
        yield b"".join(run)


def _encoded(reply: Mapping[str, Any]) -> Iterator[bytes]:
    yield from _encode(reply)
    yield b"\n"


def _encode(value: object) -> Iterator[bytes]:
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        # json.dumps turns other keys (int, None, ...) into strings its own way: such a
        # mapping (never a large one) is encoded whole below.
        yield b"{"
        for i, (key, item) in enumerate(value.items()):
            yield (("," if i else "") + json.dumps(key) + ":").encode()
            yield from _encode(item)
        yield b"}"
    elif isinstance(value, Streamed):
        head = "["
        for run in value.runs:
            if run:
                yield (head + run).encode()
                head = ","
        yield b"[]" if head == "[" else b"]"
    elif isinstance(value, Later):
        yield from _encode(value.value())
    elif isinstance(value, list | tuple) and len(value) > REPLY_PIECE_ITEMS:
        for start in range(0, len(value), REPLY_PIECE_ITEMS):
            text = json.dumps(value[start : start + REPLY_PIECE_ITEMS], separators=COMPACT)
            # "[a,b]" -> "[a,b" first, ",c,d" between, ",e]" last.
            head = "[" if start == 0 else ","
            tail = "]" if start + REPLY_PIECE_ITEMS >= len(value) else ""
            yield (head + text[1:-1] + tail).encode()
    else:
        yield json.dumps(value, separators=COMPACT).encode()


class BadRequest(ValueError):
    """A request of the wrong shape or types; str() is the one line its sender reads."""


MAX_REQUEST_BYTES = 4 * 1024 * 1024
"""The longest request line gbatchd reads (its newline not counted). A submit made of a
job file at its 1 MiB limit (spec.MAX_FILE_BYTES) with --wrap and --secret-env at
their 64 KiB and an exported environment at its 128 KiB takes under 3 MiB in plain
text (JSON writes a newline or a quote in two bytes; tests/unit/test_request_limits.py
builds one); only non-ASCII text written to the limits comes near 4 MiB (a \\u escape
is up to three times its UTF-8 bytes). The client refuses a larger request before sending it."""

MAX_NESTING = 64
"""The deepest JSON a request may nest (objects and lists). gbatch's own need 3
(submit -> spec -> env)."""

_TOO_DEEP = f"bad request: JSON nested too deeply (more than {MAX_NESTING} levels)"


def parse_request_line(line: bytes | bytearray) -> object:
    """The JSON value of one request line (its newline taken off), for decode_request.

    BadRequest when it is not UTF-8, not JSON, or nested deeper than MAX_NESTING.
    Python's C parser guards its own recursion (RecursionError, past ~1,000 levels:
    refused here like the rest); what it took is then measured, without recursion, when
    the line has enough brackets to nest that deep at all."""
    try:
        text = line.decode()
    except UnicodeDecodeError as err:
        raise BadRequest(
            f"bad request: not JSON (not UTF-8 at byte {err.start}). A request is one JSON "
            "object per line, in UTF-8"
        ) from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise BadRequest(_TOO_DEEP) from None
    except ValueError as err:
        raise BadRequest(
            f"bad request: not JSON ({err}). A request is one JSON object per line"
        ) from None
    if line.count(b"[") + line.count(b"{") > MAX_NESTING and _nested_deeper(data, MAX_NESTING):
        raise BadRequest(_TOO_DEEP)
    return data


def _nested_deeper(value: object, limit: int) -> bool:
    """Whether `value` (parsed JSON) holds lists and objects more than `limit` deep; one
    level at a time, so a deep value costs no recursion."""
    level = [value]
    for _ in range(limit + 1):
        containers = [item for item in level if type(item) is list or type(item) is dict]
        if not containers:
            return False
        level = []
        for container in containers:
            level.extend(container.values() if type(container) is dict else container)
    return True


def decode_request(data: object) -> Request:
    """The request a parsed JSON line asks for, its fields checked against their types.

    A field that is absent or null takes its default; one without a default must be
    there. Fields the request type does not name are ignored (an older client's, or
    a forged `uid`: identity is never read from a request). BadRequest names the
    field and what it should be: `bad request: jobs.states: expected a list of
    strings, got [1]`. Values (ranges, job states, specs) are the handlers' to check.
    """
    if not isinstance(data, dict):
        raise BadRequest(
            f"bad request: a request is one JSON object per line, not {_json_kind(data)}"
        )
    op = data.get("op")
    if not isinstance(op, str):
        got = _shown(op) if "op" in data else "nothing"
        raise BadRequest(f"bad request: op: expected the name of a request, got {got}")
    cls = REQUESTS.get(op)
    if cls is None:
        raise BadRequest(f"unknown request {op[:60]!r}")
    args: dict[str, Any] = {}
    for name, check in _field_checks(cls):
        value = data.get(name)
        if value is None:
            if check.required:
                got = "null" if name in data else "nothing"
                raise BadRequest(f"bad request: {op}.{name}: expected {check.what}, got {got}")
            continue
        try:
            args[name] = check.convert(value)
        except _Mismatch:
            got = f"{_json_kind(value)} (not shown)" if check.secret else _shown(value)
            raise BadRequest(
                f"bad request: {op}.{name}: expected {check.what}, got {got}"
            ) from None
    return cls(**args)


class _Mismatch(Exception):
    """A JSON value that is not of a field's type."""


class _FieldCheck:
    """How one field of a request type is decoded."""

    __slots__ = ("convert", "required", "secret", "what")

    def __init__(
        self, what: str, convert: Callable[[object], object], *, required: bool, secret: bool
    ) -> None:
        self.what = what  # the type in words: "a list of strings"
        self.convert = convert  # the field's value from a JSON value, or _Mismatch
        self.required = required
        self.secret = secret


# Built on a request type's first decode, from its type hints: only the daemon
# decodes, so a client never pays for get_type_hints.
_checks: dict[type[Any], tuple[tuple[str, _FieldCheck], ...]] = {}


def _field_checks(cls: type[Request]) -> tuple[tuple[str, _FieldCheck], ...]:
    checks = _checks.get(cls)
    if checks is None:
        hints = get_type_hints(cls)
        checks = _checks[cls] = tuple(
            (
                name,
                _FieldCheck(
                    *_converter(hints[name]),
                    required=name not in cls._defaults,
                    secret=name in cls._secret,
                ),
            )
            for name in cls._fields
        )
    return checks


_INT64 = range(-(2**63), 2**63)  # SQLite's integers: a larger id could never match


def _integer(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value not in _INT64:
        raise _Mismatch
    return value


def _number(value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not isfinite(value):
        raise _Mismatch
    return float(value)


def _string(value: object) -> str:
    if not isinstance(value, str):
        raise _Mismatch
    return value


def _boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Mismatch
    return value


def _anything(value: object) -> object:
    return value


# A scalar type: (one in words, several in words, its check).
_SCALARS: dict[object, tuple[str, str, Callable[[object], object]]] = {
    int: ("an integer", "integers", _integer),
    float: ("a number", "numbers", _number),
    str: ("a string", "strings", _string),
    bool: ("true or false", "booleans", _boolean),
    Any: ("any value", "values", _anything),
}


def _converter(hint: object) -> tuple[str, Callable[[object], object]]:
    """What a field of type `hint` expects, in words, and its check. Knows the types
    requests use: the scalars, `X | None`, tuple[X, ...] (a JSON list) and dict[str, X]
    (a JSON object), X a scalar. Another is a TypeError when the type is first decoded
    (tests/unit/test_requests.py decodes every request type)."""
    origin, args = get_origin(hint), get_args(hint)
    if hint in _SCALARS:
        what, _, check = _SCALARS[hint]
        return what, check
    if origin in (Union, UnionType) and len(args) == 2 and type(None) in args:
        # null never gets here: decode_request gives a null field its default
        (inner,) = (arg for arg in args if arg is not type(None))
        return _converter(inner)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis and args[0] in _SCALARS:
        _, items, check = _SCALARS[args[0]]

        def convert_list(value: object) -> tuple[object, ...]:
            if not isinstance(value, list | tuple):  # a tuple: encode_request's, not JSON
                raise _Mismatch
            return tuple(check(item) for item in value)

        return f"a list of {items}", convert_list
    if origin is dict and len(args) == 2 and args[0] is str and args[1] in _SCALARS:
        _, values, check = _SCALARS[args[1]]

        def convert_object(value: object) -> dict[str, object]:
            if not isinstance(value, dict):
                raise _Mismatch
            return {key: check(item) for key, item in value.items()}

        return "an object" if args[1] is Any else f"an object of {values}", convert_object
    raise TypeError(f"a request field of type {hint!r} has no JSON decoding")


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _shown(value: object, limit: int = 60) -> str:
    """`value` as JSON, cut to `limit` characters: a reply stays one short line."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (RecursionError, ValueError):  # nested near the parser's own limit
        return _json_kind(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
