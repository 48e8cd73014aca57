"""Text and JSON renderings of jobs and nodes, in the shapes Slurm's users script against.

squeue (`-o` letters), sacct (`--format` fields, `-P`), sinfo (node-oriented) and
`scontrol show job` are copied from Slurm where Slurm has an answer: column headers,
widths, justification, truncation, `N:S` exit codes, `(Reason)` for pending jobs,
`Unknown`/`N/A`/`(null)` for missing values. Every function is pure: the clock is
the `now` parameter, and user names arrive inside the jobs, never looked up here.

Text outputs end with a newline when they hold any line, so a caller writes them as is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gbatch.core.arrays import expand_tasks
from gbatch.core.jobids import collapse_pending, job_label
from gbatch.core.model import (
    ALLOCATED_STATES,
    FINAL_STATES,
    IMPLICIT_PARTITION,
    Event,
    Job,
    JobSpec,
    JobState,
    NodeInfo,
    NodeState,
    PartitionInfo,
)
from gbatch.core.timefmt import format_duration, format_elapsed_fixed, format_timestamp

if TYPE_CHECKING:  # squeue imports this module: these are other commands' (start-up)
    from gbatch.core.gpuusage import GpuUsage
    from gbatch.core.limits import UserShare
    from gbatch.core.views import JobPriority, UsageRow

# The partition shown for a job queued before partitions existed, and for a node that
# reports none (a daemon of that time).
PARTITION = IMPLICIT_PARTITION


def _partition(job: Job) -> str:
    return _printable(job.spec.partition or PARTITION)


SQUEUE_DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
SQUEUE_LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"  # squeue -l
SQUEUE_START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"  # squeue --start
SACCT_DEFAULT_FIELDS = (
    "JobID",
    "JobName",
    "User",
    "State",
    "ExitCode",
    "Elapsed",
    "AllocGPUS",
    "NodeList",
)


class FormatError(ValueError):
    """A format string or field list names something this module cannot print."""


# ---------------------------------------------------------------------------
# Shared job facts


def _printable(text: str) -> str:
    """Replace control characters (terminal escapes in a job name, say) with '?', as
    `ls` does, so one user's job cannot repaint another user's terminal."""
    if text.isprintable():  # the common case, without a loop per character
        return text
    return "".join(c if c.isprintable() else "?" for c in text)


def _elapsed_seconds(job: Job, now: float) -> int:
    """Whole seconds the current run has lasted: start..end, or start..now while it
    runs; 0 for a pending job (a requeued one keeps an old start_time)."""
    if job.state is JobState.PENDING or job.start_time is None:
        return 0
    end = job.end_time if job.end_time is not None else now
    return max(0, int(end - job.start_time))


def reason_text(job: Job) -> str:
    """Slurm's reason text: a held pending job says so even if its stored reason
    predates the hold; an empty reason reads `None`."""
    if job.held and job.state is JobState.PENDING and not job.reason.startswith("JobHeld"):
        return "JobHeldUser"
    return _printable(job.reason) if job.reason else "None"


def dependency_text(job: Job) -> str:
    """scontrol's Dependency= value: `afterok:12(unfulfilled)` while the job waits."""
    from gbatch.core.dependency import shown

    reason = job.reason if job.state is JobState.PENDING else ""
    return _printable(shown(job.spec.dependency or "", reason))


def _exit_code(job: Job) -> str:
    """Slurm's `exit code:signal`, `0:0` until the job has ended."""
    return f"{job.exit_code or 0}:{job.exit_signal or 0}"


def _alloc_gpus(job: Job) -> int:
    return 0 if job.state is JobState.PENDING else len(job.gpus)


# Slurm shows the reason instead of the node list for these (squeue's print.c).
_REASON_STATES = frozenset(
    {JobState.PENDING, JobState.FAILED, JobState.TIMEOUT, JobState.OUT_OF_MEMORY}
)


def _nodelist_or_reason(job: Job) -> str:
    if job.state in _REASON_STATES:
        return f"({reason_text(job)})"
    return _printable(job.node or "")


def _array_task_ids(job: Job) -> str:
    """scontrol's ArrayTaskId: the task's index, or the indices a pending record holds."""
    if not job.array_more:
        return str(job.spec.array_task)
    label = job_label(job)
    return label[label.index("[") + 1 : -1].partition("%")[0]


def _array_task(job: Job) -> str:
    return "N/A" if job.spec.array_task is None else str(job.spec.array_task)


def _job_to_dict(job: Job, now: float) -> dict[str, object]:
    return {
        "job_id": job.id,
        # Slurm's: the array's id and this task's index (null for a job of no array).
        "array_job_id": job.array_job_id,
        "array_task_id": job.spec.array_task,
        "name": job.spec.name,
        "user": job.user,
        "uid": job.uid,
        "state": job.state.value,
        "state_code": job.state.code,
        "reason": reason_text(job),
        "partition": job.spec.partition or PARTITION,
        "node": job.node,
        "gpus": list(job.gpus),
        "gpu_uuids": list(job.gpu_uuids),
        "gpus_requested": job.spec.gpus,
        "time_limit": job.time_limit,
        "submit_time": job.submit_time,
        "start_time": job.start_time,
        "end_time": job.end_time,
        "elapsed": _elapsed_seconds(job, now),
        "attempt": job.attempt,
        "exit_code": job.exit_code,
        "exit_signal": job.exit_signal,
        "priority": job.spec.effective_priority,
    }


def _dump(data: object) -> str:
    return json.dumps(data, indent=2) + "\n"


def _lines(lines: Sequence[str]) -> str:
    return "".join(line + "\n" for line in lines)


# ---------------------------------------------------------------------------
# squeue


@dataclass(frozen=True)
class SqueueView:
    """What a squeue cell may read beside its job: the daemon's clock and the expected
    starts of pending jobs (job id -> epoch seconds; ListJobs' `starts`)."""

    now: float
    starts: Mapping[int, float]


@dataclass(frozen=True)
class _Column:
    header: str
    value: Callable[[Job, SqueueView], str]


def _squeue_time(job: Job, view: SqueueView) -> str:
    return format_duration(_elapsed_seconds(job, view.now))


def _squeue_stamp(epoch: float | None) -> str:
    return "N/A" if epoch is None else format_timestamp(epoch)


def _start(job: Job, view: SqueueView) -> float | None:
    """When the job started, or for a pending one when it is expected to (None: not
    known). A requeued job's old start is not its next one."""
    if job.state is JobState.PENDING:
        return view.starts.get(job.id)
    return job.start_time


def _end(job: Job, view: SqueueView) -> float | None:
    """When the job ended, or is expected to: start + time limit (as Slurm's %e)."""
    if job.state is not JobState.PENDING and job.end_time is not None:
        return job.end_time
    start = _start(job, view)
    if start is None or job.time_limit is None:
        return None
    return start + job.time_limit


def _time_left(job: Job, view: SqueueView) -> float | None:
    """Slurm's %L: the time limit less the time used (the whole limit while pending)."""
    if job.time_limit is None:
        return None
    return max(0, job.time_limit - _elapsed_seconds(job, view.now))


def _comment(job: Job) -> str:
    return _printable(job.spec.comment) if job.spec.comment is not None else "(null)"


def _workdir(job: Job) -> str:
    return _printable(job.spec.workdir or job.spec.submit_dir or "(null)")


