"""sreport's arithmetic: GPU-seconds that jobs' runs spent inside a period.

Pure: the caller passes the jobs, the period and the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from gbatch.core.model import Job, JobState
from gbatch.core.views import UsageRow


def gpu_seconds_in(
    job: Job, start: float, end: float, now: float, gpus: float | None = None
) -> float:
    """GPU-seconds of `job`'s run that fall inside [start, end).

    Its GPUs (`gpus`, what it is charged: a share of one GPU a fraction; default its
    count on every node) times the overlap of start_time..end_time (..now while it runs) with the
    period. 0 for a job that never started, and for a PENDING one (a requeued job keeps its
    old start_time, and its old run's GPUs are no longer its own). The job's last run: an
    earlier one that a requeue ended is counted as `as_earlier_run` makes it.
    """
    if job.start_time is None or job.state is JobState.PENDING or not job.gpus:
        return 0.0
    run_end = job.end_time if job.end_time is not None else now
    overlap = min(run_end, end) - max(job.start_time, start)
    return (job.gpu_count if gpus is None else gpus) * overlap if overlap > 0 else 0.0


def as_earlier_run(
    job: Job, start: float, end: float, placements: Sequence[tuple[str, Sequence[int]]]
) -> Job:
    """`job` as it was in a run a requeue ended (the store's earlier_runs), for sums here.

    That run's times and GPUs, for the arithmetic here and nothing else. Its state is an
    ended one (COMPLETED: the requeue's run ended; the job itself may be pending again,
    which gpu_seconds_in would count as no run at all)."""
    first, *others = placements or [("", ())]
    return replace(
        job,
        state=JobState.COMPLETED,
        start_time=start,
        end_time=end,
        node=first[0] or None,
        gpus=tuple(first[1]),
        gpu_uuids=(),
        peers=tuple((node, tuple(gpus)) for node, gpus in others),
    )


def earlier_usage(
    runs: Iterable[tuple[Job, Job]],
    start: float,
    end: float,
    now: float,
    key: Callable[[Job], str],
    charged: Callable[[Job], float] | None = None,
) -> dict[str, tuple[float, int]]:
    """(GPU-seconds, jobs) per `key` of runs that requeues ended, inside [start, end).

    Each of `runs` is (the job as in that run (as_earlier_run), the job now). A job is
    counted once, and not at all where its last run used GPUs in the period too (usage_by
    counts it there): the jobs column stays a count of jobs, the GPU-seconds every run's.
    For usage_by's `counted`."""
    seconds: dict[str, float] = {}
    jobs: dict[str, set[int]] = {}
    last_counted: dict[int, bool] = {}
    for run, last in runs:
        used = gpu_seconds_in(run, start, end, now, None if charged is None else charged(run))
        if used <= 0:
            continue
        name = key(run)
        seconds[name] = seconds.get(name, 0.0) + used
        if last.id not in last_counted:
            gpus = None if charged is None else charged(last)
            last_counted[last.id] = gpu_seconds_in(last, start, end, now, gpus) > 0
        if not last_counted[last.id]:
            jobs.setdefault(name, set()).add(last.id)
    return {name: (seconds[name], len(jobs.get(name, ()))) for name in seconds}


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


def usage_series(
    jobs: Iterable[Job],
    edges: Sequence[float],
    now: float,
    key: Callable[[Job], str],
    charged: Callable[[Job], float] | None = None,
) -> dict[str, list[float]]:
    """GPU-seconds per `key(job)` in each step [edges[i], edges[i+1]), as usage_by counts them.

    A name whose jobs used nothing in any step is left out; each list has a value per step.
    The steps' sum over a name equals usage_by over [edges[0], edges[-1]).
    """
    from bisect import bisect_right  # deferred: only the usage chart steps through time

    steps = len(edges) - 1
    out: dict[str, list[float]] = {}
    for job in jobs:
        if job.start_time is None:
            continue
        gpus = None if charged is None else charged(job)
        run_end = job.end_time if job.end_time is not None else now
        row: list[float] | None = None
        # Only the steps its run overlaps: a month of days costs a short job one or two.
        first = max(bisect_right(edges, job.start_time) - 1, 0)
        for i in range(first, steps):
            if edges[i] >= run_end:
                break
            used = gpu_seconds_in(job, edges[i], edges[i + 1], now, gpus)
            if used > 0:
                row = row if row is not None else out.setdefault(key(job), [0.0] * steps)
                row[i] += used
    return out
