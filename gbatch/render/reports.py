"""The reports sshare, sprio, seff and sreport, with `--json`.

sshare shows fair share and limits, sprio pending jobs' priority factors, seff a job's
efficiency and sreport GPU-hours per user or group.
"""

from __future__ import annotations

from collections.abc import Sequence

from gbatch.core.constants import (
    IMPLICIT_PARTITION,
)
from gbatch.core.labels import memory_text, printable
from gbatch.core.model import (
    FINAL_STATES,
    Job,
    JobState,
)
from gbatch.core.timefmt import format_duration, format_elapsed_fixed, format_timestamp
from gbatch.render.cells import aligned_table, as_json, as_text, elapsed_seconds

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:  # only their commands' replies carry these (start-up)
    from gbatch.core.gpuusage import GpuUsage
    from gbatch.core.limits import UserShare
    from gbatch.core.views import JobPriority, UsageRow


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
    """sshare's table: one line per user, in the order given, usage figures then limits.

    Slurm's sshare figures come first (RawUsage in decayed GPU-seconds, EffectvUsage its
    share of everyone's, FairShare the planner's factor), then what the user's jobs hold
    now beside each limit: pending jobs and max_pending_jobs, jobs on nodes and
    max_running_jobs, GPUs and max_gpus, then max_array_size. No limit reads `-` (empty
    with `parsable`, sshare -P's `|` form).
    """
    none = "" if parsable else "-"
    rows = [
        [
            printable(share.user),
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
        return as_text([*lines, *("|".join(row) for row in rows)])
    return aligned_table(_SSHARE_HEADERS, rows, frozenset(_SSHARE_HEADERS[1:]), header=header)


def format_sshare_json(shares: Sequence[UserShare]) -> str:
    """sshare's `{"users": [...]}`: the figures, what the jobs hold, and `limits`.

    The protocol's fields, with Slurm's name for the usage (`raw_usage`); `limits` is
    null when the user has none.
    """
    from gbatch.protocol.codec import share_to_wire

    return as_json(
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


_SPRIO_HEADERS = ("JOBID", "PARTITION", "USER", "PRIORITY", "AGE", "FAIRSHARE", "NICE", "QOS")


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
    "QOS",
)


_SPRIO_TEXT = frozenset({"PARTITION", "USER", "SUBMIT_TIME"})


def format_sprio(
    jobs: Sequence[JobPriority], now: float, *, long: bool = False, header: bool = True
) -> str:
    """sprio's table: one line per pending job, in the order given.

    PRIORITY is what the planner sorts by after the fair-share factor: the job's
    priority - nice; FAIRSHARE its user's factor (0..1, sorted first); AGE how long it
    has waited (submit time breaks ties); QOS the weight of its QOS, part of PRIORITY.
    `long` adds RANK (its place in that order),
    JOBPRIO (priority before nice) and SUBMIT_TIME.
    """
    rows = []
    for job in jobs:
        cells = {
            "JOBID": str(job.id),
            "PARTITION": printable(job.partition or IMPLICIT_PARTITION),
            "USER": printable(job.user),
            "RANK": str(job.rank),
            "PRIORITY": str(job.effective_priority),
            "JOBPRIO": str(job.priority),
            "NICE": str(job.nice),
            "FAIRSHARE": f"{job.fairshare:.7f}",
            "AGE": format_duration(max(0.0, now - job.submit_time)),
            "SUBMIT_TIME": format_timestamp(job.submit_time),
            "QOS": str(job.qos_priority),
        }
        rows.append([cells[name] for name in (_SPRIO_LONG_HEADERS if long else _SPRIO_HEADERS)])
    headers = _SPRIO_LONG_HEADERS if long else _SPRIO_HEADERS
    return aligned_table(headers, rows, frozenset(headers) - _SPRIO_TEXT, header=header)


def format_sprio_json(jobs: Sequence[JobPriority], now: float) -> str:
    """sprio's `{"jobs": [...]}`: the protocol's fields, `effective_priority` and `age`.

    `age` is how long the job has waited, in seconds.
    """
    return as_json(
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


def _percent(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.2f}%" if whole > 0 else "0.00%"


def format_seff(
    job: Job, now: float, *, cluster: str, group: str, gpu_usage: GpuUsage | None = None
) -> str:
    """Slurm's seff report for one job, and gbatch's GPU part.

    gbatch measures neither a job's CPU time nor its memory: those lines say
    `not measured` rather than a made-up 0. Efficiency of the time limit: the run's
    wall-clock time over its limit. The GPU lines come from `gpu_usage`, the samples of
    the job's current run. A job that has not started gets Slurm's `Efficiency not
    available` line instead.
    """
    lines = [f"Job ID: {job.id}"]
    if job.array_job_id is not None:
        lines.append(f"Array Job ID: {job.array_job_id}_{job.spec.array_task}")
    state = job.state.value
    if job.state in FINAL_STATES:
        state += f" (exit code {job.exit_code or 0})"
    lines += [
        f"Cluster: {printable(cluster)}",
        f"User/Group: {printable(job.user)}/{printable(group)}",
        f"State: {state}",
        # As seff: a job across nodes gives its nodes and each one's cores.
        *(
            [f"Nodes: {job.spec.nodes}", f"Cores per node: {job.spec.cpus_counted}"]
            if job.spec.nodes > 1
            else [f"Cores: {job.spec.cpus_counted}"]
        ),
    ]
    if job.state is JobState.PENDING or job.start_time is None:
        lines.append(f"Efficiency not available for jobs in the {job.state.value} state.")
        return as_text(lines)
    elapsed = elapsed_seconds(job, now)
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
        + (f" ({memory_text(memory)} requested)" if memory is not None else ""),
    ]
    gpus = ",".join(str(i) for i in job.gpus)
    where = f" (node {printable(job.node or '')}, GPU {gpus})" if job.gpus else ""
    if job.peers:  # every node with its GPUs
        where = (
            " ("
            + "; ".join(
                f"node {printable(name)}, GPU {','.join(map(str, on))}"
                for name, on in job.placements
            )
            + ")"
        )
    lines += [
        f"GPUs: {job.gpu_count}{where}",
        f"GPU-hours: {job.gpu_count * elapsed / 3600:.2f}",
    ]
    if job.gpus:
        from gbatch.core.gpuusage import seff_lines

        lines += seff_lines(gpu_usage, job.spec.gpu_mem_mb)
    return as_text(lines)


def format_sreport(
    rows: Sequence[UsageRow],
    start: float,
    end: float,
    *,
    by: str = "user",
    header: bool = True,
    parsable: bool = False,
) -> str:
    """sreport's table: GPU-hours per user (or group, or partition) inside [start, end).

    Rows stay in the order given (accounting.usage_by's: most first). Slurm's sreport
    banner (the period and its length) stands above the table unless `parsable`
    (`|`-separated, sreport -P) or without `header`.
    """
    headers = (by.upper(), "GPU-HOURS", "JOBS")
    cells = [[printable(row.name), f"{row.gpu_seconds / 3600:.2f}", str(row.jobs)] for row in rows]
    if parsable:
        return as_text([*(["|".join(headers)] if header else []), *("|".join(c) for c in cells)])
    if not header:
        return aligned_table(headers, cells, frozenset(headers[1:]), header=False)
    rule = "-" * 80
    what = {"group": "Unix group"}.get(by, by)
    banner = [
        rule,
        f"GPU usage by {what} {_iso(start)} - {_iso(end)} ({round(end - start)} secs)",
        "Usage reported in GPU-hours",
        rule,
    ]
    return as_text(banner) + aligned_table(headers, cells, frozenset(headers[1:]), header=True)


def _iso(epoch: float) -> str:
    from datetime import datetime  # deferred: only sreport prints dates this way

    return datetime.fromtimestamp(epoch).isoformat(timespec="seconds")


def format_sreport_json(rows: Sequence[UsageRow], start: float, end: float, by: str) -> str:
    """`{"start", "end", "by", "rows": [{"name", "gpu_seconds", "gpu_hours", "jobs"}]}`.

    `by`: user, group or partition."""
    return as_json(
        {
            "start": start,
            "end": end,
            "by": by,
            "rows": [{**row.to_wire(), "gpu_hours": row.gpu_seconds / 3600} for row in rows],
        }
    )