_SQUEUE_COLUMNS: Mapping[str, _Column] = {
    # %i is N_K for an array task (and a folded row's N_[4-15]), %A the task's own id.
    "i": _Column("JOBID", lambda j, _: job_label(j)),
    "A": _Column("JOBID", lambda j, _: str(j.id)),
    "F": _Column("ARRAY_JOB_ID", lambda j, _: str(j.array_job_id or j.id)),
    "K": _Column("ARRAY_TASK_ID", lambda j, _: _array_task(j)),
    "P": _Column("PARTITION", lambda j, _: _partition(j)),
    "j": _Column("NAME", lambda j, _: _printable(j.spec.name)),
    "u": _Column("USER", lambda j, _: _printable(j.user)),
    "U": _Column("UID", lambda j, _: str(j.uid)),
    "t": _Column("ST", lambda j, _: j.state.code),
    "T": _Column("STATE", lambda j, _: j.state.value),
    "M": _Column("TIME", _squeue_time),
    "l": _Column("TIME_LIMIT", lambda j, _: format_duration(j.time_limit)),
    "L": _Column("TIME_LEFT", lambda j, v: format_duration(_time_left(j, v))),
    "D": _Column("NODES", lambda j, _: "1"),
    "C": _Column("CPUS", lambda j, _: str(j.spec.cpus_counted)),
    "m": _Column("MIN_MEMORY", lambda j, _: _memory(j.spec.memory_mb)),
    "R": _Column("NODELIST(REASON)", lambda j, _: _nodelist_or_reason(j)),
    "N": _Column("NODELIST", lambda j, _: _printable(j.node or "")),
    "b": _Column("TRES_PER_NODE", lambda j, _: f"gpu:{j.spec.gpus}" if j.spec.gpus else "N/A"),
    "V": _Column("SUBMIT_TIME", lambda j, _: _squeue_stamp(j.submit_time)),
    "S": _Column("START_TIME", lambda j, v: _squeue_stamp(_start(j, v))),
    "e": _Column("END_TIME", lambda j, v: _squeue_stamp(_end(j, v))),
    "Q": _Column("PRIORITY", lambda j, _: str(j.spec.effective_priority)),
    "p": _Column("PRIORITY", lambda j, _: str(j.spec.effective_priority)),
    "r": _Column("REASON", lambda j, _: reason_text(j)),
    "k": _Column("COMMENT", lambda j, _: _comment(j)),
    "E": _Column("DEPENDENCY", lambda j, _: dependency_text(j) or "(null)"),
    "o": _Column("COMMAND", lambda j, _: _printable(_command_line(j.spec.command))),
    "Z": _Column("WORK_DIR", lambda j, _: _workdir(j)),
    # The nodes a pending job is expected to start on: gbatch keeps no such list.
    "Y": _Column("SCHEDNODES", lambda j, _: "(null)"),
}
# Letters whose values are not in a listing's brief spec: asking for one makes squeue
# fetch whole specs (a larger reply).
SQUEUE_FULL_SPEC_LETTERS = frozenset("CmkEoZ")
# Letters that read expected starts (ListJobs' `starts`).
SQUEUE_START_LETTERS = frozenset("Se")

# squeue -O/--Format: Slurm's long field names (any case) -> the `-o` letter.
_SQUEUE_FIELDS: Mapping[str, str] = {
    "jobid": "i",
    "partition": "P",
    "name": "j",
    "username": "u",
    "userid": "U",
    "state": "T",
    "statecompact": "t",
    "timeused": "M",
    "timelimit": "l",
    "timeleft": "L",
    "numnodes": "D",
    "nodelist": "N",
    "reason": "r",
    "reasonlist": "R",
    "tres-per-node": "b",
    "gres": "b",
    "numcpus": "C",
    "minmemory": "m",
    "submittime": "V",
    "starttime": "S",
    "endtime": "e",
    "priority": "p",
    "prioritylong": "Q",
    "command": "o",
    "workdir": "Z",
    "comment": "k",
    "dependency": "E",
    "schednodes": "Y",
}
_FIELD_WIDTH = 20  # -O's default column width (Slurm's)


@dataclass(frozen=True)
class _Spec:
    """One `%[.][width]<letter>` of a squeue format."""

    letter: str
    width: int  # 0: as wide as the value
    right: bool


_SPEC = re.compile(r"%(\.?)([0-9]*)(.?)", re.DOTALL)
# A width beyond any terminal is a typo, not a layout; refusing it keeps a stray
# "%99999999i" from building a huge string.
_MAX_WIDTH = 1000


def _checked_width(text: str, what: str) -> int:
    width = int(text or 0)
    if abs(width) > _MAX_WIDTH:
        raise FormatError(f"width {width} in {what} is too large (at most {_MAX_WIDTH})")
    return width


def _format_items(
    fmt: str, pattern: re.Pattern[str], letters: Iterable[str], command: str
) -> Iterator[str | tuple[str, str, str, str]]:
    """A `-o` format of squeue or sinfo (`command`) as literal text and (dot, width,
    letter, the spec as written) items, `%%` read as '%'. FormatError for a letter not
    in `letters`, naming those that are."""
    pos = 0
    for match in pattern.finditer(fmt):
        if match.start() > pos:
            yield fmt[pos : match.start()]
        pos = match.end()
        dot, width, letter = match.groups()
        if letter == "%" and not dot and not width:
            yield "%"
            continue
        if letter not in letters:
            supported = " ".join(f"%{key}" for key in letters)
            what = f"field letter '%{letter}'" if letter else "a '%' with no field letter"
            raise FormatError(f"unsupported {command} format: {what}; supported: {supported}")
        yield dot, width, letter, match.group()
    if pos < len(fmt):
        yield fmt[pos:]


def _parse_squeue_format(fmt: str) -> list[str | _Spec]:
    """Split a squeue `-o` format into literal text and field specs (`%%` is a '%')."""
    return [
        item
        if isinstance(item, str)
        else _Spec(item[2], _checked_width(item[1], item[3]), bool(item[0]))
        for item in _format_items(fmt, _SPEC, _SQUEUE_COLUMNS, "squeue")
    ]


def _fit(text: str, width: int, right: bool) -> str:
    """squeue's _print_str: pad to `width`, cut to its first `width` characters."""
    if width == 0:
        return text
    text = text[:width]
    return text.rjust(width) if right else text.ljust(width)


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
        out.append(_fit(text, part.width, part.right))
    return "".join(out)


def squeue_format_from_fields(fields: str) -> str:
    """Turn a squeue -O/--Format list (`JobID,Name:30,State:.10`) into the `-o` format
    it means: Slurm's long names in any case, each `name[:[.][width]]`, 20 characters
    wide and left-justified unless said otherwise, no space between columns (as
    Slurm). Raises FormatError naming an unknown field or a bad width."""
    out = []
    for raw in fields.split(","):
        name, colon, size = raw.strip().partition(":")
        letter = _SQUEUE_FIELDS.get(name.lower())
        if letter is None:
            known = ",".join(_SQUEUE_FIELD_NAMES)
            raise FormatError(f"unknown field '{raw.strip()}'; fields: {known}")
        right = size.startswith(".")
        digits = size[1:] if right else size
        if colon and digits and not digits.isdigit():
            raise FormatError(f"'{raw.strip()}': a width is a number, e.g. {name}:30")
        width = _checked_width(digits, raw) if digits else _FIELD_WIDTH
        out.append(f"%{'.' if right else ''}{width}{letter}")
    return "".join(out)


_SQUEUE_FIELD_NAMES = (
    "JobID",
    "Partition",
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
    """Render jobs as `squeue` does, one line per job in the order given; the PENDING
    tasks of an array folded into one row `N_[4-15]` at its first task's place, as
    Slurm's default, unless `expand_arrays` (squeue -r). Array tasks read `N_K`.

    `fmt` is squeue's `-o` syntax, `%[.][width]<letter>` among literal text: `.`
    right-justifies, a width pads and also cuts longer values, no width prints the
    value whole. Defaults to Slurm's own default format. Raises FormatError for a
    letter not supported (the message lists those that are). `starts`: pending jobs'
    expected starts (%S, %e); a pending job without one reads N/A.
    """
    parts = _parse_squeue_format(SQUEUE_DEFAULT_FORMAT if fmt is None else fmt)
    view = SqueueView(now, starts or {})
    lines = [_squeue_line(parts, None, view)] if header else []
    rows: Sequence[tuple[Job, str | None]]
    if expand_arrays:
        rows = [(task, None) for job in jobs for task in expand_tasks(job)]
    else:
        rows = collapse_pending(jobs)
    lines.extend(_squeue_rows(parts, rows, view))
    return _lines(lines)


# What a squeue cell's text depends on besides `now` and the expected starts, for the
# letters whose cells repeat down a long queue: the same key, the same text. Rows are
# drawn with a memo per cell, so 10,000 jobs of a few specs, users and states format
# each such cell a few times (~4x faster than _squeue_line's for each row and column).
_PENDING = JobState.PENDING  # a global: Enum member access through the class is slow
_SPEC_CELLS = frozenset("PjblQpCmkoZ")  # read job.spec alone (l: its time_limit)
# Keys by id(): every job and spec lives until the rows are drawn, and neither a frozen
# dataclass's nor an Enum's __hash__ is cheap (both are Python code).
_CELL_KEYS: Mapping[str, Callable[[Job], object]] = {
    **dict.fromkeys(_SPEC_CELLS, lambda j: id(j.spec)),
    "u": lambda j: j.user,
    "U": lambda j: j.uid,
    "t": lambda j: id(j.state),
    "T": lambda j: id(j.state),
    "D": lambda j: None,
    "Y": lambda j: None,
    "r": lambda j: (id(j.state), j.held, j.reason),
    "R": lambda j: (id(j.state), j.held, j.reason, j.node),
    "N": lambda j: j.node,
    # _elapsed_seconds: 0 while pending or never started, whatever the stored times.
    "M": lambda j: (
        None if j.state is _PENDING or j.start_time is None else (j.start_time, j.end_time)
    ),
}


def _squeue_rows(
    parts: Sequence[str | _Spec], rows: Iterable[tuple[Job, str | None]], view: SqueueView
) -> list[str]:
    """_squeue_line of each (job, label), the cells of _CELL_KEYS' letters memoized."""
    cells: list[tuple[str, _Spec | None, Callable[[Job], object] | None, dict[object, str]]] = [
        (part, None, None, {})
        if isinstance(part, str)
        else (part.letter, part, _CELL_KEYS.get(part.letter), {})
        for part in parts
    ]
    out = []
    for job, label in rows:
        line = []
        for text, part, key_of, memo in cells:
            if part is None:
                line.append(text)
            elif text == "i" and label is not None:
                line.append(_fit(label, part.width, part.right))
            elif text == "K" and label is not None and label.endswith("]"):
                line.append(_fit(label[label.index("[") :], part.width, part.right))
            elif key_of is None:
                line.append(_fit(_SQUEUE_COLUMNS[text].value(job, view), part.width, part.right))
            else:
                key = key_of(job)
                cell = memo.get(key)
                if cell is None:
                    value = _SQUEUE_COLUMNS[text].value(job, view)
                    cell = memo[key] = _fit(value, part.width, part.right)
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
    "P": lambda j, _: j.spec.partition or PARTITION,
    "p": lambda j, _: _priority_sort(j),
    "Q": lambda j, _: _priority_sort(j),
    "S": _start_sort,
    "V": lambda j, _: j.submit_time,
    "e": lambda j, v: _opt(_end(j, v)),
    "l": lambda j, _: _opt(j.time_limit),
    "L": lambda j, v: _opt(_time_left(j, v)),
    "M": lambda j, v: _elapsed_seconds(j, v.now),
    "D": lambda j, _: 1,
    "N": lambda j, _: j.node or "",
    "B": lambda j, _: j.node or "",  # batch host: a job's one node
    "C": lambda j, _: j.spec.cpus_counted,
    "m": lambda j, _: j.spec.memory_mb or 0,
}
SQUEUE_SORT_KEYS = "".join(_SORT_KEYS)
# Slurm's default: partition, then state (CF, CG, PD, R: pending before running), then
# priority, highest first.
SQUEUE_DEFAULT_SORT = "P,t,-p"


