"""The loop's second step: --signal warnings, TIME_LIMIT mail, time limits, stopping runs.

The runs stopped are those of jobs COMPLETING: SIGTERM, the grace, SIGKILL. Attached
terminals are told (gbatch/core/stepnotices.py): warned before an interactive job's
limit, and told why, when a job is stopped under its steps.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Sequence

from gbatch.core import stepnotices
from gbatch.core.model import IllegalTransition, Job, JobState
from gbatch.core.steps import Step
from gbatch.head.fleet import Fleet
from gbatch.head.loop.preempt import output_line, preemption_signal
from gbatch.head.loop.runs import Runs
from gbatch.head.notify import TIME_LIMIT_WARNINGS, mail_types
from gbatch.head.store import Preempting, Store
from gbatch.jobspec.slurmopts import parse_signal
from gbatch.nodes.base import Node
from gbatch.nodes.joblog import write_ending_note
from gbatch.site.config import Config

log = logging.getLogger("gbatchd")


class RunLimits:
    """Holds each running job to its time limit, on the monotonic clock."""

    def __init__(
        self,
        store: Store,
        fleet: Fleet,
        config: Config,
        runs: Runs,
        monotonic: Callable[[], float],
    ) -> None:
        self.store = store
        self.fleet = fleet
        self.config = config
        self.runs = runs
        self.monotonic = monotonic
        # (job id, attempt) of runs sent their --signal warning (once per attempt)
        self._warned_runs: set[tuple[int, int]] = set()
        # (job id, attempt) of runs whose terminals were warned of the limit (once)
        self._preempting: dict[int, Preempting] = {}
        self._warned_terminals: set[tuple[int, int]] = set()

    def enforce(self, now: float) -> None:
        """Warn, time out and stop the runs of RUNNING and COMPLETING jobs as due now."""
        jobs = self.store.jobs_in((JobState.RUNNING, JobState.COMPLETING))
        # The preempted among them (COMPLETING): their signal, and the kill at the end of
        # their grace (gbatch/head/loop/preempt.py).
        self._preempting = self.store.preempting() if jobs else {}
        ends = self._reservation_ends(jobs)
        for job in jobs:
            if job.state is JobState.RUNNING and job.spec.signal is not None:
                self._warn_run(job, now)
            if job.state is JobState.RUNNING and self.config.smtp_host and job.spec.mail_type:
                self._warn_time_limit(job, now)
            if job.state is JobState.RUNNING and job.spec.time_limit is not None:
                self._warn_terminals(job, now)
            if job.state is JobState.RUNNING and self._past_limit(job, now):
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
            end = ends.get(job.id)
            if job.state is JobState.RUNNING and end is not None and now >= end:
                # Slurm's: a job of a reservation past its window's end (and the
                # ResvOverRun after it) ends TIMEOUT.
                try:
                    job = self.store.set_state(
                        job.id,
                        JobState.COMPLETING,
                        f"reservation {job.spec.reservation} ended",
                        now,
                        expect={JobState.RUNNING},
                        stop_state=JobState.TIMEOUT,
                    )
                except IllegalTransition:
                    continue
            if job.state is JobState.COMPLETING:
                self._stop_run(job, now)

    def _reservation_ends(self, jobs: Sequence[Job]) -> dict[int, float]:
        """job id -> when each running job of a reservation is ended (resv_over_run).

        A job whose reservation is gone (deleted by an admin) or that started in none of
        its windows runs to its own time limit."""
        over_run = self.config.resv_over_run
        if over_run is None or not any(job.spec.reservation for job in jobs):
            return {}
        by_name = {r.name: r for r in self.store.reservations()}
        ends: dict[int, float] = {}
        for job in jobs:
            reservation = by_name.get(job.spec.reservation or "")
            if reservation is None or job.start_time is None:
                continue
            end = reservation.run_until(job.start_time, over_run)
            if end is not None:
                ends[job.id] = end
        return ends

    def _warn_time_limit(self, job: Job, now: float) -> None:
        """--mail-type=TIME_LIMIT_50/80/90: owe each once per run, when its run time
        passes that share of its limit (the store ignores a second one after a restart)."""
        limit = job.spec.time_limit
        if limit is None:
            return
        warned = self.runs.time_warned.setdefault(job.id, set())
        for kind in mail_types(job.spec.mail_type) & TIME_LIMIT_WARNINGS.keys() - warned:
            if self._past_limit(job, now, margin=limit * (1 - TIME_LIMIT_WARNINGS[kind])):
                self.store.queue_job_event(job.id, kind, now)
                warned.add(kind)

    def _warn_run(self, job: Job, now: float) -> None:
        """sbatch --signal: send the job's signal once per attempt, its seconds before
        the time limit. B: (the batch shell only, in Slurm) signals the whole run too:
        a gbatch job is one process group, or one container."""
        assert job.spec.signal is not None
        key = (job.id, job.attempt)
        if key in self._warned_runs:
            return
        warning = parse_signal(job.spec.signal)
        if not self._past_limit(job, now, margin=warning.seconds):
            return
        nodes = [node for _, node in self.fleet.run_nodes(job) if node is not None]
        if not nodes:
            return
        self._warned_runs.add(key)
        log.info("job %d: sending %s before its time limit", job.id, job.spec.signal)
        for node in nodes:  # a job across nodes: every node's run
            node.signal(job, job.attempt, signal.Signals(warning.signum))

    def _warn_terminals(self, job: Job, now: float) -> None:
        """Warn the terminals attached to a job once, stepnotices.warning_lead before its
        limit: every step of an srun/salloc allocation, a terminal step of another job."""
        key = (job.id, job.attempt)
        limit = job.spec.time_limit
        if key in self._warned_terminals or limit is None:
            return
        if not self._past_limit(job, now, margin=stepnotices.warning_lead(limit)):
            return
        self._warned_terminals.add(key)
        node = self.fleet.nodes.get(job.node or "")
        left = limit - (self.monotonic() - self.runs.started[key])
        for step in self._open_steps(job):
            if node is not None and (step.pty or job.spec.interactive is not None):
                node.tell_step(job, step, stepnotices.warning_lines(step, left))

    def _tell_ending(self, job: Job, node: Node, now: float) -> None:
        """Tell a stopped job's open steps why, unless its own first step ended it."""
        steps = [s for s in self.store.steps_of([job.id]) if s.attempt == job.attempt]
        if any(s.leads and s.state is not JobState.RUNNING for s in steps):
            return  # an srun/salloc allocation released as its step ended: nothing to say
        timeout = job.stop_state is JobState.TIMEOUT
        for step in steps:
            if step.state is JobState.RUNNING:
                lines = stepnotices.ending_lines(
                    step,
                    timeout=timeout,
                    reason=job.reason,
                    node=node.name,
                    grace=self.config.kill_grace_seconds,
                    now=now,
                )
                node.tell_step(job, step, lines)

    def _open_steps(self, job: Job) -> list[Step]:
        return [
            s
            for s in self.store.steps_of([job.id])
            if s.attempt == job.attempt and s.state is JobState.RUNNING
        ]

    def _stop_run(self, job: Job, now: float) -> None:
        """SIGTERM the run, then SIGKILL it once the grace period has passed.

        A job across nodes: its run on every node, with one grace for them all."""
        node = self.fleet.nodes.get(job.node or "")
        if node is None:
            return  # the collect step ends it
        others = [each for _, each in self.fleet.run_nodes(job)[1:] if each is not None]
        stopping = self.runs.stopping
        sent = stopping.get(job.id)
        preempted = self._preempting.get(job.id)
        if sent is None:
            self._tell_ending(job, node, now)
            if preempted is not None:
                # Before the signal: a run that ends at once still ends its output with it.
                self._leave_ending_note(job, output_line(preempted))
            first = signal.SIGTERM if preempted is None else preemption_signal(job)
            for each in (node, *others):
                each.signal(job, job.attempt, first)
            stopping[job.id] = (self.monotonic(), False)
        elif not sent[1] and (
            self.monotonic() - sent[0] >= self.config.kill_grace_seconds
            if preempted is None
            else now >= preempted.kill_at  # wall time: a restart keeps the same end
        ):
            for each in (node, *others):
                each.signal(job, job.attempt, signal.SIGKILL)
            stopping[job.id] = (sent[0], True)

    def _leave_ending_note(self, job: Job, line: str) -> None:
        """`line` for the run's output copier to end its output with (joblog.ending_note).

        A disk that refuses it costs the line alone (the story is in the job's events)."""
        paths = self.runs.paths
        if paths is None:  # a loop made without a home (some unit tests): no run dirs
            return
        try:
            write_ending_note(paths.run_dir(job.id, job.attempt), line)
        except OSError as err:
            log.warning("job %d: cannot leave its output's last line: %s", job.id, err)

    def _past_limit(self, job: Job, now: float, margin: float = 0) -> bool:
        """Run time against the limit (less `margin` seconds) on the monotonic clock, so
        a wall-clock jump (an NTP step, a mis-set clock) neither kills a job early nor
        lets it overrun. A run adopted after a restart has no monotonic start: wall time,
        once."""
        limit = job.spec.time_limit
        if limit is None or job.start_time is None:
            return False
        started_at = self.runs.started
        started = started_at.get((job.id, job.attempt))
        if started is None:
            # Adopted: anchor the monotonic clock at the wall-clock age it has now.
            started = self.monotonic() - max(0.0, now - job.start_time)
            started_at[(job.id, job.attempt)] = started
        return self.monotonic() - started >= limit - margin
