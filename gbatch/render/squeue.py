"""squeue's output: Slurm's `-o` letters, `-O` fields and `-S` sort keys, and `--json`.

The PENDING tasks of an array are folded into one `N_[4-15]` row. The everyday listing
(default format and sort) is drawn without the model by squeue_brief, which prints the
same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from gbatch.core.arrays import pos_of
from gbatch.core.constants import (
    IMPLICIT_PARTITION,
    SQUEUE_DEFAULT_FORMAT,
    SQUEUE_DEFAULT_SORT,
    SQUEUE_FIELD_WIDTH,
    SQUEUE_FIELDS,
    SQUEUE_SORT_KEYS,
)
from gbatch.core.constants import NORMAL_QOS as NORMAL
from gbatch.core.jobids import collapse_pending, job_label
from gbatch.core.labels import memory_text, printable
from gbatch.core.model import (
    Job,
    JobState,
)
from gbatch.core.shares import job_share_text
from gbatch.core.timefmt import format_duration, format_timestamp
from gbatch.render.cells import (
    FormatError,
    as_text,
    checked_width,
    command_line,
    dependency_text,
    elapsed_seconds,
    fit,
    format_items,
    jobs_json,
    node_count,
    nodelist_or_reason,
    nodelist_text,
    partition_text,
    reason_text,
)

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any


SQUEUE_START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"  # squeue --start


def _array_task(job: Job) -> str:
    return "N/A" if job.spec.array_task is None else str(job.spec.array_task)


@dataclass(frozen=True)
class SqueueView:
    """What a squeue cell may read beside its job: the daemon's clock and expected starts.

    `starts` maps a pending job's id to its expected start in epoch seconds (ListJobs'
    `starts`).
    """

    now: float
    starts: Mapping[int, float]


@dataclass(frozen=True)
class _Column:
    header: str
    value: Callable[[Job, SqueueView], str]


def _squeue_time(job: Job, view: SqueueView) -> str:
    return format_duration(elapsed_seconds(job, view.now))


def _squeue_stamp(epoch: float | None) -> str:
    return "N/A" if epoch is None else format_timestamp(epoch)


def _start(job: Job, view: SqueueView, job_id: int | None = None) -> float | None:
    """When the job started, or for a pending one when it is expected to (None: not
    known). A requeued job's old start is not its next one. `job_id`: a task's a
    record stands for (the record's own by default)."""
    if job.state is JobState.PENDING:
        return view.starts.get(job.id if job_id is None else job_id)
    return job.start_time


def _end(job: Job, view: SqueueView, job_id: int | None = None) -> float | None:
    """When the job ended, or is expected to: start + time limit (as Slurm's %e)."""
    if job.state is not JobState.PENDING and job.end_time is not None:
        return job.end_time
    start = _start(job, view, job_id)
    if start is None or job.time_limit is None:
        return None
    return start + job.time_limit


def _time_left(job: Job, view: SqueueView) -> float | None:
    """Slurm's %L: the time limit less the time used (the whole limit while pending)."""
    if job.time_limit is None:
        return None
    return max(0, job.time_limit - elapsed_seconds(job, view.now))


def _tres_per_node(job: Job) -> str:
    spec = job.spec
    if not spec.gpus:
        return "N/A"
    if spec.gpu_mem_mb is not None:  # a share of one GPU (gbatch/core/shares.py)
        return f"gres/{job_share_text(spec.gpu_mem_mb, spec.gpu_shards, spec.gpu_type)}"
    return f"gres/gpu:{spec.gpu_type}:{spec.gpus}" if spec.gpu_type else f"gres/gpu:{spec.gpus}"


def _comment(job: Job) -> str:
    return printable(job.spec.comment) if job.spec.comment is not None else "(null)"


def _workdir(job: Job) -> str:
    return printable(job.spec.workdir or job.spec.submit_dir or "(null)")


_SQUEUE_COLUMNS: Mapping[str, _Column] = {
    # %i is N_K for an array task (and a folded row's N_[4-15]), %A the task's own id.
    "i": _Column("JOBID", lambda j, _: job_label(j)),
    "A": _Column("JOBID", lambda j, _: str(j.id)),
    "F": _Column("ARRAY_JOB_ID", lambda j, _: str(j.array_job_id or j.id)),
    "K": _Column("ARRAY_TASK_ID", lambda j, _: _array_task(j)),
    "P": _Column("PARTITION", lambda j, _: partition_text(j)),
    "j": _Column("NAME", lambda j, _: printable(j.spec.name)),
    "u": _Column("USER", lambda j, _: printable(j.user)),
    "U": _Column("UID", lambda j, _: str(j.uid)),
    "t": _Column("ST", lambda j, _: j.state.code),
    "T": _Column("STATE", lambda j, _: j.state.value),
    "M": _Column("TIME", _squeue_time),
    "l": _Column("TIME_LIMIT", lambda j, _: format_duration(j.time_limit)),
    "L": _Column("TIME_LEFT", lambda j, v: format_duration(_time_left(j, v))),
    "D": _Column("NODES", lambda j, _: str(node_count(j))),
    "C": _Column("CPUS", lambda j, _: str(j.spec.cpus_counted)),
    "m": _Column("MIN_MEMORY", lambda j, _: memory_text(j.spec.memory_mb)),
    "R": _Column("NODELIST(REASON)", lambda j, _: nodelist_or_reason(j)),
    "N": _Column("NODELIST", lambda j, _: nodelist_text(j)),
    # As Slurm 23.02 on: `gres/gpu:a100:2` (22.05 wrote `gres:gpu:a100:2`).
    "b": _Column("TRES_PER_NODE", lambda j, _: _tres_per_node(j)),
    "f": _Column("FEATURES", lambda j, _: printable(j.spec.constraint or "(null)")),
    "V": _Column("SUBMIT_TIME", lambda j, _: _squeue_stamp(j.submit_time)),
    "S": _Column("START_TIME", lambda j, v: _squeue_stamp(_start(j, v))),
    "e": _Column("END_TIME", lambda j, v: _squeue_stamp(_end(j, v))),
    "Q": _Column("PRIORITY", lambda j, _: str(j.spec.effective_priority)),
    "p": _Column("PRIORITY", lambda j, _: str(j.spec.effective_priority)),
    "r": _Column("REASON", lambda j, _: reason_text(j)),
    "q": _Column("QOS", lambda j, _: printable(j.spec.qos or NORMAL)),
    "k": _Column("COMMENT", lambda j, _: _comment(j)),
    "E": _Column("DEPENDENCY", lambda j, _: dependency_text(j) or "(null)"),
    "o": _Column("COMMAND", lambda j, _: printable(command_line(j.spec.command))),
    "Z": _Column("WORK_DIR", lambda j, _: _workdir(j)),
    # The nodes a pending job is expected to start on: gbatch keeps no such list.
    "Y": _Column("SCHEDNODES", lambda j, _: "(null)"),
    "v": _Column("RESERVATION", lambda j, _: printable(j.spec.reservation or "(null)")),
}


_SQUEUE_FIELDS = SQUEUE_FIELDS  # squeue -O/--Format's names -> the `-o` letter


_FIELD_WIDTH = SQUEUE_FIELD_WIDTH  # -O's default column width (Slurm's)


@dataclass(frozen=True)
class _Spec:
    """One `%[.][width]<letter>` of a squeue format."""

    letter: str
    width: int  # 0: as wide as the value
    right: bool


_SPEC = re.compile(r"%(\.?)([0-9]*)(.?)", re.DOTALL)


def _parse_squeue_format(fmt: str) -> list[str | _Spec]:
    """Split a squeue `-o` format into literal text and field specs (`%%` is a '%')."""
    return [
        item
        if isinstance(item, str)
        else _Spec(item[2], checked_width(item[1], item[3]), bool(item[0]))
        for item in format_items(fmt, _SPEC, _SQUEUE_COLUMNS, "squeue")
    ]


def _squeue_line(
    parts: Sequence[str | _Spec], job: Job | None, view: SqueueView, label: str | None = None
) -> str:
    """One squeue line; `job` None renders the header (as squeue's print.c does).
    `label`: the row's JOBID (%i) when it stands for several tasks (`N_[4-15]`)."""
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        column = _SQUEUE_COLUMNS[part.letter]
        if job is None:
            text = column.header
        elif part.letter == "i" and label is not None:
            text = label
        elif part.letter == "K" and label is not None and label.endswith("]"):
            text = label[label.index("[") :]  # Slurm's %K of a folded row: [4-15]
        else:
            text = column.value(job, view)
        out.append(fit(text, part.width, part.right))
    return "".join(out)


def squeue_format_from_fields(fields: str) -> str:
    """Turn a squeue -O/--Format list (`JobID,Name:30,State:.10`) into its `-o` format.

    Slurm's long names in any case, each `name[:[.][width]]`, 20 characters wide and
    left-justified unless said otherwise, no space between columns (as Slurm). Raises
    FormatError naming an unknown field or a bad width.
    """
    out = []
    for raw in fields.split(","):
        name, colon, size = raw.strip().partition(":")
        letter = _SQUEUE_FIELDS.get(name.lower())
        if letter is None:
            known = ",".join(_SQUEUE_FIELD_NAMES)
            raise FormatError(f"unknown field '{raw.strip()}'; fields: {known}")
        right = size.startswith(".")
        digits = size[1:] if right else size
        if colon and digits and not digits.isdecimal():  # what int() reads (not '²')
            raise FormatError(f"'{raw.strip()}': a width is a number, e.g. {name}:30")
        width = checked_width(digits, raw) if digits else _FIELD_WIDTH
        out.append(f"%{'.' if right else ''}{width}{letter}")
    return "".join(out)


_SQUEUE_FIELD_NAMES = (
    "JobID",
    "Partition",
    "QOS",
    "Name",
    "UserName",
    "UserId",
    "State",
    "StateCompact",
    "TimeUsed",
    "TimeLimit",
    "TimeLeft",
    "NumNodes",
    "NodeList",
    "Reason",
    "ReasonList",
    "tres-per-node",
    "Gres",
    "NumCPUs",
    "MinMemory",
    "SubmitTime",
    "StartTime",
    "EndTime",
    "Priority",
    "PriorityLong",
    "Command",
    "WorkDir",
    "Comment",
    "Dependency",
    "SchedNodes",
    "Feature",
    "Reservation",
)


assert {n.lower() for n in _SQUEUE_FIELD_NAMES} == set(_SQUEUE_FIELDS)


def squeue_letters(fmt: str | None) -> frozenset[str]:
    """The field letters a squeue `-o` format uses (FormatError as format_squeue)."""
    parts = _parse_squeue_format(SQUEUE_DEFAULT_FORMAT if fmt is None else fmt)
    return frozenset(p.letter for p in parts if isinstance(p, _Spec))


def format_squeue(
    jobs: Sequence[Job],
    now: float,
    *,
    fmt: str | None = None,
    header: bool = True,
    starts: Mapping[int, float] | None = None,
    expand_arrays: bool = False,
) -> str:
    """Render jobs as `squeue` does, one line per job in the order given.

    The PENDING tasks of an array fold into one row `N_[4-15]` at its first task's place,
    as Slurm's default, unless `expand_arrays` (squeue -r). Array tasks read `N_K`.

    `fmt` is squeue's `-o` syntax, `%[.][width]<letter>` among literal text: `.`
    right-justifies, a width pads and also cuts longer values, no width prints the
    value whole. Defaults to Slurm's own default format. Raises FormatError for a
    letter not supported (the message lists those that are). `starts`: pending jobs'
    expected starts (%S, %e); a pending job without one reads N/A.
    """
    parts = _parse_squeue_format(SQUEUE_DEFAULT_FORMAT if fmt is None else fmt)
    view = SqueueView(now, starts or {})
    lines = [_squeue_line(parts, None, view)] if header else []
    rows: Iterable[tuple[Job, str | None, Task | None]]
    if expand_arrays:
        rows = expanded_rows(jobs)
    else:
        rows = ((job, label, None) for job, label in collapse_pending(jobs))
    lines.extend(_squeue_rows(parts, rows, view))
    return as_text(lines)


Task = tuple[int, int]
"""One of the tasks a record stands for (Job.array_more): its job id and its index."""


def expanded_rows(jobs: Iterable[Job]) -> Iterator[tuple[Job, str | None, Task | None]]:
    """squeue -r's rows: each job, and after a record each task it stands for.

    A task's row is its record with the task's (id, index) and `N_K` label beside it:
    the cells that differ by task (%i, %A, %K, %S, %e) read those, the others the
    record's, so no Job is made per task (core.arrays.expand_tasks' Jobs print alike).
    """
    for job in jobs:
        if not job.array_more:
            yield job, None, None
            continue
        array = job.array_job_id
        assert array is not None
        yield job, f"{array}_{job.spec.array_task}", None  # its own task: its own cells
        for first, last in job.array_more:
            for index in range(first, last + 1):
                yield job, f"{array}_{index}", (array + (pos_of(job.spec, index) or 0), index)


# The letters whose cell differs between the tasks of one record (expanded_rows).
_TASK_CELLS: Mapping[str, Callable[[Job, Task, SqueueView], str]] = {
    "A": lambda j, task, _: str(task[0]),
    "K": lambda j, task, _: str(task[1]),
    "S": lambda j, task, v: _squeue_stamp(_start(j, v, task[0])),
    "e": lambda j, task, v: _squeue_stamp(_end(j, v, task[0])),
}


# What a squeue cell's text depends on besides `now` and the expected starts, for the
# letters whose cells repeat down a long queue: the same key, the same text. Rows are
# drawn with a memo per cell, so 10,000 jobs of a few specs, users and states format
# each such cell a few times (faster than _squeue_line's for each row and column).
_PENDING = JobState.PENDING  # a global: Enum member access through the class is slow


_SPEC_CELLS = frozenset("jblQpCmkoZv")  # read job.spec alone (l: its time_limit)


# Keys by id(): every job and spec lives until the rows are drawn, and neither a frozen
# dataclass's nor an Enum's __hash__ is cheap (both are Python code).
_CELL_KEYS: Mapping[str, Callable[[Job], object]] = {
    **dict.fromkeys(_SPEC_CELLS, lambda j: id(j.spec)),
    # The partition: `gpu,uni` while a job of -p gpu,uni waits (issue 34).
    "P": lambda j: (id(j.spec), j.state is _PENDING),
    "u": lambda j: j.user,
    "U": lambda j: j.uid,
    "t": lambda j: id(j.state),
    "T": lambda j: id(j.state),
    # A job across nodes (issue 32) by its peers too; most jobs' are () and key alike.
    "D": lambda j: (j.node is None, j.spec.nodes, len(j.peers)),
    "Y": lambda j: None,
    "r": lambda j: (id(j.state), j.held, j.reason),
    "R": lambda j: (id(j.state), j.held, j.reason, j.node, j.peers),
    "N": lambda j: (j.node, j.peers),
    # elapsed_seconds: 0 while pending or never started, whatever the stored times.
    "M": lambda j: (
        None if j.state is _PENDING or j.start_time is None else (j.start_time, j.end_time)
    ),
}


def _squeue_rows(
    parts: Sequence[str | _Spec],
    rows: Iterable[tuple[Job, str | None, Task | None]],
    view: SqueueView,
) -> list[str]:
    """_squeue_line of each (job, label, task), the cells of _CELL_KEYS' letters memoized.

    `task`: one of the tasks the record `job` stands for (expanded_rows), whose own
    cells are _TASK_CELLS'."""
    cells: list[tuple[str, _Spec | None, Callable[[Job], object] | None, dict[object, str]]] = [
        (part, None, None, {})
        if isinstance(part, str)
        else (part.letter, part, _CELL_KEYS.get(part.letter), {})
        for part in parts
    ]
    out = []
    for job, label, task in rows:
        line = []
        for text, part, key_of, memo in cells:
            if part is None:
                line.append(text)
            elif task is not None and text in _TASK_CELLS:
                line.append(fit(_TASK_CELLS[text](job, task, view), part.width, part.right))
            elif text == "i" and label is not None:
                line.append(fit(label, part.width, part.right))
            elif text == "K" and label is not None and label.endswith("]"):
                line.append(fit(label[label.index("[") :], part.width, part.right))
            elif key_of is None:
                line.append(fit(_SQUEUE_COLUMNS[text].value(job, view), part.width, part.right))
            else:
                key = key_of(job)
                cell = memo.get(key)
                if cell is None:
                    value = _SQUEUE_COLUMNS[text].value(job, view)
                    cell = memo[key] = fit(value, part.width, part.right)
                line.append(cell)
        out.append("".join(line))
    return out


# squeue -S: Slurm's sort keys (src/squeue/sort.c) -> a job's sort value. Unknown values
# (no limit, no end) sort after known ones, as the largest.
_INF = float("inf")


# Slurm waits this long past now for a job whose start is not known (sort.c).
_UNKNOWN_START_AFTER = 100


def _opt(value: float | None) -> float:
    return _INF if value is None else value


def _start_sort(job: Job, view: SqueueView) -> float:
    """Slurm's start-time sort: an unknown start is `now + 100`, a pending job's start
    that has passed is `now`."""
    start = _start(job, view)
    if start is None:
        return view.now + _UNKNOWN_START_AFTER
    if job.state is JobState.PENDING:
        return max(start, view.now)
    return start


def _priority_sort(job: Job) -> tuple[bool, int]:
    """A held job's priority is 0 in Slurm, below every other: held sorts lowest."""
    return (not job.held, job.spec.effective_priority)


def _id_sort(job: Job) -> tuple[int, int]:
    """Slurm's: an array's task by its array's id, then task index."""
    if job.array_job_id is None:
        return (job.id, -1)
    return (job.array_job_id, job.spec.array_task or 0)


# Any: each key's values are alike (all ints, all strs), which a sort needs.
_SORT_KEYS: Mapping[str, Callable[[Job, SqueueView], Any]] = {
    "i": lambda j, _: _id_sort(j),
    "j": lambda j, _: j.spec.name,
    "u": lambda j, _: j.user,
    "U": lambda j, _: j.uid,
    # Slurm compares the state names as text: t by code (CF CG PD R), T by name.
    "t": lambda j, _: j.state.code,
    "T": lambda j, _: j.state.value,
    "P": lambda j, _: j.spec.partition or IMPLICIT_PARTITION,
    "p": lambda j, _: _priority_sort(j),
    "Q": lambda j, _: _priority_sort(j),
    "S": _start_sort,
    "V": lambda j, _: j.submit_time,
    "e": lambda j, v: _opt(_end(j, v)),
    "l": lambda j, _: _opt(j.time_limit),
    "L": lambda j, v: _opt(_time_left(j, v)),
    "M": lambda j, v: elapsed_seconds(j, v.now),
    "D": lambda j, _: node_count(j),
    "N": lambda j, _: nodelist_text(j),
    "B": lambda j, _: j.node or "",  # batch host: the job's first node
    "C": lambda j, _: j.spec.cpus_counted,
    "m": lambda j, _: j.spec.memory_mb or 0,
}


_SORT_TOKEN = re.compile(r"(?P<sign>[+-]?)%?(?P<key>cluster|[^,+\-%\s])", re.IGNORECASE)


def parse_squeue_sort(text: str) -> list[tuple[str, bool]]:
    """Read squeue's -S list into (letter, descending) pairs, as Slurm does.

    Each letter is a key (`-t,i`, `ti` and `+P,-p` all work), commas only separate, `-`
    before a letter makes it descending and `+` ascending; a `%` before a letter (as in
    -o) is allowed. `cluster` is accepted and does nothing (gbatch is one cluster).
    Raises FormatError naming the first key that is not supported, or for a list with
    no key.
    """
    keys = []
    position = 0
    while position < len(text):
        if text[position] in ", ":
            position += 1
            continue
        match = _SORT_TOKEN.match(text, position)
        key = match["key"] if match else ""
        if match is None or (key not in _SORT_KEYS and key.lower() != "cluster"):
            shown = match.group(0) if match else text[position:].split(",")[0]
            raise FormatError(
                f"unknown sort key '{shown}'. Use keys among {SQUEUE_SORT_KEYS}, "
                "'-' before one for descending, e.g. -S -t,i"
            )
        position = match.end()
        if key.lower() != "cluster":
            keys.append((key, match["sign"] == "-"))
    if not keys:
        raise FormatError(f"no sort key in '{text}'. Give keys such as -S {SQUEUE_DEFAULT_SORT}")
    return keys


def sort_squeue(
    jobs: Sequence[Job],
    keys: Sequence[tuple[str, bool]],
    now: float,
    starts: Mapping[int, float] | None = None,
) -> list[Job]:
    """`jobs` ordered by `keys` (parse_squeue_sort's), the first key first.

    Ties keep the order given (stable sorts, last key first).
    """
    view = SqueueView(now, starts or {})
    ordered = list(jobs)
    for letter, descending in reversed(keys):
        value = _SORT_KEYS[letter]
        ordered.sort(key=lambda j: value(j, view), reverse=descending)
    return ordered


def format_squeue_json(jobs: Sequence[Job], now: float) -> str:
    """`{"jobs": [...]}`, one object per job; times are epoch seconds, limits seconds."""
    return jobs_json(jobs, now)