_SORT_TOKEN = re.compile(r"(?P<sign>[+-]?)%?(?P<key>cluster|[^,+\-%\s])", re.IGNORECASE)


def parse_squeue_sort(text: str) -> list[tuple[str, bool]]:
    """Read squeue's -S list into (letter, descending) pairs, as Slurm does: each
    letter is a key (`-t,i`, `ti` and `+P,-p` all work), commas only separate, `-`
    before a letter makes it descending and `+` ascending; a `%` before a letter (as
    in -o) is allowed. `cluster` is accepted and does nothing (gbatch is one cluster).
    Raises FormatError naming the first key that is not supported."""
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
    """`jobs` ordered by `keys` (parse_squeue_sort's), the first key first; ties keep
    the order given (stable sorts, last key first)."""
    view = SqueueView(now, starts or {})
    ordered = list(jobs)
    for letter, descending in reversed(keys):
        value = _SORT_KEYS[letter]
        ordered.sort(key=lambda j: value(j, view), reverse=descending)
    return ordered


def format_squeue_json(jobs: Sequence[Job], now: float) -> str:
    """`{"jobs": [...]}`, one object per job; times are epoch seconds, limits seconds."""
    return _dump({"jobs": [_job_to_dict(job, now) for job in jobs]})


# ---------------------------------------------------------------------------
# sacct


@dataclass(frozen=True)
class _Field:
    name: str
    width: int  # negative: left-justified, as in sacct's field table
    value: Callable[[Job, float], str]


def _time_limit_fixed(job: Job) -> str:
    return "UNLIMITED" if job.time_limit is None else format_elapsed_fixed(job.time_limit)


_SACCT_FIELDS: tuple[_Field, ...] = (
    _Field("JobID", -12, lambda j, _: job_label(j)),
    _Field("JobIDRaw", -12, lambda j, _: str(j.id)),
    _Field("JobName", 10, lambda j, _: _printable(j.spec.name)),
    _Field("User", 9, lambda j, _: _printable(j.user)),
    _Field("UID", 6, lambda j, _: str(j.uid)),
    _Field("Partition", 10, lambda j, _: _partition(j)),
    _Field("State", 10, lambda j, _: j.state.value),
    _Field("ExitCode", 8, lambda j, _: _exit_code(j)),
    _Field("Elapsed", 10, lambda j, now: format_elapsed_fixed(_elapsed_seconds(j, now))),
    _Field("AllocGPUS", 9, lambda j, _: str(_alloc_gpus(j))),
    _Field("NodeList", 15, lambda j, _: _printable(j.node) if j.node else "None assigned"),
    _Field("Submit", 19, lambda j, _: format_timestamp(j.submit_time)),
    _Field("Start", 19, lambda j, _: format_timestamp(j.start_time)),
    _Field("End", 19, lambda j, _: format_timestamp(j.end_time)),
    _Field("Timelimit", 10, lambda j, _: _time_limit_fixed(j)),
    _Field("Reason", 22, lambda j, _: reason_text(j)),
    _Field("Attempt", 7, lambda j, _: str(j.attempt)),
    # gbatch's: a sweep task's parameters (gbatch/jobspec/sweep.py), empty for other jobs.
    _Field("Params", 20, lambda j, _: _printable(_params_text(j.spec.params))),
    _Field("AllocTRES", -10, lambda j, _: "" if _never_allocated(j) else _tres(j.spec)),
    _Field("ReqTRES", -10, lambda j, _: _tres(j.spec)),
    _Field("AllocCPUS", 10, lambda j, _: "0" if _never_allocated(j) else str(j.spec.cpus_counted)),
    _Field("ReqMem", 10, lambda j, _: _sacct_memory(j.spec.memory_mb, None)),
    _Field("Comment", 15, lambda j, _: _printable(j.spec.comment or "")),
    # The GPUs' part only (gres/gpumem, gres/gpuutil), from format_sacct's gpu_usage.
    _Field("TRESUsageInMax", -10, lambda j, _: ""),
)
UNITS = "KMGTP"
# Fields read from spec keys a brief listing (wire.ListJobs brief) leaves out.
SACCT_FULL_SPEC_FIELDS = frozenset(
    {"partition", "alloctres", "reqtres", "alloccpus", "reqmem", "comment"}
)


def _never_allocated(job: Job) -> bool:
    """Pending, or ended without ever starting (cancelled while pending): no TRES held."""
    return job.state is JobState.PENDING or job.start_time is None


def _tres(spec: JobSpec) -> str:
    """Slurm's TRES string: `billing=1,cpu=1,gres/gpu=2,mem=4G,node=1`; billing is the
    CPU count (Slurm's default weights); gres/gpu and mem only when asked for."""
    cpus = spec.cpus_counted
    parts = [f"billing={cpus}", f"cpu={cpus}"]
    if spec.gpus:
        parts.append(f"gres/gpu={spec.gpus}")
    if spec.memory_mb is not None:
        parts.append(f"mem={_memory(spec.memory_mb)}")
    return ",".join([*parts, "node=1"])


def _sacct_memory(mib: int | None, unit: str | None) -> str:
    """ReqMem: `4G`, `1500M` (`0` when none was asked); with sacct --units, in that
    unit, two decimals unless whole (`1.46G`)."""
    if mib is None:
        return "0"
    if unit is None:
        return _memory(mib)
    size = mib * 1024 / 1024 ** UNITS.index(unit)
    return f"{size:.0f}{unit}" if size == int(size) else f"{size:.2f}{unit}"


_SACCT_BY_NAME = {f.name.lower(): f for f in _SACCT_FIELDS}
_SACCT_SPEC = re.compile(r"^([A-Za-z]+)(?:%(-?[0-9]+))?$")


def _resolve_sacct_fields(names: Sequence[str]) -> list[_Field]:
    """Look fields up case-insensitively; `Name%W` sets the width (negative: left)."""
    resolved = []
    for raw in names:
        match = _SACCT_SPEC.match(raw.strip())
        field = _SACCT_BY_NAME.get(match.group(1).lower()) if match else None
        if match is None or field is None:
            valid = ", ".join(f.name for f in _SACCT_FIELDS)
            raise FormatError(f"unknown sacct field '{raw}'; valid fields: {valid}")
        width = _checked_width(match.group(2), raw)
        resolved.append(_Field(field.name, width, field.value) if width else field)
    return resolved


