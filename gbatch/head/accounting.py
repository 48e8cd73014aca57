"""sreport's arithmetic: GPU-seconds that jobs' runs spent inside a period.

Pure: the caller passes the jobs, the period and the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from gbatch.core.model import Job, JobState
from gbatch.core.views import UsageRow


def gpu_seconds_in(
    job: Job, start: float, end: float, now: float, gpus: float | None = None
) -> float:
    """GPU-seconds of `job`'s run that fall inside [start, end).

    Its GPUs (`gpus`, what it is charged: a share of one GPU a fraction; default its
    count on every node) times the overlap of start_time..end_time (..now while it runs) with the
    period. 0 for a job that never started, and for a PENDING one (a requeued job keeps its
    old start_time, and its old run's GPUs are no longer its own). Only the last run is
    known: an earlier run of a requeued job is not counted.
    """
    if job.start_time is None or job.state is JobState.PENDING or not job.gpus:
        return 0.0
    run_end = job.end_time if job.end_time is not None else now
    overlap = min(run_end, end) - max(job.start_time, start)
    return (job.gpu_count if gpus is None else gpus) * overlap if overlap > 0 else 0.0


def usage_by(
    jobs: Iterable[Job],
    start: float,
    end: float,
    now: float,
    key: Callable[[Job], str],
    charged: Callable[[Job], float] | None = None,
    counted: Mapping[str, tuple[float, int]] | None = None,
) -> list[UsageRow]:
    """GPU-seconds inside [start, end) and the number of jobs that used any, per `key(job)`.

    `key` gives a user or a group; `charged` the GPUs a job is charged (Fleet.charged_gpus:
    a share of one GPU a fraction; default its count). Most GPU-seconds first, then by
    name. Jobs that used none inside the period are left out. `counted`: (GPU-seconds,
    jobs) per name already summed elsewhere (Store.gpu_seconds_between), added in.
    """
    seconds: dict[str, float] = {name: sums[0] for name, sums in (counted or {}).items()}
    counts: dict[str, int] = {name: sums[1] for name, sums in (counted or {}).items()}
    for job in jobs:
        used = gpu_seconds_in(job, start, end, now, None if charged is None else charged(job))
        if used <= 0:
            continue
        name = key(job)
        seconds[name] = seconds.get(name, 0.0) + used
        counts[name] = counts.get(name, 0) + 1
    rows = [UsageRow(name, seconds[name], counts[name]) for name in seconds]
    return sorted(rows, key=lambda row: (-row.gpu_seconds, row.name))
