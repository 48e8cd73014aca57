"""sshare, sprio, sreport and the metrics snapshot: figures over users and the queue."""

from __future__ import annotations

import functools
import grp
import itertools
import os
import pwd
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from gbatch.core.limits import Use, UserShare, use_by_user
from gbatch.core.model import ALLOCATED_STATES, Job, JobState
from gbatch.core.views import JobPriority
from gbatch.head.accounting import as_earlier_run, earlier_usage, usage_by
from gbatch.head.daemon import Daemon
from gbatch.head.fairshare import factors
from gbatch.head.handlers.auth import GROUP_CACHE_S, is_admin, require_admin
from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused
from gbatch.head.idlegpu import IDLE_REASON
from gbatch.head.store.reads import EarlierRun
from gbatch.protocol import codec, requests
from gbatch.site.config import IdleGpuPolicy


def on_shares(daemon: Daemon, caller: Caller, request: requests.ShowShares) -> dict[str, Any]:
    """sshare: each user's fair-share figures, what their jobs hold now, and their limits.

    A user sees their own row; admins any user's, or all."""
    wanted = set(request.users)
    if request.all_users or wanted - {caller.user}:
        require_admin(
            daemon,
            caller,
            "shares",
            "users",
            "see other users' shares and limits (yours: `gbatch sshare`)",
        )
    now = daemon.clock()
    allocated = daemon.store.jobs_in(ALLOCATED_STATES)
    usage = daemon.usage(allocated, now)
    held = use_by_user(allocated)
    if request.all_users:
        pending = daemon.store.pending_counts()
        named = daemon.config.limits.users
        shown = sorted(
            {*pending, *held, *named, *(user for user, used in usage.items() if used > 0)}
        )
    else:
        shown = sorted(wanted or {caller.user})
        pending = daemon.store.pending_counts(shown)
    share = factors(usage, {*pending, *shown})
    total = sum(max(used, 0.0) for used in usage.values())
    exempt = {"root", _server_user_name()}
    rows = []
    for user in shown:
        used = max(usage.get(user, 0.0), 0.0)
        limits = daemon.limits_for(user)
        if user in exempt:  # never refused at submit: see auth.submit_limits
            limits = replace(limits, max_pending_jobs=None, max_array_size=None)
        mine = held.get(user, Use())
        rows.append(
            UserShare(
                user=user,
                usage=used,
                effective_usage=used / total if total > 0 else 0.0,
                fairshare=share.get(user, 1.0),
                pending=pending.get(user, 0),
                running=mine.running_jobs,
                gpus=mine.gpus,
                limits=limits,
            )
        )
    return {"users": [codec.share_to_wire(row) for row in rows], "now": now}


def on_priorities(
    daemon: Daemon, caller: Caller, request: requests.ShowPriorities
) -> dict[str, Any]:
    """sprio: pending jobs and what orders them in the planner, in the planner's order.

    The order: fair-share factor of their user, then priority - nice, then submit time,
    then id. As Slurm's sprio, only jobs the scheduler may consider: held jobs (priority
    0 in Slurm) and jobs whose --begin is still to come are left out, even when named.
    The factors are the planner's: over the users whose jobs its latest pass ordered (a
    user whose every job is held is not among them) and every user with usage, whoever
    the caller may see. Everyone sees the queue; under private_data a non-admin sees
    only their own.
    """
    now = daemon.clock()
    users: Sequence[str] | None = request.users or None
    private = daemon.config.private_data and not is_admin(daemon, caller)
    if private:
        if users is not None and caller.user not in users:
            return {"jobs": [], "now": now}
        users = [caller.user]
    found = daemon.store.jobs(
        ids=request.ids or None, states=[JobState.PENDING], users=users, finished=None
    )
    found = [j for j in found if not j.held and (j.spec.begin is None or j.spec.begin <= now)]
    if private:
        found = [j for j in found if j.uid == caller.uid]
    usage = daemon.usage(daemon.store.jobs_in(ALLOCATED_STATES), now)
    share = factors(usage, daemon.planned_users)
    ordered = sorted(
        found,
        key=lambda j: (-share.get(j.user, 1.0), -j.spec.effective_priority, j.submit_time, j.id),
    )
    rank = {j.id: place for place, j in enumerate(ordered, 1)}
    return {
        "jobs": [
            JobPriority(
                id=j.id,
                user=j.user,
                partition=j.spec.partition,
                array_job_id=j.array_job_id,
                array_task=j.spec.array_task,
                priority=j.spec.priority,
                nice=j.spec.nice,
                fairshare=share.get(j.user, 1.0),
                submit_time=j.submit_time,
                held=j.held,
                rank=rank[j.id],
                qos=j.spec.qos or "normal",
                qos_priority=j.spec.qos_priority,
            ).to_wire()
            for j in found
        ],
        "now": now,
    }