def _sacct_cell(text: str, width: int, *, is_header: bool) -> str:
    """sacct's print_fields_str: a value too long keeps width-1 characters and a '+';
    a header is cut plainly."""
    size = abs(width)
    if len(text) > size:
        text = text[:size] if is_header else text[: size - 1] + "+"
    return text.rjust(size) if width > 0 else text.ljust(size)


def format_sacct(
    jobs: Sequence[Job],
    now: float,
    *,
    fields: Sequence[str] | None = None,
    header: bool = True,
    parsable: bool = False,
    units: str | None = None,
    gpu_usage: Mapping[int, GpuUsage] | None = None,
    expand_arrays: bool = False,
) -> str:
    """Render jobs as `sacct` does, one line per job in the order given (an array's
    PENDING tasks folded into one line, N_[4-15], at the place of the first).

    Fixed-width columns at sacct's widths, a dashed line under the header; with
    `parsable` (sacct -P) fields are joined by '|' with no padding, no dashes.
    Raises FormatError for an unknown field (the message lists the valid ones).
    Unlike sacct, lines carry no trailing blank. `units` (one of UNITS, sacct --units)
    prints ReqMem in that unit. `gpu_usage` (job id -> its current run's GPU samples)
    fills TRESUsageInMax.
    """
    from gbatch.core.gpuusage import tres_usage  # deferred: squeue needs none

    columns = _resolve_sacct_fields(SACCT_DEFAULT_FIELDS if fields is None else fields)
    usage = gpu_usage or {}
    columns = [
        _Field(c.name, c.width, lambda j, _: tres_usage(usage.get(j.id)))
        if c.name == "TRESUsageInMax"
        else c
        for c in columns
    ]
    if units is not None:
        columns = [
            _Field(c.name, c.width, lambda j, _: _sacct_memory(j.spec.memory_mb, units))
            if c.name == "ReqMem"
            else c
            for c in columns
        ]
    # An array's pending tasks read as one line N_[4-15], as Slurm's one record of them;
    # with `expand_arrays` (sacct --array) one line each.
    labelled = (
        [(task, job_label(task)) for job in jobs for task in expand_tasks(job)]
        if expand_arrays
        else collapse_pending(jobs)
    )
    rows = [
        [label if c.name == "JobID" else c.value(job, now) for c in columns]
        for job, label in labelled
    ]
    lines = []
    if parsable:
        if header:
            lines.append("|".join(c.name for c in columns))
        lines.extend("|".join(row) for row in rows)
        return _lines(lines)
    if header:
        lines.append(" ".join(_sacct_cell(c.name, c.width, is_header=True) for c in columns))
        lines.append(" ".join("-" * abs(c.width) for c in columns))
    for row in rows:
        cells = (
            _sacct_cell(text, c.width, is_header=False)
            for c, text in zip(columns, row, strict=True)
        )
        lines.append(" ".join(cells))
    return _lines([line.rstrip() for line in lines])


def format_sacct_json(jobs: Sequence[Job], now: float) -> str:
    """Same shape as format_squeue_json: `{"jobs": [...]}`."""
    return format_squeue_json(jobs, now)


# ---------------------------------------------------------------------------
# sinfo

_SINFO_HEADERS = (
    "NODELIST",
    "PARTITION",
    "STATE",
    "GPUS",
    "ALLOC",
    "FREE",
    "BUSY",
    "GPU_TYPE",
    "REASON",
)
_SINFO_NUMERIC = frozenset({"GPUS", "ALLOC", "FREE", "BUSY"})


def _gpu_type(node: NodeInfo) -> str:
    if not node.gpus:
        return "N/A"
    name = _printable(node.gpus[0].name)
    return f"{name} (simulated)" if node.simulated else name


def _node_reason(node: NodeInfo) -> str:
    if node.state in (NodeState.DRAINED, NodeState.SUSPECT, NodeState.DOWN):
        return _printable(node.reason)
    return ""


def format_sinfo_gpus(
    nodes: Sequence[NodeInfo], *, header: bool = True, default_partition: str | None = None
) -> str:
    """`sinfo --gpus`, gbatch's GPU view: one line per node and partition, in the order
    given: a node in two partitions has two lines. The default partition's name ends in `*`.

    BUSY counts GPUs busy with processes gbatch did not start; GPU_TYPE is the first
    GPU's name, suffixed " (simulated)" for simulated GPUs; REASON only for drained
    or down nodes. Columns are as wide as their widest cell; counts right-justified.
    """
    rows = [
        [
            _printable(node.name),
            _printable(partition) + ("*" if partition == default_partition else ""),
            node.state.value,
            str(node.gpus_total),
            str(node.gpus_allocated),
            str(node.gpus_free),
            str(node.gpus_busy_outside),
            _gpu_type(node),
            _node_reason(node),
        ]
        for node in nodes
        for partition in node.partitions or (PARTITION,)
    ]
    return _table(_SINFO_HEADERS, rows, _SINFO_NUMERIC, header=header)


# Slurm's sinfo: `-o` letters, grouped lines, compressed node lists --------------

SINFO_DEFAULT_FORMAT = "%#P %.5a %.10l %.6D %.6t %N"
SINFO_LONG_FORMAT = "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
# As Slurm 22.05 prints them (tests/integration/test_slurm_output_formats.py): the
# partition right-justified in 9, CPUS left-justified.
SINFO_NODE_FORMAT = "%#N %.6D %.9P %6t"
SINFO_NODE_LONG_FORMAT = "%#N %.6D %.9P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E"
SINFO_REASONS_FORMAT = "%20E %9u %19H %N"
SINFO_REASONS_LONG_FORMAT = "%20E %12U %19H %6t %N"


@dataclass(frozen=True)
class SinfoRow:
    """One node in one partition, with what sinfo's letters read from either."""

    node: NodeInfo
    partition: str
    default: bool  # the default partition: %P prints a `*` after its name
    max_time: int | None  # the partition's limit, seconds; None: infinite


def sinfo_rows(
    nodes: Sequence[NodeInfo],
    partitions: Sequence[PartitionInfo] = (),
    *,
    default_partition: str | None = None,
    only: Collection[str] | None = None,
) -> list[SinfoRow]:
    """Each node once per partition it is in, partitions in `partitions`' order (then
    any a node names that `partitions` lacks), nodes in the order given. `only`: these
    partitions alone (sinfo -p)."""
    limits = {p.name: p for p in partitions}
    order = [p.name for p in partitions]
    for node in nodes:
        order.extend(p for p in node.partitions or (PARTITION,) if p not in order)
    rows: list[SinfoRow] = []
    for name in order:
        if only is not None and name not in only:
            continue
        part = limits.get(name)
        default = part.default if part is not None else name == default_partition
        max_time = part.max_time if part is not None else None
        rows.extend(
            SinfoRow(node, name, default or name == default_partition, max_time)
            for node in nodes
            if name in (node.partitions or (PARTITION,))
        )
    return rows


def sinfo_reason_rows(rows: Sequence[SinfoRow]) -> list[SinfoRow]:
    """sinfo -R's rows: the nodes drained, down or not responding, each once whatever
    partitions it is in."""
    seen: set[str] = set()
    out = []
    for row in rows:
        if _node_reason(row.node) and row.node.name not in seen:
            seen.add(row.node.name)
            out.append(row)
    return out


def sinfo_state(node: NodeInfo, *, long: bool) -> str:
    """Slurm's node state: %t (`idle`, `mix`, `alloc`, `drain`, `drng`, `down*`) or %T
    (`idle`, `mixed`, `allocated`, `drained`, `draining`, `down*`). gbatch's `suspect`
    (no new jobs while the head cannot trust the host) is Slurm's not-responding `*`
    after the state its GPUs are in."""
    if node.state is NodeState.DRAINED:
        if node.gpus_allocated:
            return "draining" if long else "drng"
        return "drained" if long else "drain"
    if node.state is NodeState.DOWN:
        return "down*"
    if not node.gpus_allocated:
        base = "idle"
    elif node.gpus_total and node.gpus_allocated >= node.gpus_total:
        base = "allocated" if long else "alloc"
    else:
        base = "mixed" if long else "mix"
    return base + ("*" if node.state is NodeState.SUSPECT else "")


def sinfo_gres(node: NodeInfo) -> str:
    """Slurm's GRES: `gpu:8`, `(null)` for a node without GPUs."""
    return f"gpu:{node.gpus_total}" if node.gpus_total else _NULL


