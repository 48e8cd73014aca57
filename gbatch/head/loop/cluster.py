"""The loop's cluster step: jobs of partitions backed by a Slurm cluster.

The planner never sees these jobs (gbatch/head/loop/schedule.py leaves them out): the
cluster places them. Each pass, for each such partition, this step

1. asks the cluster once (`squeue`) for every job the partition's login user has there,
   and once more (`sacct`) for the open jobs squeue no longer lists;
2. mirrors each open job: PENDING with the cluster's reason, RUNNING on the nodes it
   names, then its end state and exit code; a job the cluster has no record of at all
   ends FAILED saying so;
3. forwards cancels: a job cancelled here (pending, or COMPLETING with a stop state)
   that the cluster still holds is scancelled, all in one call;
4. sends the partition's pending jobs, up to its `max_jobs`: the intent (attempt, marker)
   committed first, then sbatch, then the cluster's id with the "sent" event. A job
   whose intent is on record but whose id is not (the head died in between, or sbatch's
   answer was lost) is looked for by its marker in step 1's answer and adopted; only
   when the cluster surely lacks it is it sent again.

A cluster that cannot be reached makes its partition down (`down`, with the reason):
its jobs keep their last known state until it answers again, and are then reconciled
by the same pass.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gbatch.core.crashpoints import crash_point
from gbatch.core.limits import Use, UserLimits, over_limits, use_by_user, with_cluster_jobs
from gbatch.core.model import (
    ALLOCATED_STATES,
    CLUSTER_LINK_REASON,
    FINAL_STATES,
    HELD_REASON,
    ClusterNodes,
    IllegalTransition,
    Job,
    JobState,
)
from gbatch.core.qos import QosTable, over_qos_limits
from gbatch.head.scheduler import queue_order
from gbatch.head.store import ClusterJob, Store
from gbatch.head.store.clusterjobs import SEND_BATCH
from gbatch.head.store.usage import Usage
from gbatch.nodes.backend import Backend, BackendDown, BackendRefused, LinkRefused, Observation
from gbatch.nodes.cluster import SLURM_FINAL, cluster_minutes, job_marker, refusal
from gbatch.nodes.inventory import Partition

log = logging.getLogger("gbatchd")

# How often the cluster is asked while nothing wakes its thread (a submit does), and
# while its partition is down.
POLL_SECONDS = 2.0
DOWN_RETRY_SECONDS = 5.0
# -p gpu,uni: how long the cluster's start estimate for a job is used before it is
# asked again, and how many jobs one pass asks about at most (one call for all).
ESTIMATE_SECONDS = 20.0
ESTIMATE_BATCH = 100
# How often the cluster's sinfo is asked for its partition's nodes (gbatch sinfo's rows):
# they change slowly, and a pass every POLL_SECONDS need not pay one more call for them.
NODES_SECONDS = 30.0

# A pending job's reasons on the cluster that say it is held (by its user, or by the
# cluster's admins, whose hold gbatch never releases).
_HELD_THERE = frozenset({HELD_REASON, "JobHeldAdmin"})
# Slurm's states in which the job holds nodes (mirrored as RUNNING).
_SLURM_RUNNING = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING"})
_SLURM_ENDS: Mapping[str, JobState] = {
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT,
    "DEADLINE": JobState.TIMEOUT,
    "NODE_FAIL": JobState.NODE_FAIL,
    "BOOT_FAIL": JobState.NODE_FAIL,
    "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY,
    "PREEMPTED": JobState.PREEMPTED,
}


@dataclass
class _Pass:
    """What one pass learned of a partition's cluster, and what it owes it."""

    observed: Mapping[str, Observation]  # squeue's answer, by cluster id
    by_marker: Mapping[str, Observation]  # the same, by the marker in its comment
    gone: Mapping[str, Observation]  # sacct's answer for those squeue forgot
    to_cancel: list[str] = field(default_factory=list)  # cluster ids to scancel
    unsent: list[tuple[ClusterJob, Job]] = field(default_factory=list)  # intents to send
    reasons: list[tuple[int, str]] = field(default_factory=list)  # pending reasons changed
    to_hold: list[str] = field(default_factory=list)  # held here, not yet there
    to_release: list[str] = field(default_factory=list)  # released here, held there
    # (job, cluster id, minutes): time limits changed here (scontrol update), not there.
    time_limits: list[tuple[Job, str, int]] = field(default_factory=list)


def end_state(slurm_state: str) -> JobState:
    """gbatch's final state for a Slurm final state (FAILED for one it does not name)."""
    return _SLURM_ENDS.get(slurm_state, JobState.FAILED)


