"""The loop's step before collecting runs: steps that ended, and allocations they end.

A step's shim records its end (gbatch/nodes/stepshim.py); this step writes it to the
store (sacct's `N.0` lines). The first step of an srun/salloc allocation leads it: when
it ends, the allocation is stopped (COMPLETING) with the step's exit status, which the
job then ends with (COMPLETED, FAILED, or CANCELLED when its client went away). An
allocation whose client went away before its first step opened is cancelled after the
grace (gbatch/head/interactive.py). Starting steps is the request handler's
(head/handlers/steps.py), off the loop: the loop never waits on a client.
"""

from __future__ import annotations

import logging
import threading

from gbatch.core.model import ALLOCATED_STATES, Job, JobState
from gbatch.core.steps import Step, step_end_state
from gbatch.head.fleet import Fleet
from gbatch.head.interactive import Starting, Waiters
from gbatch.head.store import StateChange, Store
from gbatch.nodes.base import StepStatus

log = logging.getLogger("gbatchd")


class StepEnds:
    """Records the ends of open steps; ends the allocations they lead.

    Also those whose client went away before their first step."""

    def __init__(
        self,
        store: Store,
        fleet: Fleet,
        waiters: Waiters,
        starting: Starting,
        wake: threading.Event,
    ) -> None:
        self.store = store
        self.fleet = fleet
        self.waiters = waiters
        self.starting = starting
        self.wake = wake
        # Steps scancel N.M killed, by (job, step): who did, so the end reads CANCELLED.
        self.cancelled: dict[tuple[int, int], str] = {}
        # The ends of a several-task step's tasks read so far, by (job, step, rank).
        self.task_ends: dict[tuple[int, int, int], StepStatus] = {}

    def collect(self, now: float) -> None:
        """Record every open step that has ended; stop the allocations they led."""
        for step in self.store.open_steps():
            job = self.store.get(step.job_id)
            node = None if job is None else self.fleet.nodes.get(job.node or "")
            if job is None or node is None:
                self.store.end_step(
                    step.job_id, step.step_id, JobState.CANCELLED, now, reason="its node is gone"
                )
                continue
            running = job.state is JobState.RUNNING and job.attempt == step.attempt
            if step.fans_out:
                status = self._tasks_status(job, step, now)
            else:
                status = node.step_status(job, step)
            if status.state == "unknown" or (
                status.state == "vanished" and step.job_id in self.starting
            ):
                continue  # cannot tell now, or being started (no shim yet)
            if status.state == "running":
                if job.state.is_final or job.attempt != step.attempt:
                    # Opened as its allocation ended: it ends with it.
                    for name in step.node_names or (job.node or "",):
                        here = self.fleet.nodes.get(name)
                        if here is not None:
                            here.cleanup(job, step.attempt)
                continue
            self._forget_tasks(step)
            cancelled_by = self.cancelled.pop((step.job_id, step.step_id), None)
            if status.state == "exited":
                state = step_end_state(status.exit_code, status.signal, hangup=status.hangup)
                if state is JobState.FAILED and not running:
                    state = JobState.CANCELLED  # killed as its allocation ended
                reason = status.error or ("its client went away" if status.hangup else "")
                if cancelled_by is not None and state is not JobState.COMPLETED:
                    state, reason = JobState.CANCELLED, f"cancelled by {cancelled_by}"
                code, signum, ended = status.exit_code, status.signal, status.end_time or now
            else:
                state = JobState.FAILED if running else JobState.CANCELLED
                reason = "its step shim vanished" if running else "its allocation ended"
                if running and status.hangup:
                    # Its relay ended (a host's step, after a gbatchd restart): what is
                    # left of it is hung up, as a client's going away does.
                    state, reason = JobState.CANCELLED, status.error or reason
                    node.hang_up_step(job, step)
                code, signum, ended = 0, 0, now
            self.store.end_step(
                step.job_id,
                step.step_id,
                state,
                ended,
                exit_code=code,
                exit_signal=signum,
                reason=reason,
            )
            if step.leads and running:
                self.end_allocation(job, step, state, code, signum, now)

    def _tasks_status(self, job: Job, step: Step, now: float) -> StepStatus:
        """A step of several tasks as one: running while one runs, then the first failing
        task's end (by when it ended), else the last's; hung up when its client went away.

        Each task's end is kept once read (a host forgets it when asked), until the
        step's is recorded."""
        ended: list[tuple[int, str, StepStatus]] = []
        waiting = None
        for rank, name, _ in step.tasks():
            key = (step.job_id, step.step_id, rank)
            status = self.task_ends.get(key)
            if status is None:
                node = self.fleet.nodes.get(name)
                if node is None or name not in job.node_names:
                    status = StepStatus("vanished", error=f"its node {name} is gone")
                else:
                    status = node.step_status(job, step.task(rank))
                    if status.state == "vanished" and step.job_id in self.starting:
                        return status  # being started: no shim (or relay) yet
                    if status.state == "vanished" and status.hangup:
                        node.hang_up_step(job, step.task(rank))
                if status.state in ("exited", "vanished"):
                    self.task_ends[key] = status
            if status.state in ("running", "unknown"):
                waiting = waiting if waiting == "unknown" else status.state
                continue
            ended.append((rank, name, status))
        if waiting is not None:
            return StepStatus(waiting)
        failed = []
        for rank, name, status in ended:
            if status.state == "vanished":
                why = status.error or "its step shim vanished"
                failed.append(
                    (
                        now,
                        rank,
                        StepStatus("exited", 255, 0, now, error=f"task {rank} on {name}: {why}"),
                    )
                )
            elif status.exit_code or status.signal:
                failed.append((status.end_time or now, rank, status))
        hangup = any(status.hangup for _, _, status in ended)
        last = max((status.end_time or now for _, _, status in ended), default=now)
        if not failed:
            return StepStatus("exited", 0, 0, last, hangup=hangup)
        _, rank, first = min(failed, key=lambda item: (item[0], item[1]))
        error = first.error or f"task {rank} failed first"
        return StepStatus("exited", first.exit_code, first.signal, last, hangup=hangup, error=error)

    def _forget_tasks(self, step: Step) -> None:
        for rank, _, _ in step.tasks():
            self.task_ends.pop((step.job_id, step.step_id, rank), None)

    def end_allocation(
        self, job: Job, step: Step, state: JobState, code: int, signum: int, now: float
    ) -> None:
        """Stop `job`, whose leading step ended `state`: it ends so too, with that exit.

        Also the request handler's, for a first step that never started."""
        outcome = f"killed by signal {signum}" if signum else f"exit code {code}"
        why = "its client went away" if state is JobState.CANCELLED else outcome
        reason = f"its step {step.label} ended ({why}); allocation released"
        (refused,) = self.store.set_states(
            [
                StateChange(
                    job.id,
                    JobState.COMPLETING,
                    reason,
                    {JobState.RUNNING},
                    {"stop_state": state, "exit_code": code, "exit_signal": signum},
                )
            ],
            now,
        )
        if refused is None:
            log.info("job %d: %s", job.id, reason)
            self.wake.set()

    def end_abandoned(self, now: float) -> None:
        """Cancel the watched allocations no client has waited for within the grace."""
        for job_id in self.waiters.abandoned():
            self.waiters.forget(job_id)
            job = self.store.get(job_id)
            if job is None or job.state.is_final or job.state is JobState.COMPLETING:
                continue
            reason = (
                f"its {job.spec.interactive or 'srun'} client went away "
                f"(none waited for {self.waiters.grace:g} s)"
            )
            if job.state is JobState.PENDING:
                self.store.cancel_pending([job_id], reason, now)
            elif job.state in ALLOCATED_STATES:
                self.store.set_states(
                    [
                        StateChange(
                            job_id,
                            JobState.COMPLETING,
                            reason,
                            {job.state},
                            {"stop_state": JobState.CANCELLED},
                        )
                    ],
                    now,
                )
            log.info("job %d: %s; cancelled", job_id, reason)
            self.wake.set()