def _sinfo_reason(node: NodeInfo) -> str:
    """%E: the reason, `none` without one; a drain's " [admin]" suffix is %u's."""
    reason = _node_reason(node)
    suffix = f" [{_printable(node.reason_user)}]"
    if node.reason_user and reason.endswith(suffix):
        reason = reason[: -len(suffix)]
    return reason if reason else "none"


def _sinfo_nodes_aiot(rows: Sequence[SinfoRow]) -> str:
    """%F: nodes allocated (running jobs)/idle/other (drained, down, not responding)/total."""
    other = allocated = 0
    for row in rows:
        if row.node.state in (NodeState.DRAINED, NodeState.DOWN, NodeState.SUSPECT):
            other += 1
        elif row.node.gpus_allocated:
            allocated += 1
    return f"{allocated}/{len(rows) - other - allocated}/{other}/{len(rows)}"


def _optional(value: int | None) -> str:
    return "N/A" if value is None else str(value)


def _reason_user(node: NodeInfo) -> str:
    """%u and %U: who set the reason (Slurm's %U adds the uid; gbatch keeps the name)."""
    if not _node_reason(node):
        return "Unknown"
    return _printable(node.reason_user) if node.reason_user else "Unknown"


@dataclass(frozen=True)
class _SinfoLetter:
    header: str
    # The value of one row; None: an aggregate over a group of rows (see `aggregate`).
    value: Callable[[SinfoRow], str] | None
    aggregate: Callable[[Sequence[SinfoRow]], str] | None = None


_SINFO_LETTERS: Mapping[str, _SinfoLetter] = {
    "P": _SinfoLetter("PARTITION", lambda r: _printable(r.partition) + ("*" if r.default else "")),
    "R": _SinfoLetter("PARTITION", lambda r: _printable(r.partition)),
    "a": _SinfoLetter("AVAIL", lambda r: "up"),
    "l": _SinfoLetter(
        "TIMELIMIT", lambda r: "infinite" if r.max_time is None else format_duration(r.max_time)
    ),
    "D": _SinfoLetter("NODES", None, lambda rows: str(len(rows))),
    "F": _SinfoLetter("NODES(A/I/O/T)", None, _sinfo_nodes_aiot),
    "N": _SinfoLetter("NODELIST", None, lambda rows: compress_hostlist(r.node.name for r in rows)),
    "n": _SinfoLetter("HOSTNAMES", None, lambda rows: compress_hostlist(r.node.name for r in rows)),
    "t": _SinfoLetter("STATE", lambda r: sinfo_state(r.node, long=False)),
    "T": _SinfoLetter("STATE", lambda r: sinfo_state(r.node, long=True)),
    "G": _SinfoLetter("GRES", lambda r: sinfo_gres(r.node)),
    "c": _SinfoLetter("CPUS", lambda r: _optional(r.node.cpus_total)),
    "m": _SinfoLetter("MEMORY", lambda r: _optional(r.node.mem_total_mb)),
    "E": _SinfoLetter("REASON", lambda r: _sinfo_reason(r.node)),
    "u": _SinfoLetter("USER", lambda r: _reason_user(r.node)),
    "U": _SinfoLetter("USER", lambda r: _reason_user(r.node)),
    "H": _SinfoLetter(
        "TIMESTAMP",
        lambda r: format_timestamp(r.node.reason_time) if _node_reason(r.node) else "Unknown",
    ),
    # What Slurm prints for a partition or node that sets none of these: gbatch has no
    # multi-node jobs, root-only partitions, oversubscription, group limits, temporary
    # disk, node weights or features, and does not report sockets:cores:threads.
    "s": _SinfoLetter("JOB_SIZE", lambda r: "1"),
    "r": _SinfoLetter("ROOT", lambda r: "no"),
    "h": _SinfoLetter("OVERSUBS", lambda r: "NO"),
    "g": _SinfoLetter("GROUPS", lambda r: "all"),
    "z": _SinfoLetter("S:C:T", lambda r: "N/A"),
    "d": _SinfoLetter("TMP_DISK", lambda r: "0"),
    "w": _SinfoLetter("WEIGHT", lambda r: "1"),
    "f": _SinfoLetter("AVAIL_FEATURES", lambda r: _NULL),
}

# sinfo -O's long names (matched case-insensitively), each a letter above.
SINFO_LONG_NAMES: Mapping[str, str] = {
    "Available": "a",
    "CPUs": "c",
    "Disk": "d",
    "Features": "f",
    "Gres": "G",
    "Groups": "g",
    "Memory": "m",
    "NodeAIOT": "F",
    "NodeHost": "n",
    "NodeList": "N",
    "Nodes": "D",
    "OverSubscribe": "h",
    "Partition": "P",
    "PartitionName": "R",
    "Reason": "E",
    "Root": "r",
    "Size": "s",
    "SocketCoreThread": "z",
    "StateCompact": "t",
    "StateLong": "T",
    "Time": "l",
    "Timestamp": "H",
    "User": "u",
    "Weight": "w",
}
_SINFO_BY_LONG_NAME = {name.lower(): letter for name, letter in SINFO_LONG_NAMES.items()}


@dataclass(frozen=True)
class _SinfoSpec:
    """One `%[.][width|#]<letter>`; `width` None with `fit`: as wide as the widest value."""

    letter: str
    width: int
    right: bool
    fit: bool = False


_SINFO_SPEC = re.compile(r"%(\.?)(#|[0-9]*)(.?)", re.DOTALL)


def parse_sinfo_format(fmt: str) -> list[str | _SinfoSpec]:
    """Split a sinfo `-o` format into literal text and field specs (`%%` is a '%');
    `%#X` is as wide as the widest value of X (Slurm's default formats use it)."""
    parts: list[str | _SinfoSpec] = []
    for item in _format_items(fmt, _SINFO_SPEC, _SINFO_LETTERS, "sinfo"):
        if isinstance(item, str):
            parts.append(item)
            continue
        dot, width, letter, text = item
        fit = width == "#"
        size = 0 if fit else _checked_width(width, text)
        parts.append(_SinfoSpec(letter, size, bool(dot), fit))
    return parts


_SINFO_FIELD = re.compile(r"^([A-Za-z]+)(?::(\.?)([0-9]*))?$")


def parse_sinfo_long_format(fields: str) -> list[str | _SinfoSpec]:
    """sinfo -O: `name[:[.][size]]` comma-separated, names case-insensitive, 20
    characters wide unless a size is given (`.` right-justifies), as in Slurm."""
    parts: list[str | _SinfoSpec] = []
    for raw in fields.split(","):
        match = _SINFO_FIELD.match(raw.strip())
        letter = _SINFO_BY_LONG_NAME.get(match.group(1).lower()) if match else None
        if match is None or letter is None:
            valid = ", ".join(SINFO_LONG_NAMES)
            raise FormatError(f"unknown sinfo field '{raw}'; valid fields: {valid}")
        width = _checked_width(match.group(3), raw) if match.group(3) else 20
        parts.append(_SinfoSpec(letter, width, bool(match.group(2))))
        parts.append(" ")
    return parts[:-1]


def format_sinfo(
    rows: Sequence[SinfoRow],
    *,
    fmt: str | Sequence[str | _SinfoSpec] = SINFO_DEFAULT_FORMAT,
    header: bool = True,
    node_oriented: bool = False,
) -> str:
    """Render sinfo as Slurm does: rows with the same values for every per-node field
    of the format (partition, state, ...) share one line, in order of their first row,
    their nodes counted (%D) and listed compressed (%N: `gpu[01-03]`). With
    `node_oriented` (sinfo -N), one line per row instead. A partition with no rows
    prints no line. Raises FormatError for an unknown letter."""
    parts = parse_sinfo_format(fmt) if isinstance(fmt, str) else list(fmt)
    specs = [p for p in parts if isinstance(p, _SinfoSpec)]
    if node_oriented:  # each node's lines together, nodes in the order first seen
        first = {id(row.node): i for i, row in reversed(list(enumerate(rows)))}
        rows = sorted(rows, key=lambda row: first[id(row.node)])
    groups: dict[tuple[str, ...], list[SinfoRow]] = {}
    for index, row in enumerate(rows):
        key = tuple(
            value(row) for spec in specs if (value := _SINFO_LETTERS[spec.letter].value) is not None
        )
        groups.setdefault((str(index), *key) if node_oriented else key, []).append(row)
    table = [[_sinfo_cell(spec.letter, group) for spec in specs] for group in groups.values()]
    headers = [_SINFO_LETTERS[spec.letter].header for spec in specs]
    widths = [
        max([len(h), *(len(line[i]) for line in table)]) if spec.fit else spec.width
        for i, (spec, h) in enumerate(zip(specs, headers, strict=True))
    ]
    lines = [_sinfo_line(parts, headers, widths)] if header else []
    lines.extend(_sinfo_line(parts, line, widths) for line in table)
    return _lines([line.rstrip() for line in lines])


