"""scancel and scontrol hold, release, requeue: act on the jobs a request names.

targets.py reads them a batch at a time and keeps the tally of what was done.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gbatch.core.model import ACTIVE_STATES, Job, JobState
from gbatch.core.selection import JobFilter
from gbatch.core.signals import SignalTarget
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import targets
from gbatch.head.handlers.auth import is_admin, submit_limits
from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused, store_full_message
from gbatch.head.handlers.signals import act_on_steps, requested_signal, signal_jobs
from gbatch.head.handlers.targets import Tally, named_briefs, owned, parse_states, request_targets
from gbatch.head.store import JobBrief, PendingLimitReached, StateChange, StoreFull
from gbatch.protocol import requests


def on_cancel(daemon: Daemon, caller: Caller, request: requests.Cancel) -> dict[str, Any]:
    """scancel: cancel (or signal) the jobs and steps a request names, or those its filters select.

    Named jobs (`ids`, `ranges`, `jobs`) are narrowed by the filters; with none named,
    the active jobs the filters (users, states, names, partitions, nodes) select among
    those the caller may act on, as `scancel -u` does. Steps (`steps`) are acted on
    alone. With `signal`, running jobs are sent it (signals.py) and nothing is
    cancelled. Quiet on success: the reply lists failures."""
    users = set(request.users)
    states = set(parse_states(request.states) or ())
    narrow = JobFilter(tuple(request.names), tuple(request.partitions), tuple(request.nodes))
    signum, target = requested_signal(request)
    admin = is_admin(daemon, caller)
    tally = Tally(daemon, caller, "cancel" if signum is None else "signal")
    if request.steps:
        act_on_steps(
            daemon,
            caller,
            tally,
            request.steps,
            signum,
            admin,
            lambda job: _cancel_outcome(daemon, caller, job.id),
        )
    arrays: list[tuple[int, int]] = []
    ids, ranges = request_targets(daemon, request, tally, arrays)
    if request.ids or request.ranges or request.jobs:
        for batch in named_briefs(daemon, caller, tally, ids, ranges, admin, narrow):
            chosen = [
                brief
                for brief in batch
                if brief.kept
                and (not users or brief.user in users)
                and (not states or brief.state in states)
                # `scancel N` of an array: its tasks still to end, as Slurm; the ended
                # ones are no failure.
                and not (brief.state.is_final and any(a <= brief.id <= b for a, b in arrays))
            ]
            mine = owned(caller, admin, tally, chosen)
            if signum is None:
                _cancel_named(daemon, caller, tally, mine)
            else:
                # An array named by its id: its tasks still pending are passed over.
                whole = [b for b in mine if any(a <= b.id <= z for a, z in arrays)]
                alone = [b for b in mine if not any(a <= b.id <= z for a, z in arrays)]
                signal_jobs(daemon, caller, tally, alone, signum, target)
                signal_jobs(daemon, caller, tally, whole, signum, target, quiet_pending=True)
        if signum is None and (not states or JobState.PENDING in states):
            _cancel_tails(daemon, caller, tally, [a for a, _ in arrays], users, admin, narrow)
    elif users or states or narrow:
        if signum is None:
            _cancel_sweep(daemon, caller, tally, users, states, admin, narrow)
        else:
            _signal_sweep(daemon, caller, tally, users, states, admin, narrow, signum, target)
    elif not request.steps:
        raise Refused(
            "invalid",
            "no job ids given. Name job ids, or use -u USER / -t STATE / -n NAME / -p "
            "PARTITION / -w NODE",
        )
    daemon.wake.set()
    return tally.finish()


def _cancel_outcome(daemon: Daemon, caller: Caller, job_id: int) -> str | None:
    """Cancel one job; None when done (or stopping already), else why not."""
    outcome = _cancel_one(daemon, caller, job_id)
    return None if outcome is None else outcome[0]


def _signal_sweep(
    daemon: Daemon,
    caller: Caller,
    tally: Tally,
    users: set[str],
    states: set[JobState],
    admin: bool,
    narrow: JobFilter,
    signum: int,
    target: SignalTarget,
) -> None:
    """`scancel -s SIG -u/-t/-n/-p/-w`: signal the selected running jobs the caller may act
    on; the pending ones among those selected are passed over (nothing runs to signal)."""
    if states and JobState.RUNNING not in states:
        return
    jobs = daemon.store.jobs(states={JobState.RUNNING}, users=users or None, narrow=narrow)
    mine = [job for job in jobs if admin or job.uid == caller.uid]
    signal_jobs(daemon, caller, tally, mine, signum, target, quiet_pending=True)


def _cancel_named(daemon: Daemon, caller: Caller, tally: Tally, briefs: list[JobBrief]) -> None:
    """Cancel named jobs the caller may act on, the pending ones in one transaction.

    The others (running, or moved on meanwhile) go one by one."""
    pending = [brief.id for brief in briefs if brief.state is JobState.PENDING]
    one_by_one = [brief.id for brief in briefs if brief.state is not JobState.PENDING]
    cancelled = _cancel_pending(daemon, caller, tally, pending)
    one_by_one += [job_id for job_id in pending if job_id not in cancelled]
    for job_id in one_by_one:
        outcome = _cancel_one(daemon, caller, job_id)
        if outcome is None:
            tally.done += 1
        else:
            tally.fail(job_id, outcome[0])


def _cancel_tails(
    daemon: Daemon,
    caller: Caller,
    tally: Tally,
    array_ids: Sequence[int],
    users: set[str],
    admin: bool,
    narrow: JobFilter | None = None,
) -> None:
    """Cancel the tails of the arrays `array_ids` the caller may act on, in one write.

    A tail is an array's tasks not yet rows; one write however many tasks they hold."""
    if not array_ids:
        return
    tails = daemon.store.tails(
        states=[JobState.PENDING],
        users=users or None,
        overlapping=[(a, a) for a in array_ids],
        narrow=narrow,
    )
    mine = [t.array_id for t in tails if t.array_id in array_ids and (admin or t.uid == caller.uid)]
    try:
        tally.done += daemon.store.cancel_tails(mine, f"cancelled by {caller.user}", daemon.clock())
    except StoreFull as err:
        for array_id in mine:
            tally.fail(array_id, store_full_message(err))


