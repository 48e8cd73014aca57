"""The loop's record of its runs: starts confirmed and ends recorded, many in one commit.

Many starts are confirmed in one commit, many ends recorded in one; and here is what the
steps remember of each live run until it ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from gbatch.core.crashpoints import crash_point
from gbatch.core.model import Job, JobState
from gbatch.core.multinode import runs_everywhere
from gbatch.head.fleet import Fleet
from gbatch.head.metrics import DaemonMetrics
from gbatch.head.store import StateChange, Store, Usage
from gbatch.nodes.joblog import NodeJoins
from gbatch.site.config import Config, Paths


class RunEnd(NamedTuple):
    """A run's end to record: the job's new state, reason and other fields."""

    job: Job
    new: JobState
    reason: str
    fields: Mapping[str, object]


class Runs:
    """Confirms starts and records ends for the steps (collect, limits, dispatch).

    It also keeps what they remember of a live run, forgotten when it ends.
    """

    def __init__(
        self,
        store: Store,
        fleet: Fleet,
        config: Config,
        metrics: DaemonMetrics,
        wake: threading.Event,
        monotonic: Callable[[], float],
        paths: Paths | None = None,
        joins: NodeJoins | None = None,
    ) -> None:
        self.store = store
        self.paths = paths
        self.joins = joins  # the output of jobs run on every node, joined into one log
        self.fleet = fleet
        self.config = config
        self.metrics = metrics
        self.wake = wake
        self.monotonic = monotonic
        # (job id, attempt) -> monotonic time its run was confirmed (time limits)
        self.started: dict[tuple[int, int], float] = {}
        # job id -> (monotonic time SIGTERM was sent, SIGKILL sent yet) (limits)
        self.stopping: dict[int, tuple[float, bool]] = {}
        # job id -> the TIME_LIMIT_<pct> warnings owed for its current run so far (limits)
        self.time_warned: dict[int, set[str]] = {}
        # (job id, attempt) of an unconfirmed start past its settle period -> the node's
        # report number then: only a later report may confirm that it never started
        # (collect)
        self.listing_after: dict[tuple[int, int], int] = {}
        # Told of each run's end (job id, state) once recorded: port forwards close.
        self.on_end: Callable[[int, str], None] = lambda job_id, state: None

    def confirm_running(self, jobs: Sequence[Job], reason: str, now: float) -> None:
        """RUNNING at `now` for the CONFIGURING `jobs` whose runs exist, in one commit."""
        confirmed = self.store.set_states(
            [
                StateChange(
                    job.id, JobState.RUNNING, reason, {JobState.CONFIGURING}, {"start_time": now}
                )
                for job in jobs
            ],
            now,
        )
        for job, refused in zip(jobs, confirmed, strict=True):
            # Refused: cancelled while starting; the job is COMPLETING and the next
            # enforce_limits step stops it.
            if refused is None:
                self.started[(job.id, job.attempt)] = self.monotonic()
                self.metrics.observe_start(now - job.submit_time)
            self.listing_after.pop((job.id, job.attempt), None)

    def end_run(self, job: Job, new: JobState, reason: str, now: float, **fields: object) -> None:
        """end_runs for one run: `job` goes to `new` with `reason` and `fields`."""
        self.end_runs([RunEnd(job, new, reason, fields)], now)

    def end_runs(self, ends: Sequence[RunEnd], now: float) -> None:
        """Record the ends of runs in one commit, then clean each up and hand its GPUs back.

        One fsync for them all, each end with its usage. A change refused (a concurrent
        change won) is left alone: the next tick sees it.
        """
        changes = []
        for end in ends:
            job, fields = end.job, dict(end.fields)
            if end.new is JobState.PENDING:
                # A requeued job keeps its attempt count but no longer holds a node.
                fields.update(node=None, gpus=(), gpu_uuids=(), peers=(), stop_state=None)
            else:
                fields["stop_state"] = None
            usage = None
            if job.start_time is not None and job.gpu_count:
                ended = fields.get("end_time") or now
                assert isinstance(ended, float | int)
                used = gpu_seconds(job, ended, self.fleet.charged_gpus(job))
                usage = Usage(job.user, used, self.config.half_life_seconds)
            changes.append(StateChange(job.id, end.new, end.reason, {job.state}, fields, usage))
        crash_point("finish.before_commit")
        refused = self.store.set_states(changes, now)
        crash_point("finish.after_commit")
        for end, change, why in zip(ends, changes, refused, strict=True):
            if why is not None:
                continue
            job = end.job
            ended = change.fields.get("end_time") or now
            assert isinstance(ended, float | int)
            ran = None if job.start_time is None else ended - job.start_time
            self.metrics.observe_end(end.new.value, ran)
            self.stopping.pop(job.id, None)
            self.time_warned.pop(job.id, None)
            self.started.pop((job.id, job.attempt), None)
            self.listing_after.pop((job.id, job.attempt), None)
            self._release(job)
            self.on_end(job.id, end.new.value)
            self.wake.set()

    def _release(self, job: Job) -> None:
        """After a run's end: the rest of its nodes' output joined to the job's log, its
        run cleaned up on every node that had one (a run still going there is killed: its
        job has ended), and its GPUs handed back on every node of its allocation."""
        if self.joins is not None and len(job.node_names) > 1 and runs_everywhere(job.spec):
            self.joins.finish(job.id, job.attempt, len(job.node_names))
        for _, node in self.fleet.run_nodes(job):
            if node is not None:
                node.cleanup(job, job.attempt)
        for name, gpus in job.placements:
            node = self.fleet.nodes.get(name)
            if node is not None:
                self.fleet.release_gpus(node, gpus)

    def retries_used(self, job: Job) -> int:
        """Failed runs (and launches) retried so far.

        Attempts count every dispatch, but a requeue the job did not cause (an
        unconfirmed launch after a daemon crash, a vanished run, a lost node) costs it no
        retry.
        """
        return sum(
            1
            for event in self.store.events(job.id)
            if event.state is JobState.PENDING
            and event.reason.startswith(("retry ", "launch failed"))
        )


def gpu_seconds(job: Job, until: float, gpus: float | None = None) -> float:
    """GPU-seconds a job's run has used up to `until` (0 before it started).

    `gpus`: what it is charged (Fleet.charged_gpus: a share of one GPU a fraction);
    default its count."""
    if job.start_time is None:
        return 0.0
    return (job.gpu_count if gpus is None else gpus) * max(0.0, until - job.start_time)
