"""gbatchd's loop: a short list of named steps, run each tick and whenever something happens.

The steps live in gbatch/head/loop/, a module each. Something happening (a submit, a cancel,
a run ending, a GPU report) runs them at once.

    collect_ended_steps -> collect_ended_runs -> enforce_limits -> schedule (its starts
    to dispatch) -> end_abandoned_allocations
    -> sample_gpus (idle GPUs watched) -> tell_node_conditions
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

import hashlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from gbatch.core.limits import UserLimits
from gbatch.core.loglines import InternalErrors
from gbatch.core.model import ALLOCATED_STATES, Job
from gbatch.core.shares import Sharing
from gbatch.head.clusterlogins import StoreLogins
from gbatch.head.cyclegc import LoopCollector
from gbatch.head.fleet import Fleet, make_nodes
from gbatch.head.forwards import Forwards
from gbatch.head.gpuhistory import GpuHistory
from gbatch.head.groupcommit import GroupCommitter
from gbatch.head.interactive import Starting, Waiters
from gbatch.head.loop.cluster import ClusterJobsStep
from gbatch.head.loop.collect import EndedRuns
from gbatch.head.loop.conditions import NodeConditions
from gbatch.head.loop.dispatch import Dispatcher
from gbatch.head.loop.filters import Filters
from gbatch.head.loop.gpus import GpuSampler
from gbatch.head.loop.limits import RunLimits
from gbatch.head.loop.preempt import Preempter
from gbatch.head.loop.route import Router
from gbatch.head.loop.runs import Runs
from gbatch.head.loop.schedule import Scheduling
from gbatch.head.loop.steps import StepEnds
from gbatch.head.metrics import DaemonMetrics
from gbatch.head.outbox import Outbox
from gbatch.head.refusals import RefusalLines
from gbatch.head.store import Store, StoreFull
from gbatch.head.tokens import TokenAuthority
from gbatch.nodes.base import Node
from gbatch.nodes.cluster import SlurmBackend
from gbatch.nodes.inventory import Inventory, partitions_of
from gbatch.nodes.joblog import NodeJoins
from gbatch.nodes.local import LOCAL_NODE
from gbatch.protocol import listings
from gbatch.site.config import Config, Paths

log = logging.getLogger("gbatchd")
COALESCE_SECONDS = 0.02


class Daemon:
    """The head's loop, and what its request handlers share.

    They share the store, the fleet, the config, the clocks, the wake-up event, and the
    steps' answers they read.
    """

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
        # Every node's output of each job run on every node, joined into its one log.
        self.joins = NodeJoins(paths, config.max_log_bytes)
        partitions = partitions_of(inventory, config.max_interactive_time)
        self.fleet = Fleet(
            make_nodes(paths, config, inventory, self.wake.set, self.joins),
            config,
            store,
            clock,
            monotonic,
            partitions=partitions,
            features=(
                {n.name: n.features for n in inventory.nodes}
                if inventory and inventory.nodes
                else None
            ),
            sharing=_sharing(inventory, config),
        )
        self.committer = GroupCommitter(store, clock)
        self.refusal_lines = RefusalLines(monotonic)  # how many refusals get audit lines
        # Bugs (a request's, a loop step's): a traceback per kind per window, then a count.
        self.internal_errors = InternalErrors(log, monotonic)
        self.metrics = DaemonMetrics()  # counters and histograms since start (metrics)
        # The HTTP API's tokens: keys made at the first mint.
        self.tokens = TokenAuthority(paths.home, config.token_leeway_seconds)
        # The brief records of listings (the HTTP API's GET /jobs), kept while unchanged.
        self.brief_records = listings.BriefRecords()
        # squeue's listings as columns, kept while no write is made (issue 35).
        self.kept_columns = listings.KeptColumns()
        # Delivers the store's outbox (mail, webhooks) in its own thread, once started.
        self.outbox = Outbox(store, config, clock, self.internal_errors)
        store.on_full = self.outbox.tell_store_full
        # The loop's steps (gbatch/head/loop/), each with what it keeps between passes.
        self.runs = Runs(
            store, self.fleet, config, self.metrics, self.wake, monotonic, paths, self.joins
        )
        self.conditions = NodeConditions(store, self.fleet, config)
        self.ended_runs = EndedRuns(store, self.fleet, self.runs, self.conditions, clock)
        self.run_limits = RunLimits(store, self.fleet, config, self.runs, monotonic)
        self.scheduling = Scheduling(
            store, self.fleet, config, Filters(store, config, self.wake), self.wake, monotonic
        )
        self.dispatcher = Dispatcher(store, self.fleet, self.runs, clock)
        self.preempter = Preempter(store, self.fleet, config)
        self.scheduling.preempter = self.preempter
        # Each GPU's 1-s samples for an hour and 1-min figures for 30 days, in ring files.
        self.gpu_history = GpuHistory(paths.gpu_history)
        self.gpus = GpuSampler(store, self.fleet, config, self.wake, self.gpu_history)
        # srun/salloc allocations still waited for by a client (interactive.py), and the
        # step that records steps' ends and ends the allocations they lead.
        self.waiters = Waiters(monotonic, config.interactive_grace_seconds)
        self.steps_starting = Starting()
        self.step_ends = StepEnds(store, self.fleet, self.waiters, self.steps_starting, self.wake)
        # Connections gbatch port-forward carries into running jobs (forwards.py): the
        # runs' ends close them.
        self.forwards = Forwards(monotonic)
        self.runs.on_end = self.forwards.job_ended
        # Partitions backed by a Slurm cluster: mirrored in a thread of their own.
        self.clusters = ClusterJobsStep(
            store,
            partitions,
            head_name(paths),
            lambda p: SlurmBackend.of(p, StoreLogins(store, p.name, clock)),
        )
        if self.clusters.backends:  # -p gpu,uni: where a job starts first
            self.scheduling.router = Router(store, self.clusters)
            # The lab's limits and fair share count the clusters' jobs.
            self.clusters.half_life = config.half_life_seconds
            if config.limits.limits_running:
                self.clusters.limits_for = self.scheduling.limits_for
            if config.qos.limits_running:
                self.clusters.qos = config.qos
        # The cyclic GC's work at the loop's moments; nothing until run_loop starts it
        # (the collector is the process's: a Daemon in a test leaves it alone).
        self.collector = LoopCollector(monotonic=monotonic)

    # -- life cycle -----------------------------------------------------------------

    def sweep_finished_runs(self) -> None:
        """Clean up runs whose end was recorded but not cleaned up (the daemon died between).

        That is their run directory, and their container if they had one.
        """
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
                for _, other in self.fleet.run_nodes(job)[1:]:  # a job across nodes
                    if other is not None:
                        other.cleanup(job, attempt)

    def watch_interactive(self) -> None:
        """At start-up: watch again the srun/salloc allocations whose first step never opened.

        Their clients have the grace, from now, to come back and wait."""
        for job_id in self.store.unled_allocations():
            self.waiters.watch(job_id)

    def run_loop(self) -> None:
        """Run a step at each tick or wake-up until stop().

        A step that fails is retried at the next.
        """
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
            except Exception as err:
                # One bad tick must not take the head down; the next tick retries. A step
                # that fails at every tick writes its traceback once, then counts.
                self.internal_errors.report(err, "loop step")
            self.refusal_lines.close_ended()
            self.internal_errors.close_ended()
            # Idle: no pass waits on the heap's whole walk.
            self.collector.full_when_due(idle=not self.wake.is_set())

    def submitted(self) -> None:
        """Wake the loop for new jobs (coalescing a burst of them)."""
        self._submitted.set()
        self.wake.set()
        self.clusters.poke()

    def stop(self) -> None:
        """End run_loop after the step under way."""
        self.stopping.set()
        self.wake.set()

    def close(self) -> None:
        """Stop the outbox, the group committer and the nodes' connections."""
        self.outbox.stop()
        self.clusters.stop()
        self.committer.close()
        self.fleet.stop()
        self.gpu_history.close()

    def step(self) -> None:
        """One pass: each step in order at one `now`, then the cyclic GC's share."""
        began = self.monotonic()
        now = self.clock()
        self.collect_ended_steps(now)
        self.collect_ended_runs(now)
        self.enforce_limits(now)
        self.schedule(now)
        self.end_abandoned_allocations(now)
        # Last: accounting that fails (a full disk) must not keep jobs from starting.
        self.sample_gpus(now)
        self.tell_node_conditions(now)
        self.collector.after_pass()
        self.metrics.observe_loop(self.monotonic() - began)

    # -- the steps (gbatch/head/loop/) --------------------------------------------------

    def collect_ended_steps(self, now: float) -> None:
        """Step 0: steps that ended; the srun/salloc allocations their first steps led."""
        self.step_ends.collect(now)

    def end_abandoned_allocations(self, now: float) -> None:
        """srun/salloc allocations whose clients went away before their first step."""
        self.step_ends.end_abandoned(now)

    def collect_ended_runs(self, now: float) -> None:
        """Step 1: runs that ended or vanished, and those of nodes lost."""
        self.ended_runs.collect(now)

    def enforce_limits(self, now: float) -> None:
        """Step 2: --signal warnings, TIME_LIMIT mail, time limits, runs being stopped."""
        self.preempter.forget_ended()
        self.run_limits.enforce(now)

    def schedule(self, now: float) -> None:
        """Step 3: plan the runnable window, then dispatch the plan's starts."""
        self.dispatch(self.scheduling.starts(now), now)

    def dispatch(self, starts: Sequence[tuple[Job, Node, Sequence[int]]], now: float) -> None:
        """Start each (job, node, GPU ids): intent, launch, confirm (Dispatcher)."""
        self.dispatcher.dispatch(starts, now)

    def sample_gpus(self, now: float) -> None:
        """Step 4: new reports folded into runs' GPU usage; the idle_gpu policy."""
        self.gpus.sample(now)

    def tell_node_conditions(self, now: float) -> None:
        """Step 5: GPU_FOREIGN and DISK_FULL told once per episode."""
        self.conditions.tell(now)

    # -- what the handlers read of the schedule step ------------------------------------

    @property
    def caught_up(self) -> bool:
        """Whether the last pass planned the whole window and wrote every reason it gave.

        Then no pass follows at once (Scheduling.caught_up).
        """
        return self.scheduling.caught_up

    @property
    def expected_starts(self) -> Mapping[int, float]:
        """job id -> expected start, from the latest plan's reservation (squeue --start)."""
        return self.scheduling.expected_starts

    @property
    def planned_users(self) -> frozenset[str]:
        """The users whose jobs the latest plan ordered (their fair-share factors)."""
        return self.scheduling.planned_users

    def would_start(
        self, job: Job, now: float
    ) -> tuple[float | None, str | None, tuple[int, ...], str]:
        """sbatch --test-only: (start time, node, GPU ids, pending reason) for `job`."""
        return self.scheduling.would_start(job, now)

    def limits_for(self, user: str) -> UserLimits:
        """The limits of `user` under the config's `limits:`, their groups included."""
        return self.scheduling.limits_for(user)

    def usage(self, allocated: Sequence[Job], now: float) -> dict[str, float]:
        """Stored decayed usage plus what allocated jobs have accrued so far."""
        return self.scheduling.usage(allocated, now)


def head_name(paths: Paths) -> str:
    """This head's name in the markers of the jobs it sends to a cluster.

    Its host and a digest of its home, so two heads sharing a cluster login never adopt
    each other's jobs."""
    digest = hashlib.sha256(str(paths.home.resolve()).encode()).hexdigest()[:10]
    host = "".join(c for c in socket.gethostname() if c.isalnum() or c in "-.")[:40]
    return f"{host or 'head'}-{digest}"


def _sharing(inventory: Inventory | None, config: Config) -> dict[str, Sharing] | None:
    """Each inventory node's sharing settings (gbatch/core/shares.py), or None.

    Its share_gpus, mps and headroom (config.yaml's where it sets none). None without
    an inventory (or one of partitions alone): the embedded node has config.yaml's (Fleet)."""
    if inventory is None or not inventory.nodes:
        return None
    return {
        n.name: Sharing(
            n.share_gpus,
            config.share_headroom_mib if n.share_headroom_mib is None else n.share_headroom_mib,
            n.mps,
        )
        for n in inventory.nodes
    }