def _cancel_sweep(
    daemon: Daemon,
    caller: Caller,
    tally: Tally,
    users: set[str],
    states: set[JobState],
    admin: bool,
    narrow: JobFilter,
) -> None:
    """`scancel -u/-t/-n/-p/-w/--me`: cancel the caller's own jobs among those selected.

    An admin's: all of them; no job of another user is refused, none is touched. Pending
    jobs first, a batch at a time in id order; then the allocated ones, which include any
    the loop dispatched meanwhile. Jobs that ended meanwhile are not reported."""
    uid = None if admin else caller.uid
    if not states or JobState.PENDING in states:
        after = 0
        while ids := daemon.store.pending_ids(
            after=after, limit=targets.BULK_BATCH, users=users or None, uid=uid, narrow=narrow
        ):
            after = ids[-1]
            _cancel_pending(daemon, caller, tally, ids)
        tails = daemon.store.tails(
            states=[JobState.PENDING], users=users or None, uid=uid, narrow=narrow
        )
        _cancel_tails(daemon, caller, tally, [t.array_id for t in tails], users, admin, narrow)
    allocated = (states or ACTIVE_STATES) & (ACTIVE_STATES - {JobState.PENDING})
    found = (
        daemon.store.jobs(states=allocated, users=users or None, narrow=narrow) if allocated else []
    )
    for job in found:
        if uid is None or job.uid == uid:
            outcome = _cancel_one(daemon, caller, job.id)
            if outcome is None:
                tally.done += 1
            elif not outcome[1]:
                tally.fail(job.id, outcome[0])


def _cancel_pending(daemon: Daemon, caller: Caller, tally: Tally, ids: list[int]) -> set[int]:
    """Cancel those of `ids` still pending, in one transaction; the ids dealt with.

    Those are the ones cancelled, or all of them when the disk is full (each then
    fails)."""
    if not ids:
        return set()
    try:
        cancelled = daemon.store.cancel_pending(ids, f"cancelled by {caller.user}", daemon.clock())
    except StoreFull as err:
        # Each batch is its own transaction: those cancelled before stay cancelled.
        for job_id in ids:
            tally.fail(job_id, store_full_message(err))
        return set(ids)
    tally.done += len(cancelled)
    return set(cancelled)


def _cancel_one(daemon: Daemon, caller: Caller, job_id: int) -> tuple[str, bool] | None:
    """Cancel one job as it is now; None when done, else (why not, whether it had ended).

    A running one goes COMPLETING, and the loop stops it."""
    for _ in range(3):
        job = daemon.store.get(job_id)
        if job is None:
            return f"Invalid job id specified: {job_id}", False
        now = daemon.clock()
        change = _cancel_change(job, caller, now)
        if change is None:
            return None
        if isinstance(change, str):
            return change, True
        try:
            (refused,) = daemon.store.set_states([change], now)
        except StoreFull as err:
            return store_full_message(err), False
        if refused is None:
            return None
    return f"job {job_id} changed state too often; try again", False


def _cancel_change(job: Job, caller: Caller, now: float) -> StateChange | str | None:
    """The state change that cancels `job` as read; None if stopping; why not if ended."""
    if job.state is JobState.PENDING:
        return StateChange(
            job.id,
            JobState.CANCELLED,
            f"cancelled by {caller.user}",
            {JobState.PENDING},
            {"end_time": now},
        )
    if job.state in (JobState.CONFIGURING, JobState.RUNNING):
        return StateChange(
            job.id,
            JobState.COMPLETING,
            f"cancel requested by {caller.user}",
            {job.state},
            {"stop_state": JobState.CANCELLED},
        )
    if job.state is JobState.COMPLETING:
        return None  # already stopping
    return f"Job/step already completing or completed: job {job.id} is {job.state.value}"


