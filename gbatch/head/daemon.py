"""gbatchd's loop: a short list of named steps, run on every tick and at once when
something happens (a submit, a cancel, a run ending, a GPU report).

    collect_ended_runs -> enforce_limits -> schedule -> sample_gpus -> watch_idle_gpus
    -> the cyclic GC's share (gbatch/head/cyclegc.py: what the pass left alive is frozen,
       so no collection walks the long-lived window in a pass; the heap is collected
       whole between passes)

Collecting also ends the runs of nodes that are down with their lease run out
(gbatch/head/liveness.py), and, when a node is heard again, removes the containers of runs
the head has already ended or requeued. What the head knows of its nodes (liveness,
views for the planner, sinfo's rows) is the Fleet's (gbatch/head/fleet.py).

The loop thread is the only one that starts or signals runs; request handlers only
write intents to the store (a new job, a cancel) and wake the loop.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NamedTuple

from gbatch.core import gpuusage
from gbatch.core.arrays import ARRAY_ROWS, THROTTLE_REASON, over_throttle
from gbatch.core.crashpoints import crash_point
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
from gbatch.core.jobids import spans_of
from gbatch.core.limits import ARRAY_HARD_CAP, UserLimits, unix_groups, use_by_user
from gbatch.core.model import ALLOCATED_STATES, IllegalTransition, Job, JobState, NodeView
from gbatch.core.timefmt import format_timestamp
from gbatch.head import idlegpu
from gbatch.head.cyclegc import LoopCollector
from gbatch.head.fleet import Fleet, make_nodes
from gbatch.head.groupcommit import GroupCommitter
from gbatch.head.liveness import Liveness
from gbatch.head.metrics import DaemonMetrics
from gbatch.head.notify import (
    DOWN_CONDITIONS,
    REPORT_CONDITIONS,
    TIME_LIMIT_WARNINGS,
    Episodes,
    mail_types,
    node_conditions,
)
from gbatch.head.outbox import Outbox
from gbatch.head.refusals import RefusalLines
from gbatch.head.scheduler import BEGIN_TIME, Planner, plan
from gbatch.head.store import RunnableWindow, StateChange, Store, StoreFull, Usage
from gbatch.head.tokens import TokenAuthority
from gbatch.jobspec.spec import parse_signal
from gbatch.nodes.base import LaunchError, Node, RunStatus
from gbatch.nodes.docker import container_name
from gbatch.nodes.inventory import Inventory, partitions_of
from gbatch.nodes.local import LOCAL_NODE
from gbatch.protocol import wire
from gbatch.site.config import Config, Paths

log = logging.getLogger("gbatchd")
COALESCE_SECONDS = 0.02
# A user's groups (for `limits: groups:`) are read from the system's databases again
# after this long: a change takes hold within it, and a plan over thousands of jobs asks
# once per user.
GROUPS_CACHE_SECONDS = 10.0
# The planner's window: each pass looks at no more than this many of one user's runnable
# jobs, that user's first in their own queue order (priority - nice, submit time, id).
# Among the jobs it looks at the order is plan()'s as ever (fair-share factor, priority,
# submit time, id), and so are reservations and backfill; a user's later jobs wait behind
# their own first ones (they neither start nor backfill, and keep the reason they last
# had) until those move. A lab's queue plans exactly as before; a user with 500,000
# waiting jobs costs a pass what 1,000 do, and no user's flood hides another's jobs.
# Like Slurm's bf_max_job_user.
PLAN_JOBS_PER_USER = 1000
# A first pass (a restarted daemon's) reads its window over several passes, this many
# rows each (a user's window over two passes where it does not fit what is left of
# one), and plans once it holds every user's: a pass stays short (reading a row,
# building its planning Job and queueing it costs ~15-20 us at load ~1.5: a pass of
# 1,000 rows took ~20 ms), so the loop collects ends, enforces limits and takes cancels
# between the reads, and the passes follow one another at once. A queue under this many
# runnable jobs is read and planned in one pass, as before. A pass reads at most this
# many rows of the change feed too (a newcomer's burst: see READ_ALONE_ROWS).
WINDOW_ROWS_PER_PASS = 500
# A pass writes at most this many pending reasons; a plan that changes more of them (a
# fresh store's first, the nodes changed) owes the rest, and the loop's next passes
# follow at once and write them, the newest plan's reason for each. So no pass waits on
# 50,000 writes (~0.3 s). Measured at 100,000 pending (bench_plan.py --loop-only, load
# ~0.9): a pass writing 1,000 took 5-7 ms (11-12 ms when SQLite checkpointed its WAL),
# the first plan's 17.6 ms; writing 2,000, 10-12 ms (16-18) and 22.4 ms.
REASONS_PER_PASS = 1000
# A pass whose read brought more changed rows than this plans nothing, and the next one
# (at once) plans them without reading the change feed: what it plans is what that read.
# So a newcomer's burst of 1,000 jobs (one transaction's, read over passes of
# WINDOW_ROWS_PER_PASS) is read in passes that plan nothing, and planned in one that
# reads nothing (their read and their plan are ~5 ms of CPU each at 500 rows and
# ~0.5 load; a pass that did both, ~12 ms, would pass 20 ms at load ~1.5).
READ_ALONE_ROWS = 200
# Arrays whose extent (task -> job id) the daemon remembers for dependencies on them.
ARRAY_CACHE_MAX = 10_000
KILLED_REASON = "dependency can never be satisfied (kill_invalid_depend)"
# A start whose answer was lost (`docker run` timed out, its connection dropped) may
# still create its container: the remote docker CLI can outlive the closed channel. Its
# job stays CONFIGURING this long after, and until a node report taken later lists no
# such container, before it is requeued; a second start any sooner could run it twice.
LAUNCH_SETTLE_SECONDS = 60.0
LAUNCH_UNKNOWN = "launch outcome unknown"
# The exit code of a run that never started (its image missing, its command not found):
# Slurm's ExitCode=1:0 for a launch failure.
LAUNCH_FAILED_EXIT_CODE = 1


class Daemon:
    def __init__(
        self,
        paths: Paths,
        config: Config,
        store: Store,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        inventory: Inventory | None = None,
    ) -> None:
        self.paths = paths
        self.config = config
        self.store = store
        self.clock = clock
        self.monotonic = monotonic
        self.wake = threading.Event()
        self._submitted = threading.Event()
        self.stopping = threading.Event()
        self.started_at = clock()
        self.fleet = Fleet(
            make_nodes(paths, config, inventory, self.wake.set),
            config,
            store,
            clock,
            monotonic,
            partitions=partitions_of(inventory),
        )
        self.committer = GroupCommitter(store, clock)
        self.refusal_lines = RefusalLines(monotonic)  # how many refusals get audit lines
        self.metrics = DaemonMetrics()  # counters and histograms since start (metrics)
        # The HTTP API's tokens: keys made at the first mint.
        self.tokens = TokenAuthority(paths.home, config.token_leeway_seconds)
        # (job id, attempt) -> monotonic time its run was confirmed (time limits)
        self._started_monotonic: dict[tuple[int, int], float] = {}
        # job id -> (monotonic time SIGTERM was sent, SIGKILL sent yet)
        self._stopping_runs: dict[int, tuple[float, bool]] = {}
        # array id -> {task: job id} of an array without a tail (all its tasks rows)
        self._arrays: dict[int, dict[int, int]] = {}
        # array id -> {task index: its job id, None: no such task} of the tasks looked
        # up alone (N_K, aftercorr), or None when that id is not an array's
        self._array_indices: dict[int, dict[int, int | None] | None] = {}
        # The planner's window, kept by the store's change feed (Store.read_window): a
        # pass reads only the rows written since the last, and builds Jobs of those.
        self._window = RunnableWindow(PLAN_JOBS_PER_USER, WINDOW_ROWS_PER_PASS)
        # The incremental planner (None: a full plan() each pass, as tests compare) and
        # the queue it holds (id -> the Job put), what the filters let through last pass.
        self.planner: Planner | None = Planner()
        self._planned: dict[int, Job] = {}
        # The pending reasons a plan gave that are not written yet (id -> reason), and
        # how many a pass writes (None: all of them, as tests compare).
        self._owed: dict[int, str] = {}
        self.reasons_per_pass: int | None = REASONS_PER_PASS
        # The last pass planned nothing: the window was not whole yet, or was completed
        # by it, or its read of the change feed was left behind, or it read many rows
        # (READ_ALONE_ROWS, _read_many; None: plan them at once).
        self._unread = True
        self._read_many = False
        self._fed = True  # the last pass read the change feed (not: _read_many's next)
        self.read_alone_rows: int | None = READ_ALONE_ROWS
        # The window split as the filters need it, kept from its changes: the jobs
        # without a --begin, dependency or throttle (plain), how many per user, those
        # asking an image; the others (special), filtered afresh each pass; the special
        # ones the last pass let through.
        self._plain: dict[int, Job] = {}
        self._plain_users: dict[str, int] = {}
        self._plain_images: set[int] = set()
        self._special: dict[int, Job] = {}
        self._special_planned: set[int] = set()
        # The window's changes not yet given to the planner (a pass that raised before
        # it leaves them to the next), and whether its queue must be compared whole with
        # the window (a first pass, a planner started over).
        self._unplanned: set[int] = set()
        self._plan_all = True
        # (job id, attempt) of runs sent their --signal warning (once per attempt)
        self._warned_runs: set[tuple[int, int]] = set()
        # job id -> expected start, from the latest plan's reservation (squeue --start).
        # Replaced whole by schedule(), never mutated: a handler thread reads it as is.
        self.expected_starts: Mapping[int, float] = {}
        # The brief records of listings (the HTTP API's GET /jobs), kept while unchanged.
        self.brief_records = wire.BriefRecords()
        # The users whose jobs the latest plan ordered: the fair-share factors it used
        # are taken over them (and users with usage). Replaced whole, like expected_starts.
        self.planned_users: frozenset[str] = frozenset()
        # Delivers the store's outbox (mail, webhooks) in its own thread, once started.
        self.outbox = Outbox(store, config, clock)
        store.on_full = self.outbox.tell_store_full
        # job id -> the TIME_LIMIT_<pct> warnings owed for its current run so far
        self._time_warned: dict[int, set[str]] = {}
        # node name -> the number of its report last folded into runs' GPU usage
        self._sampled_seq: dict[str, int] = {}
        # NODE_DOWN, GPU_FOREIGN and DISK_FULL, told once per episode (read from the
        # store at the first step); the report each node's conditions were last read from
        self._episodes_read: Episodes | None = None
        self._told_seq: dict[str, int] = {}
        # (job id, attempt) of an unconfirmed start past its settle period -> the node's
        # report number then: only a later report may confirm that it never started
        self._listing_after: dict[tuple[int, int], int] = {}
        # Idle GPU streaks of running runs (gbatch/head/idlegpu.py); None: not watched.
        # Runs flagged by an earlier daemon are adopted at the first pass.
        policy = config.idle_gpu
        self._idle = None if policy is None else idlegpu.IdleStreaks(policy)
        self._idle_adopted = False
        # The cyclic GC's work at the loop's moments; nothing until run_loop starts it
        # (the collector is the process's: a Daemon in a test leaves it alone).
        self.collector = LoopCollector(monotonic=monotonic)

    # -- life cycle -----------------------------------------------------------------

    def sweep_finished_runs(self) -> None:
        """Clean up runs whose end was recorded but not cleaned up (the daemon died in
        between): their run directory, and their container if they had one."""
        if not self.paths.runs.exists():
            return
        for run_dir in self.paths.runs.iterdir():
            job_text, _, attempt_text = run_dir.name.partition(".")
            if not (job_text.isdigit() and attempt_text.isdigit()):
                continue
            job = self.store.get(int(job_text))
            attempt = int(attempt_text)
            if job is None:
                continue
            live = job.state in ALLOCATED_STATES and job.attempt == attempt
            # A requeued job no longer names its old node; a bare run was local.
            nodes = self.fleet.nodes
            node = nodes.get(job.node or "") or nodes.get(LOCAL_NODE)
            if not live and node is not None:
                log.info("cleaning up run %s left by an earlier daemon", run_dir.name)
                node.cleanup(job, attempt)

    def run_loop(self) -> None:
        store_full = False
        # The start-up's heap (imports, config, nodes) lives as long as the daemon.
        self.collector.start()
        while not self.stopping.is_set():
            if self.wake.wait(self.config.tick_seconds) and self._submitted.is_set():
                # Let a burst of submits land before planning once for all of them:
                # a step per request starves the handlers (measured in bench_submit).
                # Node events (a run ended, a report) are acted on at once.
                time.sleep(COALESCE_SECONDS)
            self._submitted.clear()
            self.wake.clear()
            if self.stopping.is_set():
                break
            try:
                self.step()
                store_full = False
            except StoreFull as err:
                # Nothing of the failed tick was written; each tick retries. One line
                # per spell of full disk, not a traceback per tick.
                if not store_full:
                    log.error("%s; the loop retries every tick until there is space", err)
                store_full = True
            except Exception:
                # One bad tick must not take the head down; the next tick retries.
                log.exception("loop step failed")
            self.refusal_lines.close_ended()
            # Idle: no pass waits on the heap's whole walk.
            self.collector.full_when_due(idle=not self.wake.is_set())

    def submitted(self) -> None:
        """Wake the loop for new jobs (coalescing a burst of them)."""
        self._submitted.set()
        self.wake.set()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def close(self) -> None:
        self.outbox.stop()
        self.committer.close()
        self.fleet.stop()

    def step(self) -> None:
        began = self.monotonic()
        now = self.clock()
        self.collect_ended_runs(now)
        self.enforce_limits(now)
        self.schedule(now)
        # Last: accounting that fails (a full disk) must not keep jobs from starting.
        self.sample_gpus(now)
        self.tell_node_conditions(now)
        self.collector.after_pass()
        self.metrics.observe_loop(self.monotonic() - began)

    # -- step 4: how busy running jobs keep their GPUs (seff, sacct) --------------------

    def sample_gpus(self, now: float) -> None:
        """Fold each node's new report (one not sampled yet) into the GPU usage of the
        runs on it: one store read of the running jobs and one write, per poll. Then
        watch the same readings for idle GPU hoarders."""
        fresh = {}
        for name, node in self.fleet.nodes.items():
            seq = node.report_seq
            if seq == self._sampled_seq.get(name):
                continue
            report, _ = node.report()
            if report is not None:
                fresh[name] = report.gpus
            self._sampled_seq[name] = seq
        if not fresh:
            return
        samples = []
        running = self.store.running_gpus()
        for job_id, attempt, node_name, gpus in running:
            readings = fresh.get(node_name)
            usage = None if readings is None else gpuusage.sample(readings, gpus)
            if usage is not None:
                samples.append((job_id, attempt, usage))
        self.store.add_gpu_samples(samples)
        self.watch_idle_gpus(running, fresh, now)

    def watch_idle_gpus(
        self,
        running: Sequence[tuple[int, int, str, tuple[int, ...]]],
        fresh: Mapping[str, Sequence[gpuusage.GpuReading]],
        now: float,
    ) -> None:
        """The idle_gpu policy: flag runs whose GPUs all read idle long enough (their
        reason, an event, IDLE_GPU told once per run), take the flag off when they work
        again, and cancel them after the grace where the policy says so."""
        policy, streaks = self.config.idle_gpu, self._idle
        if policy is None or streaks is None:
            return
        if not self._idle_adopted:
            streaks.adopt(
                (job.id, job.attempt)
                for job in self.store.jobs_in((JobState.RUNNING,))
                if job.reason.startswith(idlegpu.IDLE_REASON)
            )
            self._idle_adopted = True
        idle = {}
        for job_id, attempt, node_name, gpus in running:
            readings = fresh.get(node_name)
            if readings is not None:
                idle[(job_id, attempt)] = idlegpu.all_idle(readings, gpus, policy.threshold_percent)
        verdicts = streaks.observe([(j, a) for j, a, _, _ in running], idle, now)
        for (job_id, _), since in verdicts.flag.items():
            reason = idlegpu.flag_reason(policy, format_timestamp(since))
            if self.store.note(job_id, JobState.RUNNING, reason, now):
                log.info("job %d: %s", job_id, reason)
                self.store.queue_job_event(job_id, idlegpu.EVENT, now)
        for job_id, attempt in verdicts.clear:
            self.store.set_running_reason(job_id, attempt, "")
        for (job_id, _), idle_for in verdicts.cancel.items():
            reason = idlegpu.cancel_reason(idle_for)
            try:
                self.store.set_state(
                    job_id,
                    JobState.COMPLETING,
                    reason,
                    now,
                    expect={JobState.RUNNING},
                    stop_state=JobState.CANCELLED,
                )
            except IllegalTransition:
                continue  # it ended or was stopped meanwhile
            log.warning("job %d: %s", job_id, reason)
            self.wake.set()  # enforce_limits stops its run at the next step

    def tell_node_conditions(self, now: float) -> None:
        """GPU_FOREIGN and DISK_FULL to the admins' webhooks, once per episode, from
        each node's new report (one not read here yet)."""
        for name, node in self.fleet.nodes.items():
            seq = node.report_seq
            if seq == self._told_seq.get(name):
                continue
            report, _ = node.report()
            if report is None:
                continue  # down: NODE_DOWN's business; its conditions stay as they were
            conditions = node_conditions(node.gpus(report), report.disk_free_bytes)
            # A store that cannot write it (full) leaves the report unread: next tick.
            self._record_episodes(name, conditions, REPORT_CONDITIONS, now)
            self._told_seq[name] = seq

    def _episodes(self) -> Episodes:
        """The node conditions on, from the store; read at the first use, when the
        episodes of nodes no longer in the inventory end."""
        if self._episodes_read is None:
            self.store.forget_node_episodes(self.fleet.nodes.keys())
            self._episodes_read = Episodes(self.store.node_episodes())
        return self._episodes_read

    def _record_episodes(
        self, node: str, conditions: Mapping[str, str], scope: frozenset[str], now: float
    ) -> None:
        """`conditions`: all of `scope` on at `node` now. Those begun are told."""
        episodes = self._episodes()
        begun, ended = episodes.changes(node, conditions, scope)
        if begun or ended:
            self.store.record_episodes(node, begun, ended, now)
            episodes.record(node, begun, ended)

    # -- step 1: runs that ended, or vanished ------------------------------------------

    def collect_ended_runs(self, now: float) -> None:
        allocated = self.store.jobs_in(ALLOCATED_STATES)
        liveness = {name: self.fleet.liveness(each) for name, each in self.fleet.nodes.items()}
        for back in self.fleet.came_up(liveness):
            self.reap_stale_runs(back, allocated)
        self._tell_nodes_down(liveness, now)
        exited: list[_RunEnd] = []
        for job in allocated:
            node = self.fleet.nodes.get(job.node or "")
            if node is None:
                # Its node left the inventory: whether the run lives is unknowable, so
                # never requeue it (that could run it twice).
                self._end_run(
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
                    self._confirm_running([job], "adopted: its unconfirmed start was found running")
                continue
            if status.state == "exited":
                exited.append(self._finish(job, status, now))
            else:
                self._run_vanished(job, node, now)
        # One commit for all the runs that exited since the last tick.
        if exited:
            self._end_runs(exited, now)

    def _tell_nodes_down(self, liveness: Mapping[str, Liveness], now: float) -> None:
        """NODE_DOWN to the admins' webhooks once per episode: when a node is down and
        silent for node_down_seconds (one down when the daemon starts, once it has had
        that long to report), until it is up again."""
        self._episodes()  # read now (the first step), even with no node to tell of
        for name, each in liveness.items():
            if each.state == "down" and each.silent_seconds >= self.config.node_down_seconds:
                self._record_episodes(name, {"NODE_DOWN": each.describe("")}, DOWN_CONDITIONS, now)
            elif each.state == "up":
                self._record_episodes(name, {}, DOWN_CONDITIONS, now)

    def _finish(self, job: Job, status: RunStatus, now: float) -> _RunEnd:
        """How the exited run of `job` ends (not recorded yet)."""
        end = status.end_time or now
        exit_code, killed_by = status.exit_code or 0, status.signal or 0
        outcome = f"exit code {exit_code}" if not killed_by else f"killed by signal {killed_by}"
        fields: dict[str, object] = {
            "end_time": end,
            "exit_code": exit_code,
            "exit_signal": killed_by,
        }
        if job.stop_state is not None:
            new, reason = job.stop_state, _stopped_reason(job)
        elif status.oom:
            new, reason = JobState.OUT_OF_MEMORY, "out of memory"
        elif exit_code == 0 and killed_by == 0:
            new, reason = JobState.COMPLETED, ""
        elif (used := self._retries_used(job)) < job.spec.retries:
            new, reason = (
                JobState.PENDING,
                f"retry {used + 1}/{job.spec.retries} after {outcome}",
            )
        else:
            new, reason = JobState.FAILED, outcome
        return _RunEnd(job, new, reason, fields)

    def _retries_used(self, job: Job) -> int:
        """Failed runs (and launches) retried so far. Attempts count every dispatch, but
        a requeue the job did not cause (an unconfirmed launch after a daemon crash, a
        vanished run, a lost node) costs it no retry."""
        return sum(
            1
            for event in self.store.events(job.id)
            if event.state is JobState.PENDING
            and event.reason.startswith(("retry ", "launch failed"))
        )

    def _run_vanished(self, job: Job, node: Node, now: float) -> None:
        if job.stop_state is not None:
            self._end_run(job, job.stop_state, _stopped_reason(job), now, end_time=now)
        elif job.state is JobState.CONFIGURING:
            lost_at = self._launch_lost_at(job)
            if lost_at is None:
                # The daemon died between recording intent and confirming the start.
                self._end_run(job, JobState.PENDING, "launch was not confirmed; requeued", now)
            elif not self._start_may_still_appear(job, node, lost_at, now):
                reason = (
                    f"launch was not confirmed: no container "
                    f"{container_name(job.id, job.attempt)} on {node.name} "
                    f"{LAUNCH_SETTLE_SECONDS:g} s after its answer was lost; requeued"
                )
                log.warning("job %d: %s", job.id, reason)
                self._end_run(job, JobState.PENDING, reason, now)
        else:
            self._end_run(
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
        seen = self._listing_after.setdefault(key, node.report_seq)
        report, _ = node.report()
        if report is None or node.report_seq <= seen:
            return True
        if any(
            (c.job, c.attempt) == key and c.node in (None, node.name) for c in report.containers
        ):
            return True  # listed after all: the next status() finds it
        del self._listing_after[key]
        return False

    def _run_lost_with_node(self, job: Job, liveness: Liveness, now: float) -> None:
        """The run's node is down and its lease has run out: the run is dead, and the
        job is requeued (NODE_FAIL if it opted out, its stop state if being stopped)."""
        lost = f"node {job.node} down ({liveness.describe('')}); its run was stopped by the lease"
        if job.stop_state is not None:
            new, reason = job.stop_state, f"{_stop_reason(job.stop_state)}; {lost}"
        elif job.spec.requeue:
            new, reason = JobState.PENDING, f"{lost}; requeued"
        else:
            new, reason = JobState.NODE_FAIL, f"{lost}; not requeued (requeue: false)"
        log.warning("job %d: %s", job.id, reason)
        self._end_run(job, new, reason, now, end_time=now)

    def reap_stale_runs(self, node: Node, allocated: Sequence[Job]) -> None:
        """Kill and remove the containers a node lists for runs the head has already
        ended or requeued (it was cut off meanwhile, or an earlier daemon died before
        removing them). Only containers labelled with this node's name are touched: an
        engine may serve other heads, whose job ids mean nothing to this store."""
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

    def _end_run(self, job: Job, new: JobState, reason: str, now: float, **fields: object) -> None:
        self._end_runs([_RunEnd(job, new, reason, fields)], now)

    def _end_runs(self, ends: Sequence[_RunEnd], now: float) -> None:
        """Record the ends of runs in one commit (one fsync), each with its usage, then
        clean each up and hand its GPUs back. A change refused (a concurrent change
        won) is left alone: the next tick sees it."""
        changes = []
        for end in ends:
            job, fields = end.job, dict(end.fields)
            if end.new is JobState.PENDING:
                # A requeued job keeps its attempt count but no longer holds a node.
                fields.update(node=None, gpus=(), gpu_uuids=(), stop_state=None)
            else:
                fields["stop_state"] = None
            usage = None
            if job.start_time is not None and job.gpus:
                ended = fields.get("end_time") or now
                assert isinstance(ended, float | int)
                usage = Usage(job.user, _gpu_seconds(job, ended), self.config.half_life_seconds)
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
            self._stopping_runs.pop(job.id, None)
            self._time_warned.pop(job.id, None)
            self._started_monotonic.pop((job.id, job.attempt), None)
            self._listing_after.pop((job.id, job.attempt), None)
            node = self.fleet.nodes.get(job.node or "")
            if node is not None:
                node.cleanup(job, job.attempt)
                self.fleet.release_gpus(node, job.gpus)
            self.wake.set()

    # -- step 2: time limits and stops ---------------------------------------------------

    def enforce_limits(self, now: float) -> None:
        for job in self.store.jobs_in((JobState.RUNNING, JobState.COMPLETING)):
            if job.state is JobState.RUNNING and job.spec.signal is not None:
                self._warn_run(job, now)
            if job.state is JobState.RUNNING and self.config.smtp_host and job.spec.mail_type:
                self._warn_time_limit(job, now)
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
            if job.state is JobState.COMPLETING:
                self._stop_run(job)

    def _warn_time_limit(self, job: Job, now: float) -> None:
        """--mail-type=TIME_LIMIT_50/80/90: owe each once per run, when its run time
        passes that share of its limit (the store ignores a second one after a restart)."""
        limit = job.spec.time_limit
        if limit is None:
            return
        warned = self._time_warned.setdefault(job.id, set())
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
        node = self.fleet.nodes.get(job.node or "")
        if node is None:
            return
        self._warned_runs.add(key)
        log.info("job %d: sending %s before its time limit", job.id, job.spec.signal)
        node.signal(job, job.attempt, signal.Signals(warning.signum))

    def _stop_run(self, job: Job) -> None:
        """SIGTERM the run, then SIGKILL it once the grace period has passed."""
        node = self.fleet.nodes.get(job.node or "")
        if node is None:
            return  # collect_ended_runs ends it
        sent = self._stopping_runs.get(job.id)
        if sent is None:
            node.signal(job, job.attempt, signal.SIGTERM)
            self._stopping_runs[job.id] = (self.monotonic(), False)
        elif not sent[1] and self.monotonic() - sent[0] >= self.config.kill_grace_seconds:
            node.signal(job, job.attempt, signal.SIGKILL)
            self._stopping_runs[job.id] = (sent[0], True)

    # -- step 3: plan and dispatch -------------------------------------------------------

    def schedule(self, now: float) -> None:
        self.store.refill_arrays(ARRAY_ROWS)
        window = self._window
        spread = window.seen is not None and not window.complete
        # The pass after one that read many rows plans them, and reads none: those
        # written since are read at the next pass, at once.
        self._fed = not self._read_many
        self.store.update_window(window, feed=self._fed)
        if not self._fed:
            self.wake.set()
        read = self._split_window()
        # A pass that read many rows (the last of a newcomer's burst of 1,000 jobs)
        # plans at the next: reading 500 rows and planning 1,000 are ~5 ms of CPU each.
        # That one reads no changes, so a flood of submits cannot keep the loop from
        # planning: each read of the change feed left behind ends (RunnableWindow), and
        # a plan follows it at the latest one pass after.
        alone = self.read_alone_rows
        whole = window.complete and not spread and not window.behind
        many = whole and alone is not None and read > alone and not self._read_many
        self._read_many = many
        self._unread = not whole or many
        if self._unread:
            # A spread first read (a restart over a long queue): plan nothing until the
            # window holds every user's jobs, or a job could start ahead of one not read
            # yet. Queue what was read, and read on at the next pass, at once. The
            # pass that completes it plans at the next too: its read (~10-14 ms at
            # 100,000 pending) and the first plan (a fresh store's: 50,000 reasons
            # reported, ~17 ms) would not fit one pass's 20 ms. So too a read of the
            # change feed left behind (a newcomer's burst of 1,000 jobs, read over
            # passes of WINDOW_ROWS_PER_PASS rows): the pass that reads the last of
            # those changes plans them (or, where it read many, the one after), the
            # window then what a whole read gives.
            self._queue_planner(())
            if self.planner is not None:  # what it read that the plan will not revisit
                allocated = self.store.jobs_in(ALLOCATED_STATES)
                self.planner.presettle(self._node_views(allocated, bool(self._plain_images), now))
            self.wake.set()
            return
        # The filters below see only the jobs they may hold back (a --begin, a
        # dependency, a throttled array), not the whole window.
        plain = self._plain
        special = sorted(self._special.values(), key=lambda job: job.id)
        users: set[str] = set(self._plain_users)
        # Asking an engine can take a subprocess: only when an image job could start.
        check_engines = bool(self._plain_images)
        if special:
            special = self._past_begin(special, now)
            special = self.hold_back_dependents(special, now)
            users.update(job.user for job in special)
        self.planned_users = frozenset(users)
        if not plain and not special:
            self._queue_planner(())
            self.expected_starts = {}
            self._owed.clear()
            return
        allocated = self.store.jobs_in(ALLOCATED_STATES)
        if special:
            special = self._within_throttle(special, allocated)
            check_engines = check_engines or any(
                job.spec.image is not None and not job.held for job in special
            )
        self._queue_planner(special)
        views = self._node_views(allocated, check_engines, now)
        usage = self.usage(allocated, now)
        limits: dict[str, UserLimits] = {}
        if self.config.limits.limits_running:
            for user in set(self._plain_users).union(job.user for job in special):
                if (mine := self.limits_for(user)).limits_running:
                    limits[user] = mine
        use = use_by_user(allocated)
        if self.planner is None:
            pending = sorted([*plain.values(), *special], key=lambda job: job.id)
            result = plan(pending, views, usage, now, limits, use)
            by_id = {job.id: job for job in pending}
        else:
            result = self.planner.plan(views, usage, now, limits, use)
            by_id = self._planned
        self.expected_starts = result.starts
        self._owe(result.reasons, by_id)
        owed = self._owed
        for each in result.assignments:
            owed.pop(each.job_id, None)
        written = self._reasons_due(by_id)
        try:
            # The window keeps what it writes: the next pass reads none of these rows.
            self.store.set_pending_reasons(written, self._window)
        except BaseException:
            # The planner counts the reasons it reported told, owed or not: the next
            # pass starts over, from the reasons the rows show.
            owed.clear()
            if self.planner is not None:
                self.planner, self._planned = Planner(), {}
                self._plan_all = True
            raise
        self.dispatch(
            [
                (by_id[each.job_id], self.fleet.nodes[each.node], each.gpus)
                for each in result.assignments
            ],
            now,
        )

    def _owe(self, reasons: Mapping[int, str], by_id: Mapping[int, Job]) -> None:
        """Take a plan's `reasons` into the owed, where they differ from the rows': the
        newest plan's reason for a job wins, and one its row already shows is owed no
        more."""
        owed, reason = self._owed, self._window.reason
        if self.planner is None:  # every job's reason, the rows' mostly alike
            for job_id, r in reasons.items():
                if reason(by_id[job_id]) != r:
                    owed[job_id] = r
                else:
                    owed.pop(job_id, None)
            return
        # The planner reports a reason where it differs from the one it counts told:
        # the row's (put with it, or written since), unless owed. So only a job owed
        # already can be reported the reason its row shows (back to it): those are
        # looked at, and the rest (a fresh store's first plan: ~all 50,000) taken whole.
        small, large = (owed, reasons) if len(owed) < len(reasons) else (reasons, owed)
        back = [job_id for job_id in small if job_id in large]
        owed.update(reasons)
        for job_id in back:
            if reason(by_id[job_id]) == owed[job_id]:
                del owed[job_id]

    @property
    def caught_up(self) -> bool:
        """The last pass read the change feed, planned the whole window and wrote every
        reason its plans gave: no pass follows at once for a spread first read, a read
        of the change feed left behind or one that read many rows, or owed reasons."""
        return not self._unread and not self._owed and self._fed

    def _reasons_due(self, queued: Mapping[int, Job]) -> dict[int, str]:
        """The owed reasons this pass writes, taken from the owed: all of them, or the
        first `reasons_per_pass` by job id (then the loop is woken for the next pass).
        Only those of jobs in this pass's queue (`queued`): one the filters now hold
        back (a --begin, a throttle) has the reason they wrote.

        Job id order is submit order: the top of `squeue` and of the TUI's list, and
        each user's oldest jobs, ~the heads of their queues (what a user looks at
        first) are told first. The owed come in the plan's order, near to id order
        within a user, so sorting them costs little (~2 ms for 50,000); and they all go
        within a second anyway (a fresh store's 50,000: 50 passes of 5-7 ms)."""
        owed, bound = self._owed, self.reasons_per_pass
        if bound is None or len(owed) <= bound:
            due = {job_id: r for job_id, r in owed.items() if job_id in queued}
            owed.clear()
            return due
        due = {}
        for job_id in sorted(owed):
            r = owed.pop(job_id)
            if job_id in queued:
                due[job_id] = r
                if len(due) == bound:
                    break
        if owed:
            self.wake.set()  # the next pass at once, as a spread first read's
        return due

    def _node_views(
        self, allocated: Sequence[Job], check_engines: bool, now: float
    ) -> list[NodeView]:
        drained = self.store.drained_nodes()
        return [
            self.fleet.node_view(node, allocated, drained, check_engine=check_engines, now=now)
            for node in self.fleet.nodes.values()
        ]

    def _split_window(self) -> int:
        """Bring the plain/special split up to the window just read, from its changes
        alone (the whole window after a first read); they are the planner's to take.
        Returns how many changes it took."""
        changes = self._window.take_changes()
        if changes is None:
            self._plain.clear()
            self._plain_users.clear()
            self._plain_images.clear()
            self._special.clear()
            self._owed.clear()
            self._plan_all = True
            changes = {job.id: job for job in self._window.jobs()}
        plain, users = self._plain, self._plain_users
        for job_id, job in changes.items():
            old = plain.pop(job_id, None)
            if old is not None:
                left = users[old.user] - 1
                if left:
                    users[old.user] = left
                else:
                    del users[old.user]
                self._plain_images.discard(job_id)
            self._special.pop(job_id, None)
            if job is None:
                continue
            spec = job.spec
            if spec.begin is None and spec.dependency is None and spec.array_throttle is None:
                plain[job_id] = job
                users[job.user] = users.get(job.user, 0) + 1
                if spec.image is not None and not job.held:
                    self._plain_images.add(job_id)
            else:
                self._special[job_id] = job
        self._unplanned.update(changes)
        return len(changes)

    def _queue_planner(self, special: Sequence[Job]) -> None:
        """Bring the planner's queue to what the filters let through this pass (the
        plain jobs and `special`): put what is new or changed, discard what left. Only
        the window's changes since and the special jobs of this pass and the last are
        looked at, unless the queue must be compared whole (`_plan_all`).

        A job whose row is unchanged is the same Job as last pass (Store.read_window),
        so this costs the planner's work for what changed. A row changed in any way by
        another write (its reason written, held, updated) is put again, with the reason
        its row shows, and so planned afresh: the planner then reports its reason where
        it differs from the row's (a restarted daemon's planner, given the reasons the
        last one wrote, reports only those that must change). The reasons the loop
        writes itself the window keeps beside its Jobs (RunnableWindow.reason), and the
        row stays the same Job: the planner's reason for it is then the row's, and it
        reports one only when it changes. So the reasons a pass reports (only those
        that changed, see Planner) are all that can differ from the rows'.
        """
        planner = self.planner
        if planner is None:
            self._unplanned.clear()
            return
        planned, plain, owed = self._planned, self._plain, self._owed
        reason = self._window.reason  # the row's: the planner reports only a new one
        let_through = {job.id: job for job in special}
        if self._plan_all:
            looked_at: Collection[int] = planned.keys() | plain.keys() | let_through.keys()
            self._plan_all = False
        else:
            looked_at = self._unplanned | self._special_planned | let_through.keys()
        for job_id in looked_at:
            job = plain.get(job_id) or let_through.get(job_id)
            was = planned.get(job_id)
            # A job put again counts the row's reason told, and one gone none: a reason
            # owed it by an older plan is stale (the next reports its own, if other).
            if job is None:
                if was is not None:
                    planner.discard(job_id)
                    del planned[job_id]
                    owed.pop(job_id, None)
            elif was is not job:
                planner.put(job, reason(job))
                planned[job_id] = job
                owed.pop(job_id, None)
        self._special_planned = set(let_through)
        self._unplanned.clear()

    def hold_back_dependents(self, pending: Sequence[Job], now: float) -> list[Job]:
        """The jobs of `pending` free to plan: those without a dependency, or whose
        dependency holds. The others get reason Dependency (waiting) or
        DependencyNeverSatisfied (and are CANCELLED under kill_invalid_depend), and stay
        out of plan(): they take no reservation and hold back no one.

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
        reason_of = self._window.reason  # the row's, where the loop wrote it since
        parsed = {job.id: self._dependency_of(job) for job in waiting}
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

    def _dependency_of(self, job: Job) -> Dependency:
        assert job.spec.dependency is not None
        try:
            return parse_dependency(job.spec.dependency)
        except DependencyError:
            # Checked at submit; a spec stored by a later gbatch may read otherwise.
            return Dependency((Term("afterok", (JobRef(job.id),), (0,)),))

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

    def _within_throttle(self, pending: list[Job], allocated: Sequence[Job]) -> list[Job]:
        """The jobs their array's %MAX lets start; the others get reason
        JobArrayTaskLimit and stay out of the plan, taking no reservation."""
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

    def _past_begin(self, pending: list[Job], now: float) -> list[Job]:
        """The jobs whose --begin time has come; the others get reason BeginTime and stay
        out of the plan, so they take no reservation and hold back no one."""
        waiting = {job.id for job in pending if job.spec.begin is not None and job.spec.begin > now}
        if not waiting:
            return pending
        self.store.set_pending_reasons(
            {
                job.id: BEGIN_TIME
                for job in pending
                if job.id in waiting and self._window.reason(job) != BEGIN_TIME
            }
        )
        return [job for job in pending if job.id not in waiting]

    def would_start(
        self, job: Job, now: float
    ) -> tuple[float | None, str | None, tuple[int, ...], str]:
        """sbatch --test-only: (start time, node, GPU ids, pending reason) the planner
        gives `job` (not stored) behind the queue as it is now. Start and node are None
        when it would not start now: the planner gives waiting jobs no start time."""
        if job.spec.begin is not None and job.spec.begin > now:
            return job.spec.begin, None, (), BEGIN_TIME
        # The loop's window as a whole read gives it: planning views (specs shared), not
        # whole Jobs. Not the loop's own window: that one is the loop thread's.
        window = self.store.read_window(RunnableWindow(PLAN_JOBS_PER_USER))
        pending = [*self._past_begin(window, now), job]
        allocated = self.store.jobs_in(ALLOCATED_STATES)
        drained = self.store.drained_nodes()
        views = [
            self.fleet.node_view(
                node, allocated, drained, check_engine=job.spec.image is not None, now=now
            )
            for node in self.fleet.nodes.values()
        ]
        result = plan(pending, views, self.usage(allocated, now), now)
        for assignment in result.assignments:
            if assignment.job_id == job.id:
                return now, assignment.node, tuple(assignment.gpus), ""
        return None, None, (), result.reasons.get(job.id, "")

    def dispatch(self, starts: Sequence[tuple[Job, Node, Sequence[int]]], now: float) -> None:
        """Start each (job, node, GPU ids) of a plan. Record intent, act, confirm, each
        step for every start at once (one commit for all intents, one for all
        confirmations: a commit costs an fsync, more than a local start): a crash
        between any two steps is reconciled as for one start."""
        if not starts:
            return
        intents = [
            StateChange(
                job.id,
                JobState.CONFIGURING,
                "allocated",
                {JobState.PENDING},
                {
                    "node": node.name,
                    "gpus": tuple(gpus),
                    "gpu_uuids": self.fleet.uuids(node, gpus),
                    "attempt": job.attempt + 1,
                    "start_time": None,
                    "end_time": None,
                    "exit_code": None,
                    "exit_signal": None,
                    "stop_state": None,
                },
            )
            for job, node, gpus in starts
        ]
        allocated = self.store.set_states_read(intents, now)
        crash_point("dispatch.after_configuring")
        launched = [
            job
            for job, (_, node, gpus) in zip(allocated, starts, strict=True)
            # A refused intent: cancelled while we planned.
            if isinstance(job, Job) and self._launch(job, node, gpus, now)
        ]
        if launched:
            crash_point("dispatch.after_launch")
            self._confirm_running(launched, "")

    def _launch(self, job: Job, node: Node, gpus: Sequence[int], now: float) -> bool:
        """Start `job` (CONFIGURING, its attempt counted) on `node`: True when its run
        exists. When it does not, the job is requeued or failed as the error says, or
        left CONFIGURING when the start may yet appear."""
        attempt = job.attempt
        try:
            node.launch(job, attempt, gpus)
        except LaunchError as err:
            if err.maybe_started:
                # Left CONFIGURING: collect_ended_runs adopts the run if it exists and
                # requeues the job once it surely does not; a second start could run
                # it twice.
                note = (
                    f"{LAUNCH_UNKNOWN} ({err}); its container is looked for up to "
                    f"{LAUNCH_SETTLE_SECONDS:g} s before the job is requeued"
                )
                log.warning("job %d: %s", job.id, note)
                self.store.note(job.id, JobState.CONFIGURING, note, self.clock())
                return False
            if err.node_busy:
                # Nothing started and not the job's fault: it keeps its retries.
                reason = f"{node.name} could not take the start now ({err}); requeued"
                log.warning("job %d: %s", job.id, reason)
                self._end_run(job, JobState.PENDING, reason, now, end_time=now)
                return False
            engine = node.docker_problem(self.clock()) if job.spec.image is not None else None
            if engine is not None:
                # Not the job's fault: it waits for the engine and keeps its retries.
                reason = f"docker engine on {node.name} does not answer ({engine}); requeued"
                self._end_run(job, JobState.PENDING, reason, now, end_time=now)
                return False
            retry = self._retries_used(job) < job.spec.retries
            new = JobState.PENDING if retry else JobState.FAILED
            # Never 0:0, which reads as success to a script checking ExitCode.
            self._end_run(
                job,
                new,
                f"launch failed: {err}",
                now,
                end_time=now,
                exit_code=LAUNCH_FAILED_EXIT_CODE,
                exit_signal=0,
            )
            return False
        return True

    def _confirm_running(self, jobs: Sequence[Job], reason: str) -> None:
        """RUNNING for the CONFIGURING `jobs` whose runs exist, in one commit."""
        now = self.clock()
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
                self._started_monotonic[(job.id, job.attempt)] = self.monotonic()
                self.metrics.observe_start(now - job.submit_time)
            self._listing_after.pop((job.id, job.attempt), None)

    def _past_limit(self, job: Job, now: float, margin: float = 0) -> bool:
        """Run time against the limit (less `margin` seconds) on the monotonic clock, so
        a wall-clock jump (an NTP step, a mis-set clock) neither kills a job early nor
        lets it overrun. A run adopted after a restart has no monotonic start: wall time,
        once."""
        limit = job.spec.time_limit
        if limit is None or job.start_time is None:
            return False
        started = self._started_monotonic.get((job.id, job.attempt))
        if started is None:
            # Adopted: anchor the monotonic clock at the wall-clock age it has now.
            started = self.monotonic() - max(0.0, now - job.start_time)
            self._started_monotonic[(job.id, job.attempt)] = started
        return self.monotonic() - started >= limit - margin

    def limits_for(self, user: str) -> UserLimits:
        """The limits of `user` under the config's `limits:`, their groups included."""
        limits = self.config.limits
        if not limits.groups:
            return limits.for_user(user)
        epoch = int(self.monotonic() // GROUPS_CACHE_SECONDS)
        return limits.for_user(user, unix_groups(user, epoch))

    def usage(self, allocated: Sequence[Job], now: float) -> dict[str, float]:
        """Stored decayed usage plus what allocated jobs have accrued so far."""
        usage = self.store.usage(now, self.config.half_life_seconds)
        for job in allocated:
            usage[job.user] = usage.get(job.user, 0.0) + _gpu_seconds(job, now)
        return usage


class _RunEnd(NamedTuple):
    """A run's end to record: the job's new state, reason and other fields."""

    job: Job
    new: JobState
    reason: str
    fields: Mapping[str, object]


def _gpu_seconds(job: Job, until: float) -> float:
    """GPU-seconds a job's run has used up to `until` (0 before it started)."""
    if job.start_time is None:
        return 0.0
    return len(job.gpus) * max(0.0, until - job.start_time)


def _stopped_reason(job: Job) -> str:
    """The reason a stopped run's job ends with: the idle_gpu policy's own, which says
    why, else _stop_reason's."""
    if job.stop_state is JobState.CANCELLED and job.reason.endswith(idlegpu.POLICY_SUFFIX):
        return job.reason
    assert job.stop_state is not None
    return _stop_reason(job.stop_state)


def _stop_reason(state: JobState) -> str:
    """The reason a stopped run's job ends with. A timed-out job's is Slurm's TimeLimit,
    which `squeue -t all` shows in NODELIST(REASON) as `(TimeLimit)` (its history keeps
    the stop's own "time limit reached")."""
    return {
        JobState.CANCELLED: "cancelled",
        JobState.TIMEOUT: "TimeLimit",
        JobState.PENDING: "requeued on request",
    }.get(state, state.value.lower())
