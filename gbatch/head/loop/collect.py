"""The loop's first step: the runs that ended or vanished, and those of nodes lost.

A node is lost when it is down with its lease run out (gbatch/head/liveness.py) or
gone from the inventory; a node heard again has the containers of runs the head
already ended removed.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from gbatch.core.model import ALLOCATED_STATES, IllegalTransition, Job, JobState
from gbatch.core.multinode import node_index, run_at
from gbatch.head import gpubudget, idlegpu
from gbatch.head.fleet import Fleet
from gbatch.head.liveness import Liveness
from gbatch.head.loop.conditions import NodeConditions
from gbatch.head.loop.dispatch import LAUNCH_SETTLE_SECONDS, LAUNCH_UNKNOWN
from gbatch.head.loop.runs import RunEnd, Runs
from gbatch.head.scheduler import PREEMPTED_BY
from gbatch.head.store import Store
from gbatch.nodes.base import LaunchError, Node, RunStatus
from gbatch.nodes.docker import container_name, node_index_of

log = logging.getLogger("gbatchd")


class EndedRuns:
    """Asks each allocated job's node for its run and records what it finds."""

    def __init__(
        self,
        store: Store,
        fleet: Fleet,
        runs: Runs,
        conditions: NodeConditions,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.fleet = fleet
        self.runs = runs
        self.conditions = conditions
        self.clock = clock

    def collect(self, now: float) -> None:
        """Record the end of every allocated run that exited, vanished or was lost with its node.

        A CONFIGURING run found running is adopted.
        """
        allocated = self.store.jobs_in(ALLOCATED_STATES)
        liveness = {name: self.fleet.liveness(each) for name, each in self.fleet.nodes.items()}
        for back in self.fleet.came_up(liveness):
            self.reap_stale_runs(back, allocated)
        self.conditions.tell_nodes_down(liveness, now)
        exited: list[RunEnd] = []
        for job in allocated:
            if job.peers:
                ended = self._collect_across(job, liveness, now)
                if ended is not None:
                    exited.append(ended)
                continue
            node = self.fleet.nodes.get(job.node or "")
            if node is None:
                # Its node left the inventory: whether the run lives is unknowable, so
                # never requeue it (that could run it twice).
                self.runs.end_run(
                    job,
                    JobState.NODE_FAIL,
                    f"node {job.node} is not in the fleet",
                    now,
                    end_time=now,
                )
                continue
            if liveness[node.name].runs_stopped:
                self._run_lost_with_node(job, liveness[node.name], now)
                continue
            status = node.status(job, job.attempt)
            if status.state == "unknown":
                continue  # the node cannot tell now: neither adopt nor requeue
            if status.state == "running":
                if job.state is JobState.CONFIGURING:
                    # The daemon died between starting the run and confirming it, or
                    # the start's answer was lost.
                    self.runs.confirm_running(
                        [job], "adopted: its unconfirmed start was found running", self.clock()
                    )
                continue
            if status.state == "exited":
                exited.append(self._finish(job, status, now))
            else:
                self._run_vanished(job, node, now)
        # One commit for all the runs that exited since the last tick.
        if exited:
            self.runs.end_runs(exited, now)

    def _collect_across(
        self, job: Job, liveness: Mapping[str, Liveness], now: float
    ) -> RunEnd | None:
        """collect() for a job across nodes: ONE job on all its nodes.

        A node of its allocation gone from the inventory or lost (its lease run out)
        ends the whole job, whether or not a run of it was there. It is RUNNING while
        all its runs run (a CONFIGURING one is adopted once every run is found); it ends
        once every run has ended, COMPLETED only if all exited 0. The first run found
        failed (by node order) while others still run stops them (kill-on-bad-exit: the
        job goes COMPLETING, the limits step signals every node) and gives the job its
        exit code and a reason that names its node. A run vanished ends the job as on
        one node. Returns the end to record with the others of this tick, if any."""
        for name in job.node_names:
            if name not in self.fleet.nodes:
                self.runs.end_run(
                    job, JobState.NODE_FAIL, f"node {name} is not in the fleet", now, end_time=now
                )
                return None
            if liveness[name].runs_stopped:
                self._run_lost_with_node(job, liveness[name], now, name)
                return None
        statuses: list[tuple[str, Node, RunStatus]] = []
        for name, node in self.fleet.run_nodes(job):
            assert node is not None  # every node is in the fleet (above)
            statuses.append((name, node, node.status(job, job.attempt)))
        states = [status.state for _, _, status in statuses]
        if all(state == "running" for state in states):
            if job.state is JobState.CONFIGURING and self._start_held(job, statuses, now):
                self.runs.confirm_running(
                    [job], "adopted: its unconfirmed start was found running", self.clock()
                )
            return None
        vanished = next(((n, node) for n, node, st in statuses if st.state == "vanished"), None)
        if vanished is not None and (job.stop_state is None or "running" in states):
            self._run_vanished(job, vanished[1], now)
            return None
        if "unknown" in states and job.stop_state is None:
            return None  # a node cannot tell now: neither adopt nor requeue
        failed = next(
            (
                (index, name, status)
                for index, (name, _, status) in enumerate(statuses)
                if status.state == "exited" and (status.exit_code or status.signal or status.oom)
            ),
            None,
        )
        if "running" in states or "unknown" in states:
            if failed is not None and job.stop_state is None:
                self._stop_others(job, *failed, now)
            return None
        # Every run has ended (exited, or vanished while being stopped).
        exits = [status for _, _, status in statuses if status.state == "exited"]
        last = max((s.end_time or now for s in exits), default=now)
        if job.stop_state is not None:
            # The job's exit is its first node's run's (the batch script's), as on one node.
            first = statuses[0][2]
            shown = first if first.state == "exited" else RunStatus("exited", 0, 0, last)
            end = self._finish(job, replace(shown, end_time=last), now)
            if job.exit_code is not None:
                # Stopped for a failed run: the job ends with that run's exit and reason.
                fields = {**end.fields, "exit_code": job.exit_code}
                fields["exit_signal"] = job.exit_signal or 0
                return RunEnd(job, end.new, job.reason or end.reason, fields)
            return end
        if failed is None:
            return self._finish(job, RunStatus("exited", 0, 0, last), now)
        index, name, status = failed
        end = self._finish(job, status, now)
        return RunEnd(job, end.new, f"{end.reason} on {name} (node {index})", end.fields)

    def _start_held(
        self, job: Job, statuses: Sequence[tuple[str, Node, RunStatus]], now: float
    ) -> bool:
        """Start every node's run of an adopted job across nodes (the daemon died, or an
        answer was lost, between creating its containers and starting them): docker
        starts those only created and leaves running ones be. False when a start failed
        (its job is ended or left as dispatch's rules say)."""
        if job.spec.image is None:
            return True
        for index, (name, node, _) in enumerate(statuses):
            try:
                node.start_held(job, job.attempt)
            except LaunchError as err:
                if err.maybe_started or err.node_busy:
                    return False  # asked again at the next tick
                for _, other, _ in statuses:
                    other.signal(job, job.attempt, signal.SIGKILL)
                self.runs.end_run(
                    job,
                    JobState.PENDING,
                    f"adopting its runs failed on {name} (node {index}): {err}; requeued",
                    now,
                    end_time=now,
                )
                return False
        return True

    def _stop_others(self, job: Job, index: int, name: str, status: RunStatus, now: float) -> None:
        """A run of a job across nodes failed while others run: stop them all (COMPLETING,
        the limits step signals every node), the job to end FAILED with that run's exit
        (or requeued as a retry, when it has retries left)."""
        code, killed_by = status.exit_code or 0, status.signal or 0
        outcome = f"exit code {code}" if not killed_by else f"killed by signal {killed_by}"
        if status.oom:
            outcome = "out of memory"
        where = f"{outcome} on {name} (node {index})"
        if (used := self.runs.retries_used(job)) < job.spec.retries:
            stop, reason = JobState.PENDING, f"retry {used + 1}/{job.spec.retries} after {where}"
        else:
            stop = JobState.OUT_OF_MEMORY if status.oom else JobState.FAILED
            reason = where
        log.warning("job %d: %s; stopping its runs on every node", job.id, where)
        with contextlib.suppress(IllegalTransition):
            self.store.set_state(
                job.id,
                JobState.COMPLETING,
                reason,
                now,
                expect={JobState.RUNNING},
                stop_state=stop,
                exit_code=code,
                exit_signal=killed_by,
            )

    def _finish(self, job: Job, status: RunStatus, now: float) -> RunEnd:
        """How the exited run of `job` ends (not recorded yet)."""
        end = status.end_time or now
        exit_code, killed_by = status.exit_code or 0, status.signal or 0
        outcome = f"exit code {exit_code}" if not killed_by else f"killed by signal {killed_by}"
        fields: dict[str, object] = {
            "end_time": end,
            "exit_code": exit_code,
            "exit_signal": killed_by,
        }
        if job.spec.interactive and job.stop_state is not None and job.exit_code is not None:
            # Its first step ended and stopped it (loop/steps.py), recording that step's
            # exit: the allocation ends with it, not with its holder's SIGTERM.
            fields["exit_code"], fields["exit_signal"] = job.exit_code, job.exit_signal or 0
            new = job.stop_state
            # CANCELLED here: its step was hung up on (loop/steps.py).
            reason = "its client went away" if new is JobState.CANCELLED else ""
            if new is JobState.FAILED:
                reason = (
                    f"killed by signal {job.exit_signal}"
                    if job.exit_signal
                    else f"exit code {job.exit_code}"
                )
        elif job.stop_state is not None:
            new, reason = job.stop_state, _stopped_reason(job)
        elif status.oom:
            new, reason = JobState.OUT_OF_MEMORY, "out of memory"
        elif exit_code == 0 and killed_by == 0:
            new, reason = JobState.COMPLETED, ""
        elif (used := self.runs.retries_used(job)) < job.spec.retries:
            new, reason = (
                JobState.PENDING,
                f"retry {used + 1}/{job.spec.retries} after {outcome}",
            )
        else:
            new, reason = JobState.FAILED, outcome
        return RunEnd(job, new, reason, fields)

    def _run_vanished(self, job: Job, node: Node, now: float) -> None:
        if job.stop_state is not None:
            self.runs.end_run(job, job.stop_state, _stopped_reason(job), now, end_time=now)
        elif job.state is JobState.CONFIGURING:
            lost_at = self._launch_lost_at(job)
            if lost_at is None:
                # The daemon died between recording intent and confirming the start.
                self.runs.end_run(job, JobState.PENDING, "launch was not confirmed; requeued", now)
            elif not self._start_may_still_appear(job, node, lost_at, now):
                reason = (
                    f"launch was not confirmed: no container "
                    f"{container_name(job.id, job.attempt)} on {node.name} "
                    f"{LAUNCH_SETTLE_SECONDS:g} s after its answer was lost; requeued"
                )
                log.warning("job %d: %s", job.id, reason)
                self.runs.end_run(job, JobState.PENDING, reason, now)
        else:
            self.runs.end_run(
                job,
                JobState.PENDING,
                "its run vanished (node restarted?); requeued",
                now,
                end_time=now,
            )

    def _launch_lost_at(self, job: Job) -> float | None:
        """When the answer of the CONFIGURING job's start was lost (the note dispatch
        recorded), or None when it was not (the daemon died before it knew)."""
        events = self.store.events(job.id)
        last = events[-1] if events else None
        if last is None or last.state is not JobState.CONFIGURING:
            return None
        return last.time if last.reason.startswith(LAUNCH_UNKNOWN) else None

    def _start_may_still_appear(self, job: Job, node: Node, lost_at: float, now: float) -> bool:
        """Whether the container of a start whose answer was lost at `lost_at` may still
        come to exist: until LAUNCH_SETTLE_SECONDS have passed, and until a node report
        received after that lists no such container."""
        if now < lost_at + LAUNCH_SETTLE_SECONDS:
            return True
        key = (job.id, job.attempt)
        listing_after = self.runs.listing_after
        seen = listing_after.setdefault(key, node.report_seq)
        report, _ = node.report()
        if report is None or node.report_seq <= seen:
            return True
        if any(
            (c.job, c.attempt) == key and c.node in (None, node.name) for c in report.containers
        ):
            return True  # listed after all: the next status() finds it
        del listing_after[key]
        return False

    def _run_lost_with_node(
        self, job: Job, liveness: Liveness, now: float, name: str | None = None
    ) -> None:
        """The run's node is down and its lease has run out: the run is dead, and the
        job is requeued (NODE_FAIL if it opted out, its stop state if being stopped).

        `name`: the node lost, when not the job's first (a job across nodes ends whole:
        its runs on the other nodes are killed as its end cleans them up)."""
        name = name or job.node
        lost = f"node {name} down ({liveness.describe('')}); its run was stopped by the lease"
        if job.peers:
            lost = (
                f"node {name} of its {len(job.node_names)} nodes down "
                f"({liveness.describe('')}); the job's runs were stopped on every node"
            )
        if job.stop_state is not None:
            new, reason = job.stop_state, f"{_stop_reason(job.stop_state)}; {lost}"
        elif job.spec.requeue:
            new, reason = JobState.PENDING, f"{lost}; requeued"
        else:
            new, reason = JobState.NODE_FAIL, f"{lost}; not requeued (requeue: false)"
        log.warning("job %d: %s", job.id, reason)
        self.runs.end_run(job, new, reason, now, end_time=now)

    def reap_stale_runs(self, node: Node, allocated: Sequence[Job]) -> None:
        """Kill and remove a node's containers of runs the head has already ended or requeued.

        The node was cut off meanwhile, or an earlier daemon died before removing them.
        Only containers labelled with this node's name are touched: an engine may serve
        other heads, whose job ids mean nothing to this store.
        """
        report, _ = node.report()
        if report is None:
            return
        live = {(job.id, job.attempt) for job in allocated}
        for container in report.containers:
            if container.node != node.name or (container.job, container.attempt) in live:
                continue
            job = self.store.get(container.job)
            if job is None:
                continue
            if job.state in ALLOCATED_STATES and job.attempt < container.attempt:
                continue  # listed before the store said so: a run being started now
            index = node_index_of(container.name)
            if index and node_index(job, node.name) != index:
                # Another node's run of a job across nodes that no longer names this
                # node at that place (requeued): the node finds it by its place.
                job = run_at(job, node.name, index)
            if container.state == "running":
                log.warning(
                    "node %s: run %d.%d of a job already %s was still running; killing it",
                    node.name,
                    container.job,
                    container.attempt,
                    job.state.value,
                )
                node.signal(job, container.attempt, signal.SIGKILL)
            node.cleanup(job, container.attempt)


def _stopped_reason(job: Job) -> str:
    """The reason a stopped run's job ends with: the idle_gpu policy's own, which says
    why, else _stop_reason's."""
    if job.stop_state is JobState.CANCELLED and job.reason.endswith(idlegpu.POLICY_SUFFIX):
        return job.reason
    if job.reason.startswith(PREEMPTED_BY):  # requeued, cancelled or ended: why
        return job.reason
    assert job.stop_state is not None
    return _stop_reason(job.stop_state)


def _stop_reason(state: JobState) -> str:
    """The reason a stopped run's job ends with. A timed-out job's is Slurm's TimeLimit,
    which `squeue -t all` shows in NODELIST(REASON) as `(TimeLimit)` (its history keeps
    the stop's own "time limit reached"); one the gpu_mem_policy stopped (the only stop
    that ends OUT_OF_MEMORY) reads OutOfGpuMemoryBudget, its history the memory used."""
    return {
        JobState.CANCELLED: "cancelled",
        JobState.TIMEOUT: "TimeLimit",
        JobState.PENDING: "requeued on request",
        JobState.OUT_OF_MEMORY: gpubudget.BUDGET_REASON,
    }.get(state, state.value.lower())
