"""gbatchd's loop: a short list of named steps, run on every tick and at once when
something happens (a submit, a cancel, a run ending, a GPU report).

    collect_ended_runs -> enforce_limits -> schedule

The loop thread is the only one that starts or signals runs; request handlers only
write intents to the store (a new job, a cancel) and wake the loop.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence

from gbatch.config import Config, Paths
from gbatch.groupcommit import GroupCommitter
from gbatch.localnode import LaunchError, LocalNode, RunStatus
from gbatch.model import (
    ALLOCATED_STATES,
    Gpu,
    IllegalTransition,
    Job,
    JobState,
    NodeInfo,
    NodeState,
    NodeView,
)
from gbatch.scheduler import plan
from gbatch.store import Store

log = logging.getLogger("gbatchd")
COALESCE_SECONDS = 0.02


class Daemon:
    def __init__(
        self,
        paths: Paths,
        config: Config,
        store: Store,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.paths = paths
        self.config = config
        self.store = store
        self.clock = clock
        self.monotonic = monotonic
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.started_at = clock()
        self.node = LocalNode(paths, config, on_change=self.wake.set)
        self.committer = GroupCommitter(store, clock)
        # job id -> (monotonic time SIGTERM was sent, SIGKILL sent yet)
        self._stopping_runs: dict[int, tuple[float, bool]] = {}
        # GPU index -> number of the report at its release: it is handed out again
        # only after a later report shows its memory released.
        self._released_at_report: dict[int, int] = {}

    # -- life cycle -----------------------------------------------------------------

    def start_node(self, first_report_timeout: float = 10.0) -> None:
        self.node.start()
        deadline = self.monotonic() + first_report_timeout
        while self.node.report()[0] is None and self.monotonic() < deadline:
            time.sleep(0.02)

    def run_loop(self) -> None:
        while not self.stopping.is_set():
            if self.wake.wait(self.config.tick_seconds):
                # Let a burst of submits land before planning once for all of them:
                # a step per request starves the handlers (measured in bench_submit).
                time.sleep(COALESCE_SECONDS)
            self.wake.clear()
            if self.stopping.is_set():
                break
            try:
                self.step()
            except Exception:
                # One bad tick must not take the head down; the next tick retries.
                log.exception("loop step failed")

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def close(self) -> None:
        self.committer.close()
        self.node.stop()

    def audit(self, caller: object, action: str, job: Job, outcome: str) -> None:
        """Record who tried what on whose job (refusals above all)."""
        log.warning("audit: %s %s job %d (owner %s): %s", caller, action, job.id, job.user, outcome)

    def step(self) -> None:
        now = self.clock()
        self.collect_ended_runs(now)
        self.enforce_limits(now)
        self.schedule(now)

    # -- step 1: runs that ended, or vanished ------------------------------------------

    def collect_ended_runs(self, now: float) -> None:
        for job in self.store.jobs_in(ALLOCATED_STATES):
            status = self.node.status(job, job.attempt)
            if status.state == "running":
                if job.state is JobState.CONFIGURING:
                    # The daemon died between starting the run and confirming it.
                    self._confirm_running(job, "adopted after a daemon restart")
                continue
            if status.state == "exited":
                self._finish(job, status, now)
            else:
                self._run_vanished(job, now)

    def _finish(self, job: Job, status: RunStatus, now: float) -> None:
        end = status.end_time or now
        exit_code, killed_by = status.exit_code or 0, status.signal or 0
        outcome = f"exit code {exit_code}" if not killed_by else f"killed by signal {killed_by}"
        fields: dict[str, object] = {
            "end_time": end,
            "exit_code": exit_code,
            "exit_signal": killed_by,
        }
        if job.stop_state is not None:
            new, reason = job.stop_state, _stop_reason(job.stop_state)
        elif status.oom:
            new, reason = JobState.OUT_OF_MEMORY, "out of memory"
        elif exit_code == 0 and killed_by == 0:
            new, reason = JobState.COMPLETED, ""
        elif job.attempt <= job.spec.retries:
            new, reason = (
                JobState.PENDING,
                f"retry {job.attempt}/{job.spec.retries} after {outcome}",
            )
        else:
            new, reason = JobState.FAILED, outcome
        self._end_run(job, new, reason, now, **fields)

    def _run_vanished(self, job: Job, now: float) -> None:
        if job.stop_state is not None:
            self._end_run(job, job.stop_state, _stop_reason(job.stop_state), now, end_time=now)
        elif job.state is JobState.CONFIGURING:
            self._end_run(job, JobState.PENDING, "launch was not confirmed; requeued", now)
        else:
            self._end_run(
                job,
                JobState.PENDING,
                "its run vanished (node restarted?); requeued",
                now,
                end_time=now,
            )

    def _end_run(self, job: Job, new: JobState, reason: str, now: float, **fields: object) -> None:
        if new is JobState.PENDING:
            # A requeued job keeps its attempt count but no longer holds a node.
            fields = {**fields, "node": None, "gpus": (), "stop_state": None}
        else:
            fields = {**fields, "stop_state": None}
        try:
            self.store.set_state(job.id, new, reason, now, expect={job.state}, **fields)
        except IllegalTransition:
            return  # a concurrent change won; the next tick sees it
        if job.start_time is not None and job.gpus:
            end = fields.get("end_time") or now
            assert isinstance(end, float | int)
            self.store.add_usage(
                job.user,
                len(job.gpus) * max(0.0, end - job.start_time),
                now,
                self.config.half_life_seconds,
            )
        seq = self.node.report_seq
        for gpu in job.gpus:
            self._released_at_report[gpu] = seq
        self._stopping_runs.pop(job.id, None)
        self.node.cleanup(job, job.attempt)
        self.node.poke()
        self.wake.set()

    # -- step 2: time limits and stops ---------------------------------------------------

    def enforce_limits(self, now: float) -> None:
        for job in self.store.jobs_in((JobState.RUNNING, JobState.COMPLETING)):
            if job.state is JobState.RUNNING and _past_limit(job, now):
                try:
                    job = self.store.set_state(
                        job.id,
                        JobState.COMPLETING,
                        "time limit reached",
                        now,
                        expect={JobState.RUNNING},
                        stop_state=JobState.TIMEOUT,
                    )
                except IllegalTransition:
                    continue
            if job.state is JobState.COMPLETING:
                self._stop_run(job)

    def _stop_run(self, job: Job) -> None:
        """SIGTERM the run, then SIGKILL it once the grace period has passed."""
        sent = self._stopping_runs.get(job.id)
        if sent is None:
            self.node.signal(job, job.attempt, signal.SIGTERM)
            self._stopping_runs[job.id] = (self.monotonic(), False)
        elif not sent[1] and self.monotonic() - sent[0] >= self.config.kill_grace_seconds:
            self.node.signal(job, job.attempt, signal.SIGKILL)
            self._stopping_runs[job.id] = (sent[0], True)

    # -- step 3: plan and dispatch -------------------------------------------------------

    def schedule(self, now: float) -> None:
        pending = self.store.runnable_jobs()
        if not pending:
            return
        active = [*pending, *self.store.jobs_in(ALLOCATED_STATES)]
        views = [self.node_view(active)]
        usage = self.usage(active, now)
        result = plan(pending, views, usage, now)
        by_id = {j.id: j for j in pending}
        self.store.set_pending_reasons(
            {job_id: r for job_id, r in result.reasons.items() if by_id[job_id].reason != r}
        )
        for assignment in result.assignments:
            self.dispatch(by_id[assignment.job_id], assignment.gpus, now)

    def dispatch(self, job: Job, gpus: Sequence[int], now: float) -> None:
        """Record intent, act, confirm: a crash between any two steps is reconciled."""
        attempt = job.attempt + 1
        try:
            job = self.store.set_state(
                job.id,
                JobState.CONFIGURING,
                "allocated",
                now,
                expect={JobState.PENDING},
                node=self.node.name,
                gpus=tuple(gpus),
                attempt=attempt,
                start_time=None,
                end_time=None,
                exit_code=None,
                exit_signal=None,
                stop_state=None,
            )
        except IllegalTransition:
            return  # cancelled while we planned
        try:
            self.node.launch(job, attempt, gpus)
        except LaunchError as err:
            retry = attempt <= job.spec.retries
            new = JobState.PENDING if retry else JobState.FAILED
            self._end_run(job, new, f"launch failed: {err}", now, end_time=now)
            return
        self._confirm_running(job, "")

    def _confirm_running(self, job: Job, reason: str) -> None:
        now = self.clock()
        # IllegalTransition: cancelled while starting; the job is COMPLETING and the
        # next enforce_limits step stops it.
        with contextlib.suppress(IllegalTransition):
            self.store.set_state(
                job.id,
                JobState.RUNNING,
                reason,
                now,
                expect={JobState.CONFIGURING},
                start_time=now,
            )

    # -- views of the node ------------------------------------------------------------

    def node_gpus(self) -> tuple[tuple[Gpu, ...], str]:
        report, problem = self.node.report()
        if report is None:
            return (), problem
        return self.node.gpus(report), report.note

    def node_view(self, active: Sequence[Job]) -> NodeView:
        report, problem = self.node.report()
        if report is None:
            return NodeView(self.node.name, 0, (), available=False, unavailable_reason=problem)
        gpus = self.node.gpus(report)
        allocated = {g for job in active if job.state in ALLOCATED_STATES for g in job.gpus}
        seq = self.node.report_seq
        free = tuple(
            g.index
            for g in gpus
            if g.index not in allocated
            and g.foreign_processes == 0
            and g.memory_used_mib < self.config.gpu_memory_threshold_mib
            and seq > self._released_at_report.get(g.index, -1)
        )
        releases = tuple(
            (
                (job.start_time or self.clock()) + job.spec.time_limit
                if job.spec.time_limit
                else float("inf"),
                len(job.gpus),
            )
            for job in active
            if job.state in ALLOCATED_STATES and job.gpus
        )
        return NodeView(self.node.name, len(gpus), free, releases=releases)

    def node_info(self) -> NodeInfo:
        gpus, problem = self.node_gpus()
        if self.node.report()[0] is None:
            return NodeInfo(self.node.name, NodeState.DOWN, reason=problem)
        allocations = {g: job.id for job in self.store.jobs_in(ALLOCATED_STATES) for g in job.gpus}
        if not allocations:
            state = NodeState.IDLE
        elif len(allocations) >= len(gpus):
            state = NodeState.ALLOCATED
        else:
            state = NodeState.MIXED
        return NodeInfo(
            self.node.name,
            state,
            reason=problem if not gpus else "",
            gpus=gpus,
            allocations=allocations,
        )

    def max_gpus_per_node(self) -> tuple[int, str]:
        report, problem = self.node.report()
        return (len(report.gpus), report.note) if report else (0, problem)

    def usage(self, active: Sequence[Job], now: float) -> dict[str, float]:
        """Stored decayed usage plus what running jobs have accrued so far."""
        usage = self.store.usage(now, self.config.half_life_seconds)
        for job in active:
            if job.state in ALLOCATED_STATES and job.start_time is not None:
                usage[job.user] = usage.get(job.user, 0.0) + len(job.gpus) * max(
                    0.0, now - job.start_time
                )
        return usage


def _past_limit(job: Job, now: float) -> bool:
    limit = job.spec.time_limit
    return limit is not None and job.start_time is not None and now - job.start_time >= limit


def _stop_reason(state: JobState) -> str:
    return {JobState.CANCELLED: "cancelled", JobState.TIMEOUT: "time limit reached"}.get(
        state, state.value.lower()
    )
