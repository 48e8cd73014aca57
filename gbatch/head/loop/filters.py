"""The schedule step's filters: the jobs a --begin time, a dependency or %MAX hold back.

The window's jobs that a --begin time, a dependency or their array's %MAX hold back get
that pending reason and stay out of the plan, so they take no reservation and hold back
no one.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence

from gbatch.core.arrays import THROTTLE_REASON, over_throttle
from gbatch.core.dependency import (
    NEVER_REASON,
    SINGLETON,
    Dependency,
    DependencyError,
    JobRef,
    Status,
    Term,
    evaluate,
    reason_for,
    tasks_named,
)
from gbatch.core.dependency import parse as parse_dependency
from gbatch.core.labels import spans_of
from gbatch.core.limits import ARRAY_HARD_CAP
from gbatch.core.model import Job, JobState
from gbatch.core.qos import over_qos_limits
from gbatch.head.scheduler import BEGIN_TIME
from gbatch.head.store import Store
from gbatch.site.config import Config

log = logging.getLogger("gbatchd")
# Arrays whose extent (task -> job id) the daemon remembers for dependencies on them.
ARRAY_CACHE_MAX = 10_000
KILLED_REASON = "dependency can never be satisfied (kill_invalid_depend)"

# The pending reason a job's row shows (RunnableWindow.reason: where the loop wrote it
# since, the one it wrote): a filter writes a reason only where it differs.
ReasonOf = Callable[[Job], str]


class Filters:
    """The filters, and the arrays' tasks the dependency filter has looked up."""

    def __init__(self, store: Store, config: Config, wake: threading.Event) -> None:
        self.store = store
        self.config = config
        self.wake = wake
        # array id -> {task: job id} of an array without a tail (all its tasks rows)
        self._arrays: dict[int, dict[int, int]] = {}
        # array id -> {task index: its job id, None: no such task} of the tasks looked
        # up alone (N_K, aftercorr), or None when that id is not an array's
        self._array_indices: dict[int, dict[int, int | None] | None] = {}

    def past_begin(self, pending: list[Job], now: float, reason_of: ReasonOf) -> list[Job]:
        """The jobs whose --begin time has come.

        The others get reason BeginTime and stay out of the plan, so they take no
        reservation and hold back no one.
        """
        waiting = {job.id for job in pending if job.spec.begin is not None and job.spec.begin > now}
        if not waiting:
            return pending
        self.store.set_pending_reasons(
            {
                job.id: BEGIN_TIME
                for job in pending
                if job.id in waiting and reason_of(job) != BEGIN_TIME
            }
        )
        return [job for job in pending if job.id not in waiting]

    def hold_back_dependents(
        self, pending: Sequence[Job], now: float, reason_of: ReasonOf
    ) -> list[Job]:
        """The jobs of `pending` free to plan: with no dependency, or one that holds.

        The others get reason Dependency (waiting) or DependencyNeverSatisfied (and are
        CANCELLED under kill_invalid_depend), and stay out of plan(): they take no
        reservation and hold back no one.

        One read for every referenced job's state and one per array named, both of the
        tasks named alone (N_K, aftercorr's counterpart; for N_*, the array's rows and
        one task for its tail, whose tasks answer alike: what was read is kept while
        it stays so, a task's id never changes), one for singletons' namesakes. A job
        once found never satisfied stays so, as in Slurm, even if the job it named is
        requeued: what it names is not read again.
        """
        waiting = [job for job in pending if job.spec.dependency is not None]
        if not waiting:
            return list(pending)
        parsed = {job.id: _dependency_of(job) for job in waiting}
        deciding = [job for job in waiting if reason_of(job) != NEVER_REASON]
        named = tasks_named((parsed[job.id], job.spec.array_task) for job in deciding)
        arrays = {
            array_id: self._array_tasks(array_id, indices, whole)
            for array_id, (indices, whole) in named.items()
        }
        tasks = {array_id: ids for array_id, ids in arrays.items() if ids is not None}
        ids = {ref.id for job in deciding for ref in parsed[job.id].refs}
        ids.update(job_id for each in tasks.values() for job_id in each.values())
        refs = self.store.ref_jobs(ids)
        singletons = self._singleton_blockers(
            [job for job in waiting if any(t.kind == SINGLETON for t in parsed[job.id].terms)]
        )
        free = [job for job in pending if job.spec.dependency is None]
        reasons: dict[int, str] = {}
        never: list[int] = []
        for job in waiting:
            if reason_of(job) == NEVER_REASON:
                status = Status.NEVER
            else:
                status = evaluate(
                    parsed[job.id],
                    refs,
                    tasks,
                    now,
                    task=job.spec.array_task,
                    singleton_free=job.id not in singletons,
                )
            reason = reason_for(status)
            if reason is None:
                free.append(job)
            elif status is Status.NEVER and self.config.kill_invalid_depend:
                never.append(job.id)
            elif reason_of(job) != reason:
                reasons[job.id] = reason
        self.store.set_pending_reasons(reasons)
        if never:
            for job_id in self.store.cancel_pending(never, KILLED_REASON, now):
                log.info("job %d: %s", job_id, KILLED_REASON)
            self.wake.set()  # its own dependents may now be decided
        return sorted(free, key=lambda job: job.id)

    def _array_tasks(self, array_id: int, indices: set[int], whole: bool) -> dict[int, int] | None:
        """{task index: job id} of the array `array_id`'s tasks of `indices`, and with
        `whole` its rows and one task for its tail (whose tasks answer alike); None when
        that id is not an array's. What evaluate decides on as it would on
        Store.array_tasks' whole answer, read at the cost of those tasks. A task's id
        never changes, so what was read is kept: a pass pays for tasks it has not yet
        looked up, and for an array's rows while its tail lasts (rows stay rows)."""
        if len(self._arrays) + len(self._array_indices) > ARRAY_CACHE_MAX:
            self._arrays.clear()
            self._array_indices.clear()
        if array_id in self._arrays:  # no tail: all its tasks
            every = self._arrays[array_id]
            if whole:
                return every
            return {index: every[index] for index in indices if index in every}
        known = self._array_indices.get(array_id, {})
        if known is None:
            return None
        missing = indices - known.keys()
        if missing or array_id not in self._array_indices:
            found = self.store.array_tasks_at(array_id, spans_of(missing), ARRAY_HARD_CAP)
            if found is None:
                self._array_indices[array_id] = None
                return None
            known.update((index, found.get(index)) for index in missing)
            self._array_indices[array_id] = known
        tasks = {index: job_id for index in indices if (job_id := known[index]) is not None}
        if not whole:
            return tasks
        sampled = self.store.array_tasks_sampled(array_id, ARRAY_HARD_CAP)
        if sampled is None:  # not reached: array_tasks_at found it an array's
            return None
        every, has_tail = sampled
        if not has_tail:
            self._array_indices.pop(array_id, None)
            self._arrays[array_id] = every
        return {**every, **tasks}

    def _singleton_blockers(self, jobs: Sequence[Job]) -> set[int]:
        """Those of `jobs` (singletons) that another job of the same user and name holds
        back: one on a node, or one pending ahead of it (a lower id)."""
        if not jobs:
            return set()
        others = self.store.active_named({job.spec.name for job in jobs})
        blocked: set[int] = set()
        for job in jobs:
            for other_id, user, name, state in others:
                if other_id == job.id or user != job.user or name != job.spec.name:
                    continue
                if state is not JobState.PENDING or other_id < job.id:
                    blocked.add(job.id)
                    break
        return blocked

    def within_throttle(self, pending: list[Job], allocated: Sequence[Job]) -> list[Job]:
        """The jobs their array's %MAX lets start.

        The others get reason JobArrayTaskLimit and stay out of the plan, taking no
        reservation.
        """
        # Only tasks of throttled arrays can be held back; their order among themselves
        # is all over_throttle reads, so only they are sorted.
        throttled = [
            job
            for job in pending
            if job.spec.array_throttle is not None and job.array_job_id is not None
        ]
        if not throttled:
            return pending
        running = Counter(job.array_job_id for job in allocated if job.array_job_id is not None)
        ordered = sorted(
            throttled, key=lambda j: (j.user, -j.spec.effective_priority, j.submit_time, j.id)
        )
        held = over_throttle(ordered, running)
        if not held:
            return pending
        self.store.set_pending_reasons(
            {job.id: THROTTLE_REASON for job in pending if job.id in held}
        )
        return [job for job in pending if job.id not in held]

    def within_qos(self, pending: list[Job], allocated: Sequence[Job]) -> list[Job]:
        """The jobs their QOS's per-user max_running_jobs and max_gpus let start.

        The others get reason QOSMaxJobsPerUserLimit or QOSMaxGRESPerUser and stay out
        of the plan, taking no reservation (gbatch/core/qos.py over_qos_limits)."""
        waiting = over_qos_limits(pending, allocated, self.config.qos)
        if not waiting:
            return pending
        self.store.set_pending_reasons(waiting)
        return [job for job in pending if job.id not in waiting]


def _dependency_of(job: Job) -> Dependency:
    assert job.spec.dependency is not None
    try:
        return parse_dependency(job.spec.dependency)
    except DependencyError:
        # Checked at submit; a spec stored by a later gbatch may read otherwise.
        return Dependency((Term("afterok", (JobRef(job.id),), (0,)),))
