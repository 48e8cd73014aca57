"""Listings' encodings of jobs, each with its decoder back into Jobs.

The brief records a listing sends (remembered while a job's row is unchanged), the job
table the TUI reads, and the columns squeue and the TUI's queue read (ListJobs' `table`
and `columns`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace  # loaded by gbatch.core.model already
from typing import Any, NamedTuple

from gbatch.core.labels import format_spans, merge_spans
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.protocol.codec import brief_spec, brief_values, job_to_wire
from gbatch.protocol.replies import COMPACT, Streamed


class BriefRecord(NamedTuple):
    """A listed job's brief record as BriefRecords remembers it."""

    changed: int  # the row's change number (the store's change feed) it was made from
    job: Job
    text: str  # json.dumps(job_to_wire(job, brief=True)) with COMPACT separators


class BriefRecords:
    """The JSON text of listings' brief job records, remembered per job while it is unchanged.

    Each record (job_to_wire(job, brief=True)) is kept with the change number of the row
    it was made from: every write of a jobs row gives it a new, higher number (the
    store's change feed), so a job whose number is the same is unchanged, and a queue of
    10,000 mostly unchanged jobs is listed again reading two numbers a row, without its
    Jobs built, nor their records made and encoded. Shared by handler threads: a race
    makes a record twice, never a wrong one.
    """

    def __init__(self, most: int = 20_000) -> None:
        # Jobs remembered (each costs memory): once full, all are forgotten at the next
        # listing, and a listing longer than this makes the rest without keeping them.
        self.most = most
        self._made: dict[int, BriefRecord] = {}

    def known(self) -> Callable[[int, int], BriefRecord | None]:
        """For one listing, a lookup of the record remembered for (job id, change number).

        The lookup is Store.job_pages' `known`; it answers None for a record not
        remembered. When the records have reached `most`, all are forgotten first.
        """
        made = self._made
        if len(made) >= self.most:
            made = self._made = {}  # replaced, not cleared: a listing under way keeps its

        def find(job_id: int, changed: int) -> BriefRecord | None:
            record = made.get(job_id)
            return record if record is not None and record.changed == changed else None

        return find

    def text(self, job: Job, changed: int | None, *, keep: bool = True) -> str:
        """The brief record's text of `job`, read from a row of change number `changed`.

        `changed` is None for what is not a row, an array tail's record, which is not
        remembered. `keep`: remember it (a listing larger than the bound keeps none: sacct
        -a of 1,000,000 would hold 20,000 records of finished jobs for nothing).
        """
        text = json.dumps(job_to_wire(job, brief=True), separators=COMPACT)
        made = self._made
        if keep and changed is not None and len(made) < self.most:
            made[job.id] = BriefRecord(changed, job, text)
        return text


def jobs_to_table(jobs: Sequence[Job]) -> dict[str, Any]:
    """Brief jobs as a table, for a client that lists thousands every second (the TUI).

    `{"specs": [brief spec, ...], "rows": [[spec index, id, uid, user, state, ...], ...]}`:
    job_to_wire's fields in its order, the spec replaced by its index; then, for an
    array task, its array's id and task index, else two nulls (see table_labels); then,
    for a record standing for more pending tasks, its array_more. Jobs alike in their
    brief spec (an array's tasks) share one entry of `specs`, and a row is a list, not a
    mapping: a third of job_to_wire's bytes to encode and parse.
    """
    specs: list[dict[str, Any]] = []
    spec_index: dict[tuple[Any, ...], int] = {}
    rows = []
    for job in jobs:
        spec = job.spec
        key = brief_values(spec)
        at = spec_index.get(key)
        if at is None:
            at = spec_index[key] = len(specs)
            specs.append(brief_spec(spec))
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
                *_more_and_peers(job),
            ]
        )
    return {"specs": specs, "rows": rows}


# Where jobs_to_table's rows carry an array task's array id and task index (a row of
# an older daemon ends before).
_TABLE_ARRAY_AT = 17


def _more_and_peers(job: Job) -> list[list[Any]]:
    """A row's last cells: the array record's array_more, then a job's peers (issue 32).

    Each only when set, array_more (empty) when peers follow it."""
    if not job.peers:
        return [[list(span) for span in job.array_more]] if job.array_more else []
    return [
        [list(span) for span in job.array_more],
        [[name, list(gpus)] for name, gpus in job.peers],
    ]


def table_labels(table: Mapping[str, Any]) -> dict[int, str]:
    """The ids of a job table's array tasks as Slurm shows them, `N_K`, by job id.

    Kept beside the jobs, not in their specs: an array's tasks share one spec (and its
    cells, formatted once) in a view of thousands of them. A record standing for more
    pending tasks reads `N_[K-M]`.
    """
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
    """One row of jobs_to_table's (its spec already decoded)."""
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
    return _job(
        job_id,
        uid,
        user,
        spec,
        _STATES[state],
        submit_time,
        reason,
        held,
        start_time,
        end_time,
        node,
        tuple(gpus),
        tuple(gpu_uuids),
        attempt,
        exit_code,
        exit_signal,
        _STATES[stop_state] if stop_state else None,
        tuple((a, b) for a, b in extra[2]) if len(extra) > 2 else (),
        tuple((str(name), tuple(gpus)) for name, gpus in extra[3]) if len(extra) > 3 else (),
    )


