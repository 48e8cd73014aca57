"""sacct's output: Slurm's `--format` fields at sacct's widths, `-P`, `--units`, `--json`.

An array's pending tasks are folded into one line. A job that ran steps (gbatch srun,
salloc) is followed by a line per step, as Slurm's: `N.batch` (a batch job's script),
`N.interactive` (salloc's shell), `N.0`, `N.1`, ...
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from gbatch.core.arrays import pos_of
from gbatch.core.constants import NORMAL_QOS as NORMAL
from gbatch.core.jobids import collapse_pending, job_label
from gbatch.core.labels import memory_text, printable
from gbatch.core.model import (
    Job,
    JobState,
)
from gbatch.core.timefmt import format_elapsed_fixed, format_timestamp
from gbatch.render.cells import (
    FormatError,
    as_text,
    checked_width,
    elapsed_seconds,
    exit_code_text,
    jobs_json,
    node_count,
    nodelist_text,
    params_text,
    partition_text,
    reason_text,
    time_limit_fixed,
    tres_text,
)

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:  # only their commands' replies carry these (start-up)
    from gbatch.core.gpuusage import GpuUsage
    from gbatch.core.steps import Step


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


@dataclass(frozen=True)
class _Field:
    name: str
    width: int  # negative: left-justified, as in sacct's field table
    value: Callable[[Job, float], str]


def _alloc_gpus(job: Job) -> int:
    """The GPUs it holds (held) on every node; none while pending."""
    return 0 if job.state is JobState.PENDING else job.gpu_count


_SACCT_FIELDS: tuple[_Field, ...] = (
    _Field("JobID", -12, lambda j, _: job_label(j)),
    _Field("JobIDRaw", -12, lambda j, _: str(j.id)),
    _Field("JobName", 10, lambda j, _: printable(j.spec.name)),
    _Field("User", 9, lambda j, _: printable(j.user)),
    _Field("UID", 6, lambda j, _: str(j.uid)),
    _Field("Partition", 10, lambda j, _: partition_text(j)),
    _Field("QOS", 10, lambda j, _: printable(j.spec.qos or NORMAL)),
    _Field("State", 10, lambda j, _: j.state.value),
    _Field("ExitCode", 8, lambda j, _: exit_code_text(j)),
    _Field("Elapsed", 10, lambda j, now: format_elapsed_fixed(elapsed_seconds(j, now))),
    _Field("AllocGPUS", 9, lambda j, _: str(_alloc_gpus(j))),
    _Field("NodeList", 15, lambda j, _: nodelist_text(j) if j.node else "None assigned"),
    # Slurm's: the nodes asked (-N) until allocated, then those held.
    _Field("NNodes", 8, lambda j, _: str(node_count(j))),
    _Field("Submit", 19, lambda j, _: format_timestamp(j.submit_time)),
    _Field("Start", 19, lambda j, _: format_timestamp(j.start_time)),
    _Field("End", 19, lambda j, _: format_timestamp(j.end_time)),
    _Field("Timelimit", 10, lambda j, _: time_limit_fixed(j)),
    _Field("Reason", 22, lambda j, _: reason_text(j)),
    _Field("Attempt", 7, lambda j, _: str(j.attempt)),
    # gbatch's: a sweep task's parameters (gbatch/jobspec/sweep.py), empty for other jobs.
    _Field("Params", 20, lambda j, _: printable(params_text(j.spec.params))),
    _Field("AllocTRES", -10, lambda j, _: "" if _never_allocated(j) else tres_text(j.spec)),
    _Field("ReqTRES", -10, lambda j, _: tres_text(j.spec)),
    _Field(
        "AllocCPUS",
        10,
        lambda j, _: "0" if _never_allocated(j) else str(j.spec.cpus_counted * j.spec.nodes),
    ),
    _Field("ReqMem", 10, lambda j, _: _sacct_memory(j.spec.memory_mb, None)),
    _Field("Comment", 15, lambda j, _: printable(j.spec.comment or "")),
    # The GPUs' part only (gres/gpumem, gres/gpuutil), from format_sacct's gpu_usage.
    _Field("TRESUsageInMax", -10, lambda j, _: ""),
    # gbatch's: the most GPU memory the job's own processes used, from gpu_usage too.
    _Field("MaxGpuMem", 10, lambda j, _: ""),
)
# The fields format_sacct fills from its gpu_usage (sacct asks the daemon for it then).
GPU_USAGE_FIELDS = frozenset({"tresusageinmax", "maxgpumem"})


# What a step's line leaves blank, as Slurm's sacct does: the job's own.
_STEP_BLANK = frozenset(
    {"User", "UID", "Partition", "Timelimit", "Reason", "Comment", "Params", "Attempt", "Submit"}
)

UNITS = "KMGTP"


# Fields read from spec keys a brief listing (requests.ListJobs brief) leaves out.
SACCT_FULL_SPEC_FIELDS = frozenset(
    {"partition", "alloctres", "reqtres", "alloccpus", "reqmem", "comment"}
)


def _never_allocated(job: Job) -> bool:
    """Pending, or ended without ever starting (cancelled while pending): no TRES held."""
    return job.state is JobState.PENDING or job.start_time is None


def _sacct_memory(mib: int | None, unit: str | None) -> str:
    """ReqMem: `4G`, `1500M` (`0` when none was asked); with sacct --units, in that
    unit, two decimals unless whole (`1.46G`)."""
    if mib is None:
        return "0"
    if unit is None:
        return memory_text(mib)
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
        width = checked_width(match.group(2), raw)
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
    steps: Mapping[int, Sequence[Step]] | None = None,
) -> str:
    """Render jobs as `sacct` does, one line per job in the order given, its steps under it.

    An array's PENDING tasks fold into one line, N_[4-15], at the place of the first (one
    line each with `expand_arrays`, sacct --array).

    Fixed-width columns at sacct's widths, a dashed line under the header; with
    `parsable` (sacct -P) fields are joined by '|' with no padding, no dashes.
    Raises FormatError for an unknown field (the message lists the valid ones).
    Unlike sacct, lines carry no trailing blank. `units` (one of UNITS, sacct --units)
    prints ReqMem in that unit. `gpu_usage` (job id -> its current run's GPU samples)
    fills TRESUsageInMax and MaxGpuMem. `steps` (job id -> its steps, sacct without -X) adds a line
    for each after its job's (_step_lines). SacctTable writes the same a page at a time.
    """
    table = SacctTable(
        fields=fields,
        parsable=parsable,
        units=units,
        gpu_usage=gpu_usage,
        expand_arrays=expand_arrays,
    )
    head = table.header() if header else []
    return as_text([*head, *table.lines(jobs, now, steps)])


class SacctTable:
    """format_sacct's output made a page of jobs at a time (issue 35).

    For a listing too large to hold: its header once, then each page's lines.

    The columns are fixed-width, so a page's lines need no other page. An array's
    pending tasks fold into one line only among the jobs of one call: a caller paging
    holds back a page's trailing run of one array's jobs (held_back) and passes it with
    the next page. Raises FormatError for an unknown field."""

    def __init__(
        self,
        *,
        fields: Sequence[str] | None = None,
        parsable: bool = False,
        units: str | None = None,
        gpu_usage: Mapping[int, GpuUsage] | None = None,
        expand_arrays: bool = False,
    ) -> None:
        from gbatch.core.gpuusage import max_gpu_mem, tres_usage  # deferred: squeue needs none

        columns = _resolve_sacct_fields(SACCT_DEFAULT_FIELDS if fields is None else fields)
        usage = {} if gpu_usage is None else gpu_usage  # the caller's, filled as it pages
        from_usage: dict[str, Callable[[GpuUsage | None], str]] = {
            "TRESUsageInMax": tres_usage,
            "MaxGpuMem": max_gpu_mem,
        }

        def usage_field(c: _Field) -> _Field:
            show = from_usage[c.name]
            return _Field(c.name, c.width, lambda j, _: show(usage.get(j.id)))

        columns = [usage_field(c) if c.name in from_usage else c for c in columns]
        if units is not None:
            columns = [
                _Field(c.name, c.width, lambda j, _: _sacct_memory(j.spec.memory_mb, units))
                if c.name == "ReqMem"
                else c
                for c in columns
            ]
        self.columns = columns
        self.parsable = parsable
        self.expand_arrays = expand_arrays
        self.from_usage = from_usage
        self.usage = usage

    def header(self) -> list[str]:
        """The header's lines: the names (and sacct's dashes unless parsable)."""
        columns = self.columns
        if self.parsable:
            return ["|".join(c.name for c in columns)]
        return [
            " ".join(_sacct_cell(c.name, c.width, is_header=True) for c in columns).rstrip(),
            " ".join("-" * abs(c.width) for c in columns).rstrip(),
        ]

    def lines(
        self, jobs: Sequence[Job], now: float, steps: Mapping[int, Sequence[Step]] | None = None
    ) -> list[str]:
        """The lines of `jobs` (and of their `steps`), without newlines."""
        columns = self.columns
        # An array's pending tasks read as one line N_[4-15], as Slurm's one record of them;
        # with `expand_arrays` (sacct --array) one line each, made from the record's cells:
        # a task's own are its label (JobID) and those read by its id (JobIDRaw, GPU usage).
        from_usage = self.from_usage
        usage = self.usage
        labelled: Iterable[tuple[Job, str, int]] = (
            _expanded(jobs)
            if self.expand_arrays
            else ((job, label, job.id) for job, label in collapse_pending(jobs))
        )
        rows = []
        record: Job | None = None
        shared: list[str] = []  # the record's cells
        for job, label, job_id in labelled:
            if job_id != job.id and steps is not None and job.start_time is not None:
                job = _task_job(job, job_id, label)  # a batch step line of its own (never, pending)
            if job is not record:
                record = job
                shared = [c.value(job, now) for c in columns]
            row = list(shared)
            for at, c in enumerate(columns):
                if c.name == "JobID":
                    row[at] = label
                elif c.name == "JobIDRaw":
                    row[at] = str(job_id)
                elif c.name in from_usage and job_id != job.id:
                    row[at] = from_usage[c.name](usage.get(job_id))
            rows.append(row)
            if steps is None or (job_id != job.id and job_id not in steps):
                continue
            if job.array_more:  # its steps' lines read its own task's label
                job = replace(job, array_more=())
            if job_id != job.id:
                job = _task_job(job, job_id, label)
            for step, step_label in _step_lines(job, steps.get(job_id, ()), True):
                rows.append(
                    [
                        step_label
                        if c.name == "JobID"
                        else ""
                        if c.name in _STEP_BLANK
                        else c.value(step, now)
                        for c in columns
                    ]
                )
        if self.parsable:
            return ["|".join(row) for row in rows]
        lines = []
        for row in rows:
            cells = (
                _sacct_cell(text, c.width, is_header=False)
                for c, text in zip(columns, row, strict=True)
            )
            lines.append(" ".join(cells).rstrip())
        return lines

    def held_back(self, jobs: Sequence[Job]) -> int:
        """Where the run of one array's jobs that ends `jobs` begins, if held back.

        Held back when it holds a pending task (whose folded line the next page's
        tasks may add to); len(jobs) when none is to be held back."""
        if self.expand_arrays or not jobs:
            return len(jobs)
        array = jobs[-1].array_job_id
        if array is None:
            return len(jobs)
        begin = len(jobs)
        while begin > 0 and jobs[begin - 1].array_job_id == array:
            begin -= 1
        tail = jobs[begin:]
        return begin if any(j.state is JobState.PENDING for j in tail) else len(jobs)


def _expanded(jobs: Iterable[Job]) -> Iterator[tuple[Job, str, int]]:
    """sacct --array's lines: (job, its JobID, its id), and after a record standing for
    more pending tasks (Job.array_more), (the record, `N_K`, the task's id) for each."""
    for job in jobs:
        if not job.array_more:
            yield job, job_label(job), job.id
            continue
        array = job.array_job_id
        assert array is not None
        yield job, f"{array}_{job.spec.array_task}", job.id
        for first, last in job.array_more:
            for index in range(first, last + 1):
                yield job, f"{array}_{index}", array + (pos_of(job.spec, index) or 0)


def _task_job(record: Job, job_id: int, label: str) -> Job:
    """The task `job_id` (labelled `N_K`) of `record` as a Job of its own (expand_tasks')."""
    index = int(label.rsplit("_", 1)[1])
    spec = replace(record.spec, array_task=index, array_pos=job_id - (record.array_job_id or 0))
    return replace(record, id=job_id, spec=spec, array_more=())


def _step_lines(job: Job, steps: Sequence[Step], listed: bool = True) -> list[tuple[Job, str]]:
    """The lines under `job` for its `steps`: each a Job made of the step's own fields
    (name, state, times, exit, and its own GPUs, CPUs and memory where it asked for
    them: AllocTRES, AllocGPUS), with its `N.M` label. None unless `listed` (sacct -X).

    Every batch job that started shows its script as `N.batch` first, as Slurm does (a
    job that timed out shows it CANCELLED, as Slurm's, the script having been killed);
    an srun/salloc allocation has none. No `N.extern`: gbatch has no extern step.
    """
    if not listed:
        return []
    lines: list[tuple[Job, str]] = []
    # An srun/salloc allocation's first step leads it (core/steps.py): it has no script.
    allocation = job.spec.interactive is not None or any(step.leads for step in steps)
    if not allocation and job.start_time is not None:
        state = JobState.CANCELLED if job.state is JobState.TIMEOUT else job.state
        # The script runs on the first node alone (BatchHost), as Slurm's batch step.
        batch = replace(
            job, spec=job.spec.replace(name="batch", nodes=1), state=state, reason="", peers=()
        )
        lines.append((batch, f"{job_label(job)}.batch"))
    for step in steps:
        spec = job.spec.replace(name=step.name)
        if step.gpus is not None:  # GPUs of the job's first node's (StepAsk)
            spec = spec.replace(gpus=len(step.gpus), nodes=1)
        if step.cpus is not None:
            spec = spec.replace(cpus=step.cpus)
        if step.mem_mb is not None:
            spec = spec.replace(mem_mb=step.mem_mb, mem_per_gpu_mb=None, mem_per_cpu_mb=None)
        shown = replace(
            job,
            spec=spec,
            gpus=job.gpus if step.gpus is None else step.gpus,
            peers=job.peers if step.gpus is None else (),
            state=step.state,
            start_time=step.start_time,
            end_time=step.end_time,
            exit_code=step.exit_code,
            exit_signal=step.exit_signal,
            reason=step.reason,
        )
        lines.append((shown, step.label))
    return lines


def format_sacct_json(jobs: Sequence[Job], now: float) -> str:
    """Same shape as format_squeue_json: `{"jobs": [...]}`."""
    return jobs_json(jobs, now)