def _sinfo_cell(letter: str, group: Sequence[SinfoRow]) -> str:
    field = _SINFO_LETTERS[letter]
    if field.value is not None:
        return field.value(group[0])
    assert field.aggregate is not None
    return field.aggregate(group)


def _sinfo_line(parts: Sequence[str | _SinfoSpec], cells: Sequence[str], widths: list[int]) -> str:
    out = []
    column = 0
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        out.append(_fit(cells[column], widths[column], part.right))
        column += 1
    return "".join(out)


_TRAILING_NUMBER = re.compile(r"^(.*?)([0-9]+)$", re.DOTALL)


def compress_hostlist(names: Iterable[str]) -> str:
    """Slurm's ranged host list: `gpu01,gpu02,gpu03,cpu7` -> `gpu[01-03],cpu7`.

    Names sharing everything before a trailing number join one bracket, numbers sorted
    and consecutive ones written as ranges; a zero-padded number continues a range only
    with numbers of its own width (`n09,n10` -> `n[09-10]`, `n9,n010` -> `n[9,010]`).
    Prefixes print in order of their first name; a name without a trailing number, or
    alone with its prefix, prints as is. Duplicates print once."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for raw in names:
        name = _printable(raw)
        match = _TRAILING_NUMBER.match(name)
        if match is None or len(match.group(2)) > 18:  # no number, or none int() keeps small
            groups.setdefault(name, [])
            continue
        entries = groups.setdefault(match.group(1), [])
        if (int(match.group(2)), match.group(2)) not in entries:
            entries.append((int(match.group(2)), match.group(2)))
    out = []
    for prefix, entries in groups.items():
        if len(entries) <= 1:
            out.append(prefix + (entries[0][1] if entries else ""))
        else:
            out.append(f"{prefix}[{','.join(_ranges(sorted(entries)))}]")
    return ",".join(out)


def _padded(digits: str) -> bool:
    return len(digits) > 1 and digits.startswith("0")


def _continues(last: tuple[int, str], entry: tuple[int, str]) -> bool:
    same_width = len(entry[1]) == len(last[1]) or not (_padded(entry[1]) or _padded(last[1]))
    return entry[0] == last[0] + 1 and same_width


def _ranges(numbers: Sequence[tuple[int, str]]) -> list[str]:
    ranges = []
    first = last = numbers[0]
    for entry in numbers[1:]:
        if _continues(last, entry):
            last = entry
            continue
        ranges.append(first[1] if first == last else f"{first[1]}-{last[1]}")
        first = last = entry
    ranges.append(first[1] if first == last else f"{first[1]}-{last[1]}")
    return ranges


def _table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    numeric: Collection[str],
    *,
    header: bool,
) -> str:
    """Columns as wide as their widest cell; `numeric` ones right-justified."""
    table = [list(headers), *rows] if header else list(rows)
    if not table:
        return ""
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    lines = []
    for row in table:
        cells = [
            text.rjust(width) if name in numeric else text.ljust(width)
            for name, text, width in zip(headers, row, widths, strict=True)
        ]
        lines.append(" ".join(cells).rstrip())
    return _lines(lines)


_NODE_LIST_HEADERS = ("NODE", "ADDRESS", "STATE", "GPUS", "REASON")


def format_node_list(nodes: Sequence[NodeInfo], *, header: bool = True) -> str:
    """`gbatch node list`: where each node is and why it is drained or down."""
    rows = [
        [
            _printable(node.name),
            _printable(node.address),
            node.state.value,
            str(node.gpus_total),
            _node_reason(node),
        ]
        for node in nodes
    ]
    return _table(_NODE_LIST_HEADERS, rows, {"GPUS"}, header=header)


def format_sinfo_json(nodes: Sequence[NodeInfo]) -> str:
    """`{"nodes": [...]}` with counts and a per-GPU list (job_id: the gbatch job
    holding that GPU, or null)."""
    return _dump(
        {
            "nodes": [
                {
                    "name": node.name,
                    "partition": (node.partitions or (PARTITION,))[0],
                    "partitions": list(node.partitions or (PARTITION,)),
                    "state": node.state.value,
                    "reason": node.reason,
                    "gpus_total": node.gpus_total,
                    "gpus_allocated": node.gpus_allocated,
                    "gpus_free": node.gpus_free,
                    "gpus_busy_outside": node.gpus_busy_outside,
                    "gpu_type": node.gpus[0].name if node.gpus else None,
                    "simulated": node.simulated,
                    "gpus": [
                        {
                            "index": gpu.index,
                            "uuid": gpu.uuid,
                            "name": gpu.name,
                            "memory_used_mib": gpu.memory_used_mib,
                            "memory_total_mib": gpu.memory_total_mib,
                            "utilization_pct": gpu.utilization_pct,
                            "foreign_processes": gpu.foreign_processes,
                            "simulated": gpu.simulated,
                            "job_id": node.allocations.get(gpu.index),
                        }
                        for gpu in node.gpus
                    ],
                }
                for node in nodes
            ]
        }
    )


# ---------------------------------------------------------------------------
# scontrol show job

_NULL = "(null)"  # what scontrol prints for an unset value
SECRET_MASK = "<secret>"  # shown for a secret_env variable, in place of its value
_ANSI_C_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _quote_arg(arg: str) -> str:
    """shlex.quote, except that an argument holding control characters (a multi-line
    `sh -c` script) is written as bash's $'...' so the record stays one line."""
    if arg.isprintable():
        import shlex  # deferred: only scontrol shows a command line

        return shlex.quote(arg)
    out = []
    for c in arg:
        if c in _ANSI_C_ESCAPES:
            out.append(_ANSI_C_ESCAPES[c])
        elif c.isprintable():
            out.append(c)
        else:
            out.append(f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\U{ord(c):08x}")
    body = "".join(out)
    return f"$'{body}'"


def _command_line(argv: Sequence[str]) -> str:
    return " ".join(_quote_arg(arg) for arg in argv)


def _expected_end(job: Job) -> float | None:
    """Actual end, else (like Slurm) start + limit for a job holding GPUs."""
    if job.end_time is not None:
        return job.end_time
    if job.state in ALLOCATED_STATES and job.start_time is not None and job.time_limit:
        return job.start_time + job.time_limit
    return None


def _event_lines(events: Sequence[Event]) -> list[str]:
    ordered = sorted(events, key=lambda e: e.time)  # stable: same-instant order kept
    width = max((len(e.state.value) for e in ordered), default=0)
    return [
        f"   {format_timestamp(e.time)}  {e.state.value.ljust(width)}  "
        f"{_printable(e.reason)}".rstrip()
        for e in ordered
    ]


def _memory(mib: int | None) -> str:
    """A size in MiB as scontrol writes one: 16G, 1500M, or 0 when none was asked."""
    if mib is None:
        return "0"
    return f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"


def format_job_details(job: Job, events: Sequence[Event], now: float) -> str:
    """Render one job as `scontrol show job` does: key=value lines indented three
    spaces, then an `Events:` block (time, state, reason; oldest first).

    Environment lists variable names only: values may be secrets and never appear;
    secret_env names read NAME=<secret>.
    Unset values read `(null)`, unknown times `Unknown`, as in Slurm. When printing
    several jobs, separate them with a blank line as scontrol does.
    """
    spec = job.spec
    from gbatch.core.outputs import output_paths  # deferred: squeue needs none

    files = output_paths(job, job.node)
    env_names = ",".join(
        [_printable(name) for name, _ in spec.env]
        + [f"{_printable(name)}={SECRET_MASK}" for name in spec.secret_env]
    )
    lines = [
        f"JobId={job.id}"
        # As scontrol, for an array task only.
        + (
            f" ArrayJobId={job.array_job_id} ArrayTaskId={_array_task_ids(job)}"
            + (f" ArrayTaskThrottle={spec.array_throttle}" if spec.array_throttle else "")
            if job.array_job_id is not None
            else ""
        )
        + f" JobName={_printable(spec.name)}",
        f"   UserId={_printable(job.user)}({job.uid})",
        f"   Priority={spec.effective_priority} Nice={spec.nice}",
        f"   JobState={job.state.value} Reason={reason_text(job)}"
        # Only for a job that has one, so every other job's lines stay as they were.
        + (f" Dependency={dependency_text(job)}" if spec.dependency else "")
        + f" ExitCode={_exit_code(job)}",
        f"   RunTime={format_elapsed_fixed(_elapsed_seconds(job, now))}"
        f" TimeLimit={_time_limit_fixed(job)}",
        # Two lines, as scontrol prints them (and one line would not fit 80 columns).
        f"   SubmitTime={format_timestamp(job.submit_time)}",
        f"   StartTime={format_timestamp(job.start_time)}"
        f" EndTime={format_timestamp(_expected_end(job))}",
        f"   Partition={_partition(job)}",
        f"   NodeList={_printable(job.node) if job.node else _NULL}"
        f" Gres={f'gpu:{spec.gpus}' if spec.gpus else _NULL}"
        f" GPUs={','.join(map(str, job.gpus)) if job.gpus else _NULL}"
        f" Attempt={job.attempt} Retries={spec.retries}"
        f" Requeue={1 if spec.requeue else 0}",
        # Slurm's names; memory 0 as Slurm prints a job without --mem.
        f"   NumCPUs={spec.cpus_counted} MinMemoryNode={_memory(spec.memory_mb)}",
        f"   Command={_command_line(spec.command)}",
        f"   Image={_printable(spec.image or _NULL)}"
        f" WorkDir={_printable(spec.workdir or _NULL)}"
        f" Mounts={_printable(','.join(spec.mounts) or _NULL)}"
        f" ShmSize={_printable(spec.shm_size or _NULL)}"
        # Only when the job picked one: the admin's job_network is every other job's.
        + (f" Network={_printable(spec.network)}" if spec.network else ""),
        f"   Environment={env_names or _NULL}",
        *_slurm_option_lines(spec),
        # As scontrol: the paths the files have (patterns expanded), stdin never read.
        f"   StdErr={_printable(files[1]) if files else _NULL}",
        "   StdIn=/dev/null",
        f"   StdOut={_printable(files[0]) if files else _NULL}",
        "Events:",
        *_event_lines(events),
    ]
    return _lines(lines)


def _params_text(params: Sequence[tuple[str, str]]) -> str:
    """A sweep task's parameters as `lr=1e-3,bs=32` (gbatch.jobspec.sweep.params_text; not
    imported from there, which would bring gbatch.jobspec.spec into squeue's start-up)."""
    return ",".join(f"{name}={value}" for name, value in params)


def _slurm_option_lines(spec: JobSpec) -> list[str]:
    """Export (mode and names; the values are never shown, as in Slurm), BeginTime,
    Signal, MailUser/MailType and Comment: a line only for the options a job gave."""
    parts = []
    if spec.export is not None:
        parts.append(f"Export={_printable(spec.export)}")
    if spec.begin is not None:
        parts.append(f"BeginTime={format_timestamp(spec.begin)}")
    if spec.signal is not None:
        parts.append(f"Signal={_printable(spec.signal)}")
    lines = [f"   {' '.join(parts)}"] if parts else []
    if spec.mail_user is not None or spec.mail_type is not None:
        lines.append(
            f"   MailUser={_printable(spec.mail_user or _NULL)}"
            f" MailType={_printable(spec.mail_type or 'NONE')}"
        )
    if spec.comment is not None:
        lines.append(f"   Comment={_printable(spec.comment)}")
    if spec.params:  # a parameter sweep's task
        lines.append(f"   Params={_printable(_params_text(spec.params))}")
    return lines


def format_job_details_json(job: Job, events: Sequence[Event], now: float) -> str:
    """The squeue JSON object of the job plus its spec (env names only, never values)
    and its events, oldest first."""
    spec = job.spec
    from gbatch.core.outputs import output_paths  # deferred: squeue needs none

    files = output_paths(job, job.node)
    data = _job_to_dict(job, now)
    data.update(
        {
            "command": list(spec.command),
            "image": spec.image,
            "workdir": spec.workdir,
            "mounts": list(spec.mounts),
            "shm_size": spec.shm_size,
            "network": spec.network,  # null: the head's job_network
            "dependency": spec.dependency,
            "stdout": files[0] if files else None,
            "stderr": files[1] if files else None,
            "stdin": "/dev/null",
            "open_mode": spec.open_mode or "truncate",
            "env_names": [name for name, _ in spec.env],
            "secret_env_names": list(spec.secret_env),
            "retries": spec.retries,
            "requeue": spec.requeue,
            "nice": spec.nice,
            "held": job.held,
            "events": [
                {"time": e.time, "state": e.state.value, "reason": e.reason}
                for e in sorted(events, key=lambda e: e.time)
            ],
        }
    )
    return _dump(data)


# ---------------------------------------------------------------------------
# sshare

_SSHARE_HEADERS = (
    "User",
    "RawUsage",
    "EffectvUsage",
    "FairShare",
    "Pending",
    "MaxPending",
    "Running",
    "MaxRunning",
    "GPUs",
    "MaxGPUs",
    "MaxArray",
)


def _limit_cell(value: int | None, none: str) -> str:
    return none if value is None else str(value)


def format_sshare(
    shares: Sequence[UserShare], *, header: bool = True, parsable: bool = False
) -> str:
    """One line per user, in the order given: Slurm's sshare figures (RawUsage in
    decayed GPU-seconds, EffectvUsage its share of everyone's, FairShare the planner's
    factor), then what the user's jobs hold now beside each limit: pending jobs and
    max_pending_jobs, jobs on nodes and max_running_jobs, GPUs and max_gpus, then
    max_array_size. No limit reads `-` (empty with `parsable`, sshare -P's `|` form)."""
    none = "" if parsable else "-"
    rows = [
        [
            _printable(share.user),
            str(round(share.usage)),
            f"{share.effective_usage:.6f}",
            f"{share.fairshare:.6f}",
            str(share.pending),
            _limit_cell(share.limits.max_pending_jobs, none),
            str(share.running),
            _limit_cell(share.limits.max_running_jobs, none),
            str(share.gpus),
            _limit_cell(share.limits.max_gpus, none),
            _limit_cell(share.limits.max_array_size, none),
        ]
        for share in shares
    ]
    if parsable:
        lines = ["|".join(_SSHARE_HEADERS)] if header else []
        return _lines([*lines, *("|".join(row) for row in rows)])
    return _table(_SSHARE_HEADERS, rows, frozenset(_SSHARE_HEADERS[1:]), header=header)


def format_sshare_json(shares: Sequence[UserShare]) -> str:
    """`{"users": [...]}`: the figures, what the jobs hold, and `limits` (null: none);
    the protocol's fields, with Slurm's name for the usage (`raw_usage`)."""
    from gbatch.protocol.wire import share_to_wire  # deferred: only sshare --json needs it

    return _dump(
        {
            "users": [
                {
                    ("raw_usage" if key == "usage" else key): value
                    for key, value in share_to_wire(share).items()
                }
                for share in shares
            ]
        }
    )


# ---------------------------------------------------------------------------
# sprio

_SPRIO_HEADERS = ("JOBID", "PARTITION", "USER", "PRIORITY", "AGE", "FAIRSHARE", "NICE")
_SPRIO_LONG_HEADERS = (
    "JOBID",
    "PARTITION",
    "USER",
    "RANK",
    "PRIORITY",
    "JOBPRIO",
    "NICE",
    "FAIRSHARE",
    "AGE",
    "SUBMIT_TIME",
)
_SPRIO_TEXT = frozenset({"PARTITION", "USER", "SUBMIT_TIME"})


def format_sprio(
    jobs: Sequence[JobPriority], now: float, *, long: bool = False, header: bool = True
) -> str:
    """One line per pending job, in the order given. PRIORITY is what the planner sorts
    by after the fair-share factor: the job's priority - nice; FAIRSHARE its user's
    factor (0..1, sorted first); AGE how long it has waited (submit time breaks ties).
    `long` adds RANK (its place in that order), JOBPRIO (priority before nice) and
    SUBMIT_TIME."""
    rows = []
    for job in jobs:
        cells = {
            "JOBID": str(job.id),
            "PARTITION": _printable(job.partition or PARTITION),
            "USER": _printable(job.user),
            "RANK": str(job.rank),
            "PRIORITY": str(job.effective_priority),
            "JOBPRIO": str(job.priority),
            "NICE": str(job.nice),
            "FAIRSHARE": f"{job.fairshare:.7f}",
            "AGE": format_duration(max(0.0, now - job.submit_time)),
            "SUBMIT_TIME": format_timestamp(job.submit_time),
        }
        rows.append([cells[name] for name in (_SPRIO_LONG_HEADERS if long else _SPRIO_HEADERS)])
    headers = _SPRIO_LONG_HEADERS if long else _SPRIO_HEADERS
    return _table(headers, rows, frozenset(headers) - _SPRIO_TEXT, header=header)


def format_sprio_json(jobs: Sequence[JobPriority], now: float) -> str:
    """`{"jobs": [...]}`: the protocol's fields, plus `effective_priority` and `age`
    (seconds)."""
    return _dump(
        {
            "jobs": [
                {
                    **job.to_wire(),
                    "effective_priority": job.effective_priority,
                    "age": max(0.0, now - job.submit_time),
                }
                for job in jobs
            ]
        }
    )


# ---------------------------------------------------------------------------
# seff


def _percent(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.2f}%" if whole > 0 else "0.00%"


def format_seff(
    job: Job, now: float, *, cluster: str, group: str, gpu_usage: GpuUsage | None = None
) -> str:
    """Slurm's seff report for one job, and gbatch's GPU part. gbatch measures neither
    a job's CPU time nor its memory: those lines say `not measured` rather than a
    made-up 0. Efficiency of the time limit: the run's wall-clock time over its limit.
    The GPU lines come from `gpu_usage`, the samples of the job's current run."""
    lines = [f"Job ID: {job.id}"]
    if job.array_job_id is not None:
        lines.append(f"Array Job ID: {job.array_job_id}_{job.spec.array_task}")
    state = job.state.value
    if job.state in FINAL_STATES:
        state += f" (exit code {job.exit_code or 0})"
    lines += [
        f"Cluster: {_printable(cluster)}",
        f"User/Group: {_printable(job.user)}/{_printable(group)}",
        f"State: {state}",
        f"Cores: {job.spec.cpus_counted}",
    ]
    if job.state is JobState.PENDING or job.start_time is None:
        lines.append(f"Efficiency not available for jobs in the {job.state.value} state.")
        return _lines(lines)
    elapsed = _elapsed_seconds(job, now)
    limit = job.time_limit
    memory = job.spec.memory_mb
    lines += [
        "CPU Utilized: not measured",
        "CPU Efficiency: not measured",
        f"Job Wall-clock time: {format_elapsed_fixed(elapsed)}",
        "Time Limit Efficiency: "
        + (
            f"{_percent(elapsed, limit)} of {format_elapsed_fixed(limit)} time limit"
            if limit
            else "no time limit"
        ),
        "Memory Utilized: not measured",
        "Memory Efficiency: not measured"
        + (f" ({_memory(memory)} requested)" if memory is not None else ""),
    ]
    gpus = ",".join(str(i) for i in job.gpus)
    where = f" (node {_printable(job.node or '')}, GPU {gpus})" if job.gpus else ""
    lines += [
        f"GPUs: {len(job.gpus)}{where}",
        f"GPU-hours: {len(job.gpus) * elapsed / 3600:.2f}",
    ]
    if job.gpus:
        from gbatch.core.gpuusage import seff_lines

        lines += seff_lines(gpu_usage)
    return _lines(lines)


# ---------------------------------------------------------------------------
# sreport


def format_sreport(
    rows: Sequence[UsageRow],
    start: float,
    end: float,
    *,
    by_group: bool = False,
    header: bool = True,
    parsable: bool = False,
) -> str:
    """GPU-hours per user (or group) inside [start, end), most first; Slurm's sreport
    banner (the period and its length) above the table unless `parsable` (`|`-separated,
    sreport -P) or without `header`."""
    headers = ("GROUP" if by_group else "USER", "GPU-HOURS", "JOBS")
    cells = [[_printable(row.name), f"{row.gpu_seconds / 3600:.2f}", str(row.jobs)] for row in rows]
    if parsable:
        return _lines([*(["|".join(headers)] if header else []), *("|".join(c) for c in cells)])
    if not header:
        return _table(headers, cells, frozenset(headers[1:]), header=False)
    rule = "-" * 80
    what = "Unix group" if by_group else "user"
    banner = [
        rule,
        f"GPU usage by {what} {_iso(start)} - {_iso(end)} ({round(end - start)} secs)",
        "Usage reported in GPU-hours",
        rule,
    ]
    return _lines(banner) + _table(headers, cells, frozenset(headers[1:]), header=True)


def _iso(epoch: float) -> str:
    from datetime import datetime  # deferred: only sreport prints dates this way

    return datetime.fromtimestamp(epoch).isoformat(timespec="seconds")


def format_sreport_json(rows: Sequence[UsageRow], start: float, end: float, by_group: bool) -> str:
    """`{"start", "end", "by", "rows": [{"name", "gpu_seconds", "gpu_hours", "jobs"}]}`."""
    return _dump(
        {
            "start": start,
            "end": end,
            "by": "group" if by_group else "user",
            "rows": [{**row.to_wire(), "gpu_hours": row.gpu_seconds / 3600} for row in rows],
        }
    )


# -- scontrol show node / show partition ----------------------------------------------

# Slurm's node state words for gbatch's (SUSPECT: silent for a while, no new jobs, as
# Slurm's NOT_RESPONDING, which it shows as IDLE* etc.; here plainly).
_SLURM_NODE_STATE = {
    NodeState.IDLE: "IDLE",
    NodeState.MIXED: "MIXED",
    NodeState.ALLOCATED: "ALLOCATED",
    NodeState.DRAINED: "DRAINED",
    NodeState.SUSPECT: "NOT_RESPONDING",
    NodeState.DOWN: "DOWN",
}


def _node_tres(cpus: int | None, mem_mb: int | None, gpus: int, nodes: int | None = None) -> str:
    """scontrol's TRES list of a node or partition: `cpu=8,mem=64000M,node=1,gres/gpu=2`,
    unknown parts left out (a job's, as sacct prints it, is _tres)."""
    parts = [] if cpus is None else [f"cpu={cpus}"]
    if mem_mb is not None:
        parts.append(f"mem={mem_mb}M")
    if nodes is not None:
        parts.append(f"node={nodes}")
    if gpus:
        parts.append(f"gres/gpu={gpus}")
    return ",".join(parts)


def format_node_details(node: NodeInfo) -> str:
    """One node as `scontrol show node` prints it: `NodeName=...` then key=value lines
    indented three spaces. CPUTot/RealMemory are what the node reported (`N/A` when it
    has not); CfgTRES what it has, AllocTRES what gbatch's jobs there hold."""
    cpus = "N/A" if node.cpus_total is None else str(node.cpus_total)
    memory = "N/A" if node.mem_total_mb is None else str(node.mem_total_mb)
    allocated = node.gpus_allocated
    lines = [
        f"NodeName={_printable(node.name)} NodeAddr={_printable(node.address) or '(null)'}",
        f"   CPUAlloc={node.cpus_allocated} CPUTot={cpus}",
        f"   Gres=gpu:{node.gpus_total} GresUsed=gpu:{allocated}",
        f"   GpuType={_gpu_type(node)}",
        f"   RealMemory={memory} AllocMem={node.mem_allocated_mb}",
        f"   State={_SLURM_NODE_STATE[node.state]}",
        f"   Partitions={','.join(_printable(p) for p in node.partitions) or '(null)'}",
        f"   CfgTRES={_node_tres(node.cpus_total, node.mem_total_mb, node.gpus_total)}",
        "   AllocTRES="
        + (
            _node_tres(node.cpus_allocated, node.mem_allocated_mb or None, allocated)
            if allocated or node.cpus_allocated
            else ""
        ),
        f"   Reason={_printable(node.reason) if node.reason else '(null)'}",
    ]
    return _lines(lines)


def format_partition_details(partition: PartitionInfo, nodes: Sequence[NodeInfo]) -> str:
    """One partition as `scontrol show partition` prints it: `PartitionName=...` then
    key=value lines indented three spaces. Totals count its nodes as they report now
    (a node that has not reported adds nothing); State is UP while any node is up."""
    members = [n for n in nodes if n.name in partition.nodes]
    up = [n for n in members if n.state not in (NodeState.DOWN, NodeState.SUSPECT)]
    cpus = sum(n.cpus_total or 0 for n in members)
    memory = sum(n.mem_total_mb or 0 for n in members)
    gpus = sum(n.gpus_total for n in members)
    default_time = (
        "NONE" if partition.default_time is None else format_duration(partition.default_time)
    )
    lines = [
        f"PartitionName={_printable(partition.name)}",
        f"   Default={'YES' if partition.default else 'NO'} DefaultTime={default_time} "
        f"MaxTime={format_duration(partition.max_time)}",
        f"   Nodes={','.join(_printable(n) for n in partition.nodes) or '(null)'}",
        f"   State={'UP' if up or not members else 'DOWN'} TotalCPUs={cpus} "
        f"TotalNodes={len(partition.nodes)} TotalGPUs={gpus}",
        f"   TRES={_node_tres(cpus, memory, gpus, len(partition.nodes))}",
    ]
    return _lines(lines)