def _job(
    job_id: int,
    uid: int,
    user: str,
    spec: JobSpec,
    state: JobState,
    submit_time: float,
    reason: str,
    held: bool,
    start_time: float | None,
    end_time: float | None,
    node: str | None,
    gpus: tuple[int, ...],
    gpu_uuids: tuple[str, ...],
    attempt: int,
    exit_code: int | None,
    exit_signal: int | None,
    stop_state: JobState | None,
    array_more: tuple[tuple[int, int], ...],
    peers: tuple[tuple[str, tuple[int, ...]], ...] = (),
) -> Job:
    """The Job of these fields (a decoded row's), secret_values and submit_env empty:
    they are never on the wire.

    Built without Job's __init__: a frozen dataclass sets each of its fields through
    object.__setattr__, half of what decoding 10,000 rows costs the TUI at each read.
    The fields go straight into the new object's __dict__ instead, which gives an
    equal Job (tests/unit/test_wire.py checks every field against Job(...)).
    """
    job: Job = _new_object(Job)
    job.__dict__.update(
        id=job_id,
        uid=uid,
        user=user,
        spec=spec,
        state=state,
        submit_time=submit_time,
        reason=reason,
        held=held,
        start_time=start_time,
        end_time=end_time,
        node=node,
        gpus=gpus,
        gpu_uuids=gpu_uuids,
        attempt=attempt,
        exit_code=exit_code,
        exit_signal=exit_signal,
        stop_state=stop_state,
        secret_values=(),
        submit_env=(),
        array_more=array_more,
        peers=peers,
    )
    return job


def jobs_from_table(table: Mapping[str, Any]) -> list[Job]:
    """jobs_to_table's jobs, in its order, each as job_from_wire gives it from the record.

    The record is the brief one. Each shared spec is decoded once, and an array task's
    (with its array_task and array_pos, from the row's array id and task index) once per
    task.
    """
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
# pending tasks (Job.array_more). "peers", sparse too and sent only when a row has any:
# [[row, [node, ...]], ...], the nodes after its first of a job across nodes (Job.peers'
# names; a listing sends no GPUs): a job on one node costs the listing nothing more.
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
    """Listing rows as columns, brief specs alike sent once.

    The rows hold `_ROW_COLUMNS`, then the peers as the jobs table stores them ('' or
    JSON [[node, [gpu, ...]], ...]), then array_more (the head's Store.listing_rows),
    each row's spec cell a key that `spec_of` decodes (called once per distinct key).
    """
    columns = ListingColumns(spec_of)
    columns.add(rows)
    return columns.made()


class ListingColumns:
    """listing_columns' columns made a page of rows at a time.

    With `as_text`, each column is kept as its JSON text (a Streamed value, the text
    encode_reply writes for the list) and the rows are let go page by page: a listing of
    1,000,000 jobs holds a short text a row instead of a dozen objects (issue 16).
    `most_keys`: spec keys whose entry is remembered at once (a sweep's specs are each
    their own); past it, all are forgotten. 0: no bound.
    """

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
        self._peers: list[list[Any]] = []
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
                brief = brief_values(spec)
                at = self._brief_index.get(brief)
                if at is None:
                    at = self._brief_index[brief] = len(self._specs)
                    self._specs.append(brief_spec(spec))
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
            [self._count + at, [list(span) for span in row[_MORE_AT]]]
            for at, row in enumerate(rows)
            if row[_MORE_AT]
        )
        self._peers.extend(
            [self._count + at, [name for name, _ in json.loads(row[_PEERS_AT])]]
            for at, row in enumerate(rows)
            if row[_PEERS_AT]
        )
        self._count += len(rows)

    def made(self) -> dict[str, Any]:
        """The columns, in listing_columns' order (taken once when `as_text`)."""
        made = {name: self._column(name) for name in _ROW_COLUMNS}
        made["specs"] = self._specs
        made["array"] = self._column("array")
        made["task"] = self._column("task")
        made["more"] = self._more
        if self._peers:
            made["peers"] = self._peers
        return made

    def _column(self, name: str) -> Any:
        values = self._columns[name]
        return Streamed(iter(values)) if self._as_text else values