def _set_hold(
    daemon: Daemon, caller: Caller, request: requests.Hold | requests.Release, held: bool
) -> dict[str, Any]:
    """Hold or release the pending jobs named, a batch per transaction."""
    admin = is_admin(daemon, caller)
    tally = Tally(daemon, caller, "hold" if held else "release")
    arrays: list[tuple[int, int]] = []
    ids, ranges = request_targets(daemon, request, tally, arrays)
    if arrays:
        tails = daemon.store.tails(
            states=[JobState.PENDING], overlapping=[(a, a) for a, _ in arrays]
        )
        mine = [t.array_id for t in tails if admin or t.uid == caller.uid]
        tally.done += daemon.store.hold_tails(mine, held)
    for batch in named_briefs(daemon, caller, tally, ids, ranges, admin):
        pending = []
        for brief in owned(caller, admin, tally, batch):
            if brief.state is JobState.PENDING:
                pending.append(brief.id)
            elif not (brief.state.is_final and any(a <= brief.id <= b for a, b in arrays)):
                # An array named by its id: its ended tasks are passed over; a running
                # one is refused, as Slurm does.
                tally.fail(brief.id, _not_pending(brief.id, brief.state))
        if not pending:
            continue
        try:
            done = set(daemon.store.set_held_many(pending, held, daemon.clock()))
        except StoreFull as err:
            for job_id in pending:
                tally.fail(job_id, store_full_message(err))
            continue
        tally.done += len(done)
        moved = [job_id for job_id in pending if job_id not in done]
        for brief in daemon.store.briefs(moved):  # the loop dispatched them meanwhile
            tally.fail(brief.id, _not_pending(brief.id, brief.state))
    daemon.wake.set()
    return tally.finish()


def _not_pending(job_id: int, state: JobState) -> str:
    """What a caller reads for a job that is no longer pending: Slurm's words."""
    return f"Job is no longer pending execution: job {job_id} is {state.value}"


def on_hold(daemon: Daemon, caller: Caller, request: requests.Hold) -> dict[str, Any]:
    """scontrol hold: keep the named pending jobs from starting until released."""
    return _set_hold(daemon, caller, request, True)


def on_release(daemon: Daemon, caller: Caller, request: requests.Release) -> dict[str, Any]:
    """scontrol release: let the named held jobs start again."""
    return _set_hold(daemon, caller, request, False)


def on_requeue(daemon: Daemon, caller: Caller, request: requests.Requeue) -> dict[str, Any]:
    """scontrol requeue: put the named jobs back in the queue, stopping running ones first.

    A running job is stopped (SIGTERM, grace, SIGKILL) and goes back to PENDING once its
    run has ended, never before; a finished one goes back at once. Jobs with
    `requeue: false` refuse, as Slurm's --no-requeue jobs do. A user's requeue counts
    against their max_pending_jobs as a submit does, refused with the same line; an
    admin's does not (nor gbatch's own retries and requeues, which are the loop's)."""
    admin = is_admin(daemon, caller)
    limits = None if admin else submit_limits(daemon, caller)
    max_pending = None if limits is None else limits.max_pending_jobs
    tally = Tally(daemon, caller, "requeue")
    ids, ranges = request_targets(daemon, request, tally)
    for batch in named_briefs(daemon, caller, tally, ids, ranges, admin):
        for brief in owned(caller, admin, tally, batch):
            job = daemon.store.get(brief.id)
            if job is None:
                error: str | None = f"Invalid job id specified: {brief.id}"
            elif not job.spec.requeue:
                error = (
                    f"Requested operation is presently disabled: job {job.id} has requeue: false"
                )
            else:
                error = _requeue_one(daemon, caller, job, max_pending)
            if error is None:
                tally.done += 1
            else:
                tally.fail(brief.id, error)
    daemon.wake.set()
    return tally.finish()


def _requeue_one(daemon: Daemon, caller: Caller, job: Job, max_pending: int | None) -> str | None:
    """Requeue one job as it is now; None when done, else why not.

    Refused past `max_pending` (the owner's max_pending_jobs; None: no limit)."""
    now = daemon.clock()
    if job.state in (JobState.CONFIGURING, JobState.RUNNING):
        change = StateChange(
            job.id,
            JobState.COMPLETING,
            f"requeue requested by {caller.user}",
            {job.state},
            {"stop_state": JobState.PENDING},
        )
    elif job.state.is_final:
        change = StateChange(
            job.id,
            JobState.PENDING,
            f"requeued by {caller.user}",
            {job.state},
            {
                "node": None,
                "gpus": (),
                "gpu_uuids": (),
                "peers": (),
                "start_time": None,
                "end_time": None,
                "exit_code": None,
                "exit_signal": None,
                "stop_state": None,
            },
        )
    elif job.state is JobState.PENDING:
        return f"Job is pending execution: job {job.id} has not run yet"
    else:
        return f"Job is already stopping: job {job.id} is {job.state.value}"
    try:
        refused = daemon.store.requeue_within(change, job.user, max_pending, now)
    except StoreFull as err:
        return store_full_message(err)
    if isinstance(refused, PendingLimitReached):
        return str(refused)
    if refused is not None:
        return f"job {job.id} changed state meanwhile ({refused}); try again"
    return None