@functools.lru_cache(maxsize=1024)
def _group_of(uid: int, epoch: int) -> str:
    """The name of `uid`'s primary group (its number when the system has no name)."""
    try:
        gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        return f"uid:{uid}"
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def on_usage_report(
    daemon: Daemon, caller: Caller, request: requests.ReportUsage
) -> dict[str, Any]:
    """sreport: GPU-seconds inside [start, end) by user or by Unix group.

    A job's group is its submitter's primary group, as the system names it now. A user
    sees their own row, as in sshare; other users, all users and groups are for admins.
    By partition, every user's jobs are summed for anyone, as the usage chart does
    (`""`: a job queued before partitions existed)."""
    if not request.end > request.start:
        raise Refused("invalid", "the period's end must be after its start. Check -S and -E")
    if request.by_partition and (request.by_group or request.users):
        raise Refused(
            "invalid", "--partition sums every user's jobs: give it without -u or --group"
        )
    wanted = set(request.users)
    if request.all_users or request.by_group or wanted - {caller.user}:
        require_admin(
            daemon,
            caller,
            "usage_report",
            "users",
            "see other users' or groups' usage (yours: `gbatch sreport`)",
        )
    now = daemon.clock()
    everyone = request.all_users or request.by_group or request.by_partition
    users = None if everyone else sorted(wanted or {caller.user})
    epoch = int(time.monotonic() // GROUP_CACHE_S)
    # Runs of whole GPUs on one node summed in SQL; the others (shares of a card, jobs
    # across nodes) as they are read, a page of Jobs at a time (issue 35).
    counted: dict[str, tuple[float, int]] = {}
    # The SQL sums are per user or per group; --partition sums every run as read.
    summed = (
        {}
        if request.by_partition
        else daemon.store.gpu_seconds_between(
            request.start, request.end, now, users, by_uid=request.by_group
        )
    )
    for key, (seconds, jobs) in summed.items():
        name = _group_of(int(key), epoch) if request.by_group else str(key)  # type: ignore[call-overload]
        was = counted.get(name, (0.0, 0))
        counted[name] = (was[0] + seconds, was[1] + jobs)
    # A requeued job's earlier runs: their GPU-seconds too (fair share charged them).
    key = _usage_key(request, epoch)
    earlier = [
        (as_earlier_run(job, r.start, r.end, r.placements), job)
        for r, job in _earlier_runs(daemon, request.start, request.end)
        if users is None or job.user in users
    ]
    extra = earlier_usage(earlier, request.start, request.end, now, key, daemon.fleet.charged_gpus)
    for name, (seconds, jobs) in extra.items():
        was = counted.get(name, (0.0, 0))
        counted[name] = (was[0] + seconds, was[1] + jobs)
    ran = daemon.store.runs_between(
        request.start, request.end, users, uncounted=not request.by_partition
    )
    rows = usage_by(ran, request.start, request.end, now, key, daemon.fleet.charged_gpus, counted)
    return {
        "rows": [row.to_wire() for row in rows],
        "start": request.start,
        "end": request.end,
        "now": now,
    }


MAX_USAGE_STEPS = 400  # a year and more of days; 400 bars is as many as a chart shows
MAX_USAGE_SPAN_S = 400 * 86400


def on_usage_series(
    daemon: Daemon, caller: Caller, request: requests.ReportUsageSeries
) -> dict[str, Any]:
    """The usage chart: sreport's GPU-seconds per step by user and partition, and factors.

    The fair-share factors go beside them. Everyone sees them, as the timeline shows
    everyone's runs; under private_data a non-admin sees their own row, the others'
    summed as one row named "" and no one else's factor (the partitions' sums are
    everyone's, as the timeline's bars are)."""
    from gbatch.head.accounting import usage_series

    edges = request.edges
    if not 2 <= len(edges) <= MAX_USAGE_STEPS + 1:
        raise Refused("invalid", f"usage_series.edges: give 2 to {MAX_USAGE_STEPS + 1} times")
    if any(b <= a for a, b in itertools.pairwise(edges)):
        raise Refused("invalid", "usage_series.edges: give the times in ascending order")
    if edges[-1] - edges[0] > MAX_USAGE_SPAN_S:
        raise Refused("invalid", "usage_series.edges: the period is longer than 400 days")
    now = daemon.clock()
    hide = daemon.config.private_data and not is_admin(daemon, caller)
    ran = daemon.store.jobs_run_between(edges[0], edges[-1])
    ran += [  # a requeued job's earlier runs, as sreport counts them
        as_earlier_run(job, r.start, r.end, r.placements)
        for r, job in _earlier_runs(daemon, edges[0], edges[-1], ran)
    ]
    charged = daemon.fleet.charged_gpus
    users = usage_series(
        ran, edges, now, (lambda j: j.user if not hide or j.uid == caller.uid else ""), charged
    )
    partitions = usage_series(ran, edges, now, lambda j: j.spec.partition or "", charged)
    usage = daemon.usage(daemon.store.jobs_in(ALLOCATED_STATES), now)
    share = factors(usage, {*daemon.store.pending_counts(), *users} - {""})
    if hide:
        share = {caller.user: share.get(caller.user, 1.0)}

    def by_total(rows: dict[str, list[float]]) -> list[list[Any]]:
        return [[name, rows[name]] for name in sorted(rows, key=lambda n: (-sum(rows[n]), n))]

    return {
        "edges": list(edges),
        "now": now,
        "users": by_total(users),
        "partitions": by_total(partitions),
        "shares": [[user, share[user]] for user in sorted(share)],
        "hidden": hide,
    }


def _usage_key(request: requests.ReportUsage, epoch: int) -> Callable[[Job], str]:
    """What sreport sums a job's usage under: its group, its partition or its user."""
    if request.by_group:
        return lambda j: _group_of(j.uid, epoch)
    if request.by_partition:
        return lambda j: j.spec.partition or ""
    return lambda j: j.user


def on_metrics(daemon: Daemon, caller: Caller, request: requests.Metrics) -> dict[str, Any]:
    """The metrics snapshot for Prometheus (GET /metrics), read in a few cheap passes.

    The passes: one grouped count of the jobs not yet ended, the fleet's node rows (the
    latest reports), the usage table,
    and the daemon's own counters. Per-user figures are everyone's: under private_data
    only admins may see them."""
    if daemon.config.private_data:
        require_admin(
            daemon, caller, "metrics", "daemon", "read metrics under private_data (every user's)"
        )
    now = daemon.clock()
    allocated = daemon.store.jobs_in(ALLOCATED_STATES)
    usage = daemon.usage(allocated, now)
    counts = daemon.store.queue_counts()
    share = factors(usage, {user for _, user, _ in counts})
    ticks = daemon.monotonic()
    round_trips = {}
    for name, node in daemon.fleet.nodes.items():
        measured = node.round_trip()
        if measured is not None:
            round_trips[name] = [measured[0], max(0.0, ticks - measured[1])]
    return {
        "now": now,
        "uptime": max(0.0, now - daemon.started_at),
        "jobs": [[*key, n] for key, n in sorted(counts.items())],
        "nodes": [codec.node_to_wire(n) for n in daemon.fleet.node_infos()],
        "round_trips": round_trips,
        "shares": [[user, max(usage.get(user, 0.0), 0.0), share[user]] for user in sorted(share)],
        "daemon": daemon.metrics.to_wire(),
        "idle_gpu_jobs": daemon.store.idle_flagged_count(IDLE_REASON),
        # Which job and user hold each GPU: the join from a GPU's series to its owner.
        "gpu_jobs": sorted(
            [node, gpu, job.id, job.user]
            for job in allocated
            for node, gpus in job.placements
            for gpu in gpus
        ),
    }


def _server_user_name() -> str:
    """The name of the user the daemon runs as (its uid when the system has no name)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


class _Run(NamedTuple):
    """A run drawn on the timeline: its job, attempt, times, placements and state."""

    job: Job
    attempt: int
    start: float
    end: float | None
    placements: tuple[tuple[str, tuple[int, ...]], ...]
    state: str
    reason: str


def on_timeline(daemon: Daemon, caller: Caller, request: requests.ShowTimeline) -> dict[str, Any]:
    """The GPU timeline over [start, end): runs on GPUs, the pending queue, reservations.

    Every run of a job: its last (the job's row) and those requeues ended (earlier_runs).
    Everyone sees the fleet's GPUs, as in Slurm; under private_data a non-admin sees
    another user's run as a bar of "other user": no id, name nor user."""
    from gbatch.core.timeline import MAX_RANGE_S, pending_steps, reservation_windows

    if not request.end > request.start:
        raise Refused("invalid", "timeline: the range's end must be after its start")
    if request.end - request.start > MAX_RANGE_S:
        raise Refused("invalid", "timeline: the range is longer than 34 days. Pick a shorter one")
    now = daemon.clock()
    hide = daemon.config.private_data and not is_admin(daemon, caller)
    last = [j for j in daemon.store.jobs_run_between(request.start, request.end) if j.placements]
    ran = [
        _Run(j, j.attempt, j.start_time or 0.0, j.end_time, j.placements, j.state.value, "")
        for j in last
    ]
    earlier = _earlier_runs(daemon, request.start, request.end, last)
    if earlier:
        ran += [
            _Run(job, r.attempt, r.start, r.end, r.placements, "REQUEUED", r.reason)
            for r, job in earlier
        ]
        ran.sort(key=lambda r: (r.start, r.job.id, r.attempt))
    idle = _idle_while_held(daemon, ran, request.start, min(request.end, now), now)
    runs = []
    for run in ran:
        job = run.job
        mine = not hide or job.uid == caller.uid
        runs.append(
            {
                "id": job.id if mine else 0,
                "attempt": run.attempt,
                "name": job.spec.name if mine else "",
                "user": job.user if mine else "",
                "state": run.state,
                "reason": run.reason if mine else "",
                "start": run.start,
                "end": run.end,
                "placements": [[node, list(gpus)] for node, gpus in run.placements],
                "idle": idle.get((job.id, run.attempt), []),
            }
        )
    spans = daemon.store.pending_spans(request.start, request.end)
    windows = reservation_windows(daemon.store.reservations(), request.start, request.end)
    return {
        "start": request.start,
        "end": request.end,
        "now": now,
        "runs": runs,
        "pending": [list(p) for p in pending_steps(spans, request.start, min(request.end, now))],
        "windows": [[n, node, list(ids), s, e, maint] for n, node, ids, s, e, maint in windows],
        "lanes": [
            [node.name, [[g.index, g.parent] for g in sorted(node.gpus, key=lambda g: g.index)]]
            for node in daemon.fleet.node_infos()
        ],
    }


def _earlier_runs(
    daemon: Daemon, start: float, end: float, last: Sequence[Job] = ()
) -> list[tuple[EarlierRun, Job]]:
    """The runs requeues ended that overlap [start, end), each with its job as it is now.

    `last`: jobs already read (jobs_run_between's), not read again."""
    earlier = daemon.store.earlier_runs_between(start, end)
    if not earlier:
        return []
    known = {j.id: j for j in last}
    wanted = {r.job_id for r in earlier} - set(known)
    known.update((j.id, j) for j in daemon.store.jobs(ids=wanted) if wanted)
    return [(r, known[r.job_id]) for r in earlier if r.job_id in known]


def _idle_while_held(
    daemon: Daemon, ran: Sequence[_Run], start: float, end: float, now: float
) -> dict[tuple[int, int], list[list[Any]]]:
    """(job id, attempt) -> [[node, GPU, start, end], ...]: stretches its run's GPUs sat
    idle while it held them in [start, end), as the idle_gpu policy sees them (its
    defaults when it is off).

    One history read per GPU (not per run): a month of short jobs costs what the GPUs do."""
    from gbatch.core.timeline import idle_stretches

    policy = daemon.config.idle_gpu or IdleGpuPolicy()
    held: dict[tuple[str, int], list[tuple[tuple[int, int], float, float]]] = {}
    for run in ran:
        first = max(run.start or start, start)
        last = min(run.end or now, end)
        key = (run.job.id, run.attempt)
        if last > first:
            for node, gpus in run.placements:
                for gpu in gpus:
                    held.setdefault((node, gpu), []).append((key, first, last))
    out: dict[tuple[int, int], list[list[Any]]] = {}
    for (node, gpu), spans in held.items():
        first, last = min(s[1] for s in spans), max(s[2] for s in spans)
        points = daemon.gpu_history.series(node, gpu, first, last, now)
        step = 1.0 if first >= now - 3600 else 60.0  # the series' (gpuhistory.series)
        readings = [(p.time, p.util_max) for p in points]
        stretches = idle_stretches(readings, policy.threshold_percent, 0.0, step)
        for key, a, b in spans:
            for lo, hi in stretches:
                lo, hi = max(lo, a), min(hi, b)
                if hi - lo >= policy.after_seconds:
                    out.setdefault(key, []).append([node, gpu, lo, hi])
    return out


def on_gpu_history(
    daemon: Daemon, caller: Caller, request: requests.ShowGpuHistory
) -> dict[str, Any]:
    """GPUs' utilisation and memory over a range, from the sample history.

    Everyone sees every GPU's figures, as in sinfo and the Nodes page (they name no job)."""
    from gbatch.core.timeline import MAX_RANGE_S
    from gbatch.head.gpuhistory import bucketed

    if not request.end > request.start:
        raise Refused("invalid", "gpu_history: the range's end must be after its start")
    if request.end - request.start > MAX_RANGE_S:
        raise Refused(
            "invalid", "gpu_history: the range is longer than 34 days. Pick a shorter one"
        )
    if not 1 <= request.points <= 1000:
        raise Refused("invalid", "gpu_history.points: give 1 to 1000")
    now = daemon.clock()
    nodes = [n for n in daemon.fleet.node_infos() if request.node in ("", n.name)]
    if request.node and not nodes:
        raise Refused("not_found", f"gpu_history: no node {request.node!r}. See gbatch sinfo")
    series = []
    for node in nodes:
        totals = {g.index: g.memory_total_mib for g in node.gpus}
        for index in request.gpus or tuple(sorted(totals)):
            points = daemon.gpu_history.series(node.name, index, request.start, request.end, now)
            shown = bucketed(points, request.start, request.end, request.points)
            series.append(
                {
                    "node": node.name,
                    "index": index,
                    "memory_total_mib": totals.get(index),
                    "points": [list(p) for p in shown],
                }
            )
    return {"start": request.start, "end": request.end, "now": now, "series": series}