class KeptColumns:
    """squeue's listings as columns (ListingColumns' text), kept while the store is unchanged.

    Keyed by what narrows a listing and by the store's settled write count
    (Store.settled): a listing asked for again while no write has been made since it
    was read is the text read then, sent without a row read, decoded or encoded again
    (issue 35: `squeue` at 1,000 pending spent ~3 of its ~4 ms round trip there). Every
    value is kept as JSON text, a Streamed of one or more runs: the same bytes on the
    wire as the listing made afresh, and nothing a caller in-process could change.
    Listings of at most `most_rows` rows are kept (memory), the `most` latest of them.
    Shared by handler threads: a race reads a listing twice, never a wrong one.
    """

    def __init__(self, most: int = 4, most_rows: int = 10_000) -> None:
        self.most = most
        self.most_rows = most_rows
        self._kept: dict[tuple[Any, ...], dict[str, list[str]]] = {}

    def get(self, key: tuple[Any, ...]) -> dict[str, Any] | None:
        """The columns kept for `key` (its settled write count last), made afresh."""
        kept = self._kept.get(key)
        if kept is None:
            return None
        return {name: Streamed(iter(runs)) for name, runs in kept.items()}

    def keep(self, key: tuple[Any, ...], made: dict[str, Any], rows: int) -> dict[str, Any]:
        """`made` (ListingColumns.made()'s) to send, kept for `key` if it is short enough."""
        if rows > self.most_rows:
            return made
        texts: dict[str, list[str]] = {}
        for name, value in made.items():
            if isinstance(value, Streamed):
                texts[name] = list(value.runs)
            else:  # "[a,b]" -> "a,b": a Streamed's run
                texts[name] = [json.dumps(value, separators=COMPACT)[1:-1]]
        kept = dict(self._kept)  # replaced, not changed: a reader may be looking
        if len(kept) >= self.most:
            kept.pop(next(iter(kept)))  # the oldest
        kept[key] = texts
        self._kept = kept
        return {name: Streamed(iter(runs)) for name, runs in texts.items()}


# Where a listing row holds the peers' text and array_more, after _ROW_COLUMNS.
_PEERS_AT = len(_ROW_COLUMNS)
_MORE_AT = _PEERS_AT + 1


def peers_text(peers: Sequence[tuple[str, Sequence[int]]]) -> str:
    """Job.peers as the jobs table's `peers` column holds them ('' for none)."""
    if not peers:
        return ""
    return json.dumps([[name, list(gpus)] for name, gpus in peers], separators=COMPACT)


def listing_row(job: Job, spec: object) -> tuple[object, ...]:
    """A Job as one of listing_columns' rows, `spec` in its spec cell.

    The head's Store.listing_rows selects the same columns from the jobs table.
    """
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
        peers_text(job.peers),
        job.array_more,
    )


def jobs_to_columns(jobs: Sequence[Job]) -> dict[str, Any]:
    """listing_columns of Jobs already built (a listing the narrow query cannot serve)."""
    specs = {id(job.spec): job.spec for job in jobs}
    rows = [listing_row(job, id(job.spec)) for job in jobs]
    return listing_columns(rows, specs.__getitem__)


def jobs_from_columns(columns: Mapping[str, Any]) -> list[Job]:
    """listing_columns' rows as Jobs, in order, for squeue's cells.

    Each shared spec is decoded once (an array task's once per task). The fields a
    listing does not send (gpus, gpu_uuids, attempt, exit code and signal, stop_state)
    are left empty.
    """
    specs = [JobSpec.from_dict(spec) for spec in columns["specs"]]
    tasks: dict[tuple[int, int, int], JobSpec] = {}
    more = {at: tuple((a, b) for a, b in spans) for at, spans in columns["more"]}
    peers = {at: tuple((str(name), ()) for name in names) for at, names in columns.get("peers", ())}
    jobs = []
    for at, row in enumerate(zip(*(columns[name] for name in LISTING_COLUMNS), strict=True)):
        job_id, index, array, task = row[0], row[3], row[-2], row[-1]
        if array is not None:
            spec = _task_spec(tasks, specs, index, task, job_id - array)
        else:
            spec = specs[index]
        jobs.append(job_from_listing(row, spec, more.get(at, ()), peers.get(at, ())))
    return jobs


# A listing_columns row read across its columns: the row's values, then the array
# task's array id and task index (nulls for other jobs).
LISTING_COLUMNS = (*_ROW_COLUMNS, "array", "task")


def job_from_listing(
    row: Sequence[Any],
    spec: JobSpec,
    array_more: tuple[tuple[int, int], ...],
    peers: tuple[tuple[str, tuple[int, ...]], ...] = (),
) -> Job:
    """The Job of one row of listing_columns', built as job_from_row builds one.

    The row's values are in LISTING_COLUMNS order, its spec already decoded; `peers` the
    nodes after its first, with no GPUs. The fields a listing does not send (gpus,
    gpu_uuids, attempt, exit code and signal, stop_state) are left empty.
    """
    job_id, uid, user, _, state, reason, held, submit, start, end, node = row[:11]
    return _job(
        job_id,
        uid,
        user,
        spec,
        _STATES[state],
        submit,
        reason,
        held,
        start,
        end,
        node,
        (),
        (),
        0,
        None,
        None,
        None,
        array_more,
        peers,
    )


_STATES = {state.value: state for state in JobState}
_new_object = object.__new__
# What _job's shortcut relies on: a Job keeps its fields in its __dict__ and
# its __init__ does nothing but set them.
assert not hasattr(Job, "__slots__") and not hasattr(Job, "__post_init__")