class ClusterJobsStep:
    """The cluster partitions' step: their backends, and which are down and why."""

    def __init__(
        self,
        store: Store,
        partitions: Sequence[Partition],
        head: str,
        make_backend: Callable[[Partition], Backend],
    ) -> None:
        self.store = store
        self.head = head
        self.partitions = {p.name: p for p in partitions if p.slurm is not None}
        self.backends = {name: make_backend(p) for name, p in self.partitions.items()}
        # partition -> why it is down (its login node unreachable, squeue failing).
        self.down: dict[str, str] = {}
        self.wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0  # passes done (tests wait on it)
        # job id -> the time limit (minutes) last forwarded for it: one the cluster
        # refuses (a raise, which only its operators may make) is not asked again.
        self._limits_forwarded: dict[int, int] = {}
        # Set by the Daemon: the fair-share half-life (an ended cluster run's
        # GPU-seconds feed its user's usage; None: not counted) and each user's limits
        # (a job whose user is at max_running_jobs/max_gpus, counting the lab's nodes
        # and the clusters' open jobs, is not sent; None: no limits).
        self.half_life: float | None = None
        self.limits_for: Callable[[str], UserLimits] | None = None
        # Set by the Daemon when a QOS has per-user limits (max_running_jobs, max_gpus):
        # they hold a job back here as on the lab, the clusters' open jobs counted.
        self.qos: QosTable | None = None
        # -p gpu,uni (gbatch/head/loop/route.py): job id -> (the cluster's estimated
        # start, None if it would not take the job; when asked), and the jobs the
        # router wants an estimate for, by partition, asked at the next pass.
        self.estimates: dict[int, tuple[float | None, float]] = {}
        self._wanted: dict[str, dict[int, Job]] = {}
        self._wanted_lock = threading.Lock()
        # partition -> its nodes as the cluster's sinfo last said them (sinfo's rows;
        # handlers read it from their threads: each value is replaced whole, never
        # changed), and when it was last asked. Both are forgotten while it is down.
        self.nodes: dict[str, tuple[ClusterNodes, ...]] = {}
        self._nodes_asked: dict[str, float] = {}

    def start(self, clock: Callable[[], float], report: Callable[[BaseException], None]) -> None:
        """Mirror in a thread of its own until stop().

        A slow or unreachable login node must not hold up the loop that serves the lab's
        own nodes."""
        if not self.backends or self._thread is not None:
            return

        def keep_mirroring() -> None:
            while not self._stopping.is_set():
                try:
                    self.mirror(clock())
                except Exception as err:  # a bug: told, then the next pass retries
                    report(err)
                self.passes += 1
                wait = DOWN_RETRY_SECONDS if self.down else POLL_SECONDS
                self.wake.wait(wait)
                self.wake.clear()

        self._thread = threading.Thread(target=keep_mirroring, name="clusters", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Mirror now (a job was submitted or cancelled)."""
        self.wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self.close()

    def mirror(self, now: float) -> None:
        """One pass over every cluster partition (see the module's docstring)."""
        for name, backend in self.backends.items():
            try:
                self._pass(name, backend, now)
            except BackendDown as err:
                if name not in self.down:
                    log.warning("partition %s is down: %s", name, err)
                    self.store.queue_partition_event(name, "PARTITION_DOWN", str(err), now)
                self.down[name] = str(err)
                # What it said of its nodes is stale now; asked again once it answers.
                self.nodes.pop(name, None)
                self._nodes_asked.pop(name, None)
                continue
            if self.down.pop(name, None) is not None:
                log.info("partition %s is up again: its cluster answers", name)
                self.store.queue_partition_event(name, "PARTITION_UP", "its cluster answers", now)

    def close(self) -> None:
        for backend in self.backends.values():
            backend.close()

    def estimate(self, job: Job, partition: str, now: float) -> float | None:
        """When the cluster of `partition` last said `job` would start there, or None.

        None: not asked yet, or it would not take the job. One older than
        ESTIMATE_SECONDS, or none, is asked for at the next pass, with the others wanted
        (one call)."""
        known = self.estimates.get(job.id)
        if known is None or now - known[1] >= ESTIMATE_SECONDS:
            with self._wanted_lock:
                wanted = self._wanted.setdefault(partition, {})
                first = not wanted
                wanted[job.id] = job
            if first and known is None:
                self.wake.set()
        return None if known is None else known[0]

    def _usage(self, job: Job, now: float) -> Usage | None:
        """The GPU-seconds a cluster run used (its GPUs since it was seen running)."""
        if self.half_life is None or job.start_time is None or not job.spec.total_gpus:
            return None
        used = job.spec.total_gpus * max(0.0, now - job.start_time)
        return Usage(job.user, used, self.half_life)

    def room(self, partition: str) -> bool:
        """Whether the partition may take one more job now (fewer than max_jobs open)."""
        slurm = self.partitions[partition].slurm
        assert slurm is not None
        return self.store.cluster_open_count(partition) < slurm.max_jobs

    def _ask_estimates(self, name: str, backend: Backend, now: float) -> None:
        """Ask the cluster once, for every job the router wants an estimate of."""
        with self._wanted_lock:
            wanted = self._wanted.pop(name, {})
        if not wanted:
            return
        jobs = sorted(wanted.values(), key=lambda job: job.id)
        asked, later = jobs[:ESTIMATE_BATCH], jobs[ESTIMATE_BATCH:]
        if later:
            with self._wanted_lock:
                self._wanted.setdefault(name, {}).update((job.id, job) for job in later)
        answers = backend.estimate(asked)
        for job in asked:
            self.estimates[job.id] = (answers.get(job.id), now)
        stale = [k for k, (_, at) in self.estimates.items() if now - at > 5 * ESTIMATE_SECONDS]
        for job_id in stale:
            del self.estimates[job_id]

    def _pass(self, name: str, backend: Backend, now: float) -> None:
        observed = backend.observe()
        by_marker = {o.marker: o for o in observed.values() if o.marker}
        rows = _seen_users(self.store.cluster_jobs(name), backend.observed_users())
        missing = [
            row.cluster_id
            for row, _ in rows
            if row.cluster_id is not None and row.cluster_id not in observed
        ]
        gone = backend.observe_gone(missing) if missing else {}
        seen_now = _Pass(observed, by_marker, gone)
        for row, job in rows:
            try:
                self._mirror_row(name, row, job, seen_now, now)
            except IllegalTransition:
                # Changed here meanwhile (a cancel, a hold): the next pass sees it.
                continue
        self.store.cluster_reasons(seen_now.reasons)
        if self._limits_forwarded:  # only open jobs' are worth keeping
            open_ids = {job.id for _, job in rows}
            self._limits_forwarded = {
                k: v for k, v in self._limits_forwarded.items() if k in open_ids
            }
        if seen_now.to_cancel:
            backend.cancel(seen_now.to_cancel)
        if seen_now.to_hold:
            backend.hold(seen_now.to_hold, True)
        if seen_now.to_release:
            backend.hold(seen_now.to_release, False)
        self._forward_time_limits(name, backend, seen_now.time_limits, now)
        self._send(name, backend, seen_now.unsent, now)
        self._ask_estimates(name, backend, now)
        self._ask_nodes(name, backend, now)

    def _ask_nodes(self, name: str, backend: Backend, now: float) -> None:
        """Ask the cluster's sinfo for the partition's nodes, at most every NODES_SECONDS.

        Last in the pass: the jobs' business goes first. A failing sinfo leaves the nodes
        unknown (the jobs' mirror does not need them) and is said once in the log."""
        asked = self._nodes_asked.get(name)
        if asked is not None and now - asked < NODES_SECONDS:
            return
        self._nodes_asked[name] = now
        try:
            seen = backend.observe_nodes()
        except BackendRefused as err:
            if name in self.nodes or asked is None:
                log.warning("partition %s: the cluster's nodes are unknown: %s", name, err)
            self.nodes.pop(name, None)
            return
        if seen is None:
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = tuple(seen)

    def _mirror_row(
        self, name: str, row: ClusterJob, job: Job, seen_now: _Pass, now: float
    ) -> None:
        """One open job: adopted by its marker, cancelled there, lost, or mirrored."""
        if row.cluster_id is None:
            found = seen_now.by_marker.get(row.marker)
            if found is None:
                if job.state is JobState.PENDING:
                    seen_now.unsent.append((row, job))  # never reached the cluster
                else:
                    self.store.close_cluster_job(job.id)
                return
            self.store.record_cluster_id(
                job.id,
                found.backend_id,
                f"found on cluster {name} as job {found.backend_id}",
                now,
            )
            row = replace(row, cluster_id=found.backend_id)
            job = self.store.get(job.id) or job
        assert row.cluster_id is not None
        seen = seen_now.observed.get(row.cluster_id) or seen_now.gone.get(row.cluster_id)
        if job.state in FINAL_STATES or job.state is JobState.COMPLETING:
            self._ended_here(row, job, seen, seen_now.to_cancel, now)
            return
        if seen is None:
            self.store.cluster_ended(
                job.id,
                JobState.FAILED,
                f"cluster {name} has no record of its job {row.cluster_id} (lost or purged)",
                now,
                expect={job.state},
                usage=self._usage(job, now),
            )
            return
        self._mirror_one(name, row, job, seen, seen_now, now)

    def _ended_here(
        self,
        row: ClusterJob,
        job: Job,
        seen: Observation | None,
        to_cancel: list[str],
        now: float,
    ) -> None:
        """A job ended or stopping here: cancel it there, or record that it ended."""
        if seen is not None and seen.state not in SLURM_FINAL:
            assert row.cluster_id is not None
            to_cancel.append(row.cluster_id)
            return
        if job.state is JobState.COMPLETING and job.stop_state is JobState.PENDING:
            # scontrol requeue: back in the queue as never run, to be sent again.
            self.store.cluster_ended(
                job.id,
                JobState.PENDING,
                job.reason,
                now,
                expect={JobState.COMPLETING},
                usage=self._usage(job, now),
                end_time=None,
                node=None,
                start_time=None,
                exit_code=None,
                exit_signal=None,
                stop_state=None,
            )
        elif job.state is JobState.COMPLETING:
            self.store.cluster_ended(
                job.id,
                job.stop_state or JobState.CANCELLED,
                job.reason,
                now,
                expect={JobState.COMPLETING},
                usage=self._usage(job, now),
                **_exit_fields(seen),
            )
        else:
            self.store.close_cluster_job(job.id)

    def _mirror_one(
        self,
        name: str,
        row: ClusterJob,
        job: Job,
        seen: Observation,
        seen_now: _Pass,
        now: float,
    ) -> None:
        state = seen.state
        final = end_state(state) if state in SLURM_FINAL else None
        ran = final is not None and (
            bool(seen.nodes) or final not in (JobState.CANCELLED, JobState.FAILED)
        )
        if (state in _SLURM_RUNNING or ran) and job.state is JobState.PENDING:
            self.store.cluster_started(
                job.id,
                row.attempt,
                seen.nodes or name,
                f"running on cluster {name} as job {row.cluster_id}",
                now,
            )
            job = replace(job, state=JobState.RUNNING)
        if final is not None:
            reason = "" if final is JobState.COMPLETED else (seen.reason or state)
            self.store.cluster_ended(
                job.id,
                final,
                reason,
                now,
                expect={job.state},
                usage=self._usage(job, now),
                **_exit_fields(seen),
            )
            return
        assert row.cluster_id is not None
        self._compare_time_limit(job, row.cluster_id, seen, seen_now)
        if job.state is not JobState.PENDING:
            return
        held_there = seen.reason in _HELD_THERE
        if job.held and not held_there and state == "PENDING":
            seen_now.to_hold.append(row.cluster_id)  # scontrol hold here: there too
            return
        if not job.held and seen.reason == HELD_REASON:
            seen_now.to_release.append(row.cluster_id)
            return
        reason = seen.reason or "None"
        if job.reason != reason:
            seen_now.reasons.append((job.id, reason))

    def _compare_time_limit(
        self, job: Job, cluster_id: str, seen: Observation, seen_now: _Pass
    ) -> None:
        """Owe the cluster the job's time limit where `scontrol update` changed it here.

        The cluster keeps whole minutes; a job without a limit here (or one squeue does
        not show there) is left as it is."""
        wanted = job.spec.time_limit
        if wanted is None or seen.time_limit is None:
            return
        minutes = cluster_minutes(wanted)
        if seen.time_limit == minutes * 60 or self._limits_forwarded.get(job.id) == minutes:
            return
        seen_now.time_limits.append((job, cluster_id, minutes))

    def _forward_time_limits(
        self,
        name: str,
        backend: Backend,
        changes: Sequence[tuple[Job, str, int]],
        now: float,
    ) -> None:
        """One call for every time limit owed; each refusal is told once in its job's story."""
        if not changes:
            return
        refused = backend.set_time_limits([(cluster_id, m) for _, cluster_id, m in changes])
        told = []
        for job, cluster_id, minutes in changes:
            self._limits_forwarded[job.id] = minutes
            why = refused.get(cluster_id)
            if why is not None:
                log.warning(
                    "cluster %s refused TimeLimit=%d of job %d: %s", name, minutes, job.id, why
                )
                said = f"cluster {name} refused TimeLimit={minutes}: {why}"
                told.append((job.id, now, job.state.value, said))
        if told:
            self.store.job_events(told)

    def _send(
        self,
        name: str,
        backend: Backend,
        unsent: list[tuple[ClusterJob, Job]],
        now: float,
    ) -> None:
        """Send again the intents the cluster never got, then new jobs while fewer than
        max_jobs are open there (those intents count among them)."""
        partition = self.partitions[name]
        assert partition.slurm is not None
        for row, job in unsent:
            self._send_one(name, backend, job, row.marker, now)
        room = partition.slurm.max_jobs - self.store.cluster_open_count(name)
        if room <= 0:
            return
        # More than `room` read: jobs a user's limits hold back leave room to the others.
        fresh = self.store.cluster_unsent([name], limit=max(room, SEND_BATCH))
        if fresh and self.half_life is not None:
            # In the planner's order: fair share, then priority, then submit time.
            fresh = queue_order(fresh, self.store.usage(now, self.half_life))
        # The users' limits and each QOS's per-user ones count the jobs on the lab's
        # nodes and every cluster's open ones: read once for both.
        holding = self._held_jobs() if fresh else None
        use = counted = None
        if holding is not None and self.limits_for is not None:
            use = with_cluster_jobs(use_by_user(holding[0]), holding[1])
        if holding is not None and self.qos is not None and self.qos.limits_running:
            counted = [*holding[0], *holding[1]]
        waiting: list[tuple[int, str]] = []
        for job in fresh:
            if room <= 0:
                break
            if not backend.may_send(job.user):  # per-user identity, no working link
                if job.reason != CLUSTER_LINK_REASON:
                    waiting.append((job.id, CLUSTER_LINK_REASON))
                continue
            why = refusal(job.spec, partition.slurm)
            if why is not None:
                self.store.set_state(
                    job.id, JobState.FAILED, why, now, expect={JobState.PENDING}, end_time=now
                )
                continue
            if use is not None and self.limits_for is not None:
                held = over_limits(
                    self.limits_for(job.user), use.get(job.user, Use()), job.spec.total_gpus
                )
                if held is not None:  # the lab's limits apply before a job leaves
                    if job.reason != held:
                        waiting.append((job.id, held))
                    continue
                use = with_cluster_jobs(use, [job])
            if counted is not None and self.qos is not None:
                held_by_qos = over_qos_limits([job], counted, self.qos).get(job.id)
                if held_by_qos is not None:
                    if job.reason != held_by_qos:
                        waiting.append((job.id, held_by_qos))
                    continue
                counted.append(job)
            attempt = job.attempt + 1
            marker = job_marker(self.head, job.id, attempt)
            if self.store.begin_cluster_send(job.id, attempt, name, marker, now):
                room -= 1
                self._send_one(name, backend, job, marker, now)
        self.store.cluster_reasons(waiting)

    def _held_jobs(self) -> tuple[list[Job], list[Job]] | None:
        """What limits count: the jobs on the lab's nodes, and those sent to any cluster
        (None without limits to check)."""
        if self.limits_for is None and (self.qos is None or not self.qos.limits_running):
            return None
        return self.store.jobs_in(ALLOCATED_STATES), self.store.cluster_sent_jobs()

    def _send_one(self, name: str, backend: Backend, job: Job, marker: str, now: float) -> None:
        """sbatch one job whose intent is on record. BackendDown leaves the intent for
        the next pass, which finds the job by its marker or sends it again."""
        try:
            cluster_id = backend.submit(job, marker)
        except LinkRefused:
            # Its user's link broke (they are told): the intent waits for a relink.
            return
        except BackendRefused as err:
            self.store.cluster_ended(
                job.id,
                JobState.FAILED,
                f"cluster {name} refused it: {err}",
                now,
                expect={JobState.PENDING},
            )
            return
        crash_point("cluster.after_sbatch")
        self.store.record_cluster_id(
            job.id, cluster_id, f"sent to cluster {name} as job {cluster_id}", now
        )


def _seen_users(
    rows: list[tuple[ClusterJob, Job]], users: frozenset[str] | None
) -> list[tuple[ClusterJob, Job]]:
    """The rows whose user's jobs the pass observed (per-user identity): the others'
    keep their last known state, as in a partition down."""
    return rows if users is None else [(row, job) for row, job in rows if job.user in users]


def _exit_fields(seen: Observation | None) -> dict[str, object]:
    if seen is None:
        return {}
    fields: dict[str, object] = {}
    if seen.exit_code is not None:
        fields["exit_code"] = seen.exit_code
    if seen.signal is not None:
        fields["exit_signal"] = seen.signal
    return fields
