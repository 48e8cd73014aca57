"""The loop's dispatch: start the runs a plan gave, crash-safe.

Scheduling decides them. Crash-safe: record intent, act, confirm, each for every start
at once.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

from gbatch.core.crashpoints import crash_point
from gbatch.core.model import Job, JobState
from gbatch.core.multinode import Layout, master_port, run_env
from gbatch.head.fleet import Fleet
from gbatch.head.loop.runs import Runs
from gbatch.head.store import StateChange, Store
from gbatch.nodes.base import LaunchError, Node

log = logging.getLogger("gbatchd")
# A start whose answer was lost (`docker run` timed out, its connection dropped) may
# still create its container: the remote docker CLI can outlive the closed channel. Its
# job stays CONFIGURING this long after, and until a node report taken later lists no
# such container, before it is requeued; a second start any sooner could run it twice.
LAUNCH_SETTLE_SECONDS = 60.0
LAUNCH_UNKNOWN = "launch outcome unknown"
# The exit code of a run that never started (its image missing, its command not found):
# Slurm's ExitCode=1:0 for a launch failure.
LAUNCH_FAILED_EXIT_CODE = 1


class Dispatcher:
    """Starts runs on their nodes and records each start's outcome."""

    def __init__(self, store: Store, fleet: Fleet, runs: Runs, clock: Callable[[], float]) -> None:
        self.store = store
        self.fleet = fleet
        self.runs = runs
        self.clock = clock

    def dispatch(self, starts: Sequence[tuple[Job, Node, Sequence[int]]], now: float) -> None:
        """Start each (job, node, GPU ids) of a plan: record intent, act, confirm.

        A job across nodes comes with its other nodes in `job.peers` (the plan's), which
        its intent records. Each step is done for every start at once (one commit for all
        intents, one for all confirmations: a commit costs an fsync, more than a local
        start): a crash between any two steps is reconciled as for one start.
        """
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
                    "peers": job.peers,
                    "attempt": job.attempt + 1,
                    "start_time": None,
                    "end_time": None,
                    "exit_code": None,
                    "exit_signal": None,
                    "stop_state": None,
                },
                on_lab=True,
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
            # Started at its allocation (`now`), as Slurm's StartTime: its GPUs were its
            # own from then, and its run began before this confirmation (a CI run's
            # `sleep 1` on 2 GPUs was charged 1.98 GPU-seconds, timed from after launch).
            self.runs.confirm_running(launched, "", now)

    def _launch_runs(self, job: Job, node: Node, gpus: Sequence[int]) -> None:
        """Start `job`'s run on `node`, and for a job across nodes on each other node too.

        A job across nodes sees its layout's variables (multinode.run_env): MASTER_ADDR
        the first node's peer_address, MASTER_PORT multinode.master_port. Its command
        runs on every node where multinode.runs_everywhere says so, else on the first
        node only (the batch script; srun starts tasks on the others). Every run is
        started before the job is confirmed RUNNING. A start that fails on any node
        raises its LaunchError: the runs started before it are stopped (the job's end
        cleans up every node of it), and the job takes the fate that error gives it.
        """
        if not job.peers:
            node.launch(job, job.attempt, gpus)
            return
        addresses = []
        for name in job.node_names:
            each = self.fleet.nodes.get(name)
            if each is None:
                raise LaunchError(f"node {name} of its allocation is not in the fleet")
            addresses.append(each.peer_address)
        layout = Layout.of(job, tuple(addresses), master_port(job.id))
        runs = [(name, each) for name, each in self.fleet.run_nodes(job) if each is not None]
        # Containers on several nodes: all created (images pulled) before any starts,
        # so no node's command waits at the rendezvous on another's image.
        hold = len(runs) > 1 and job.spec.image is not None
        for index, (name, each) in enumerate(runs):
            here = gpus if index == 0 else dict(job.peers)[name]
            # A peer's GPUs have UUIDs of their own; its run names them by index.
            run_job = job if index == 0 else replace(job, gpu_uuids=())
            launch = partial(each.launch, run_job, job.attempt, here, run_env(layout, index))
            self._on_every_node(job, runs, index, partial(launch, hold=hold))
        if hold:
            for index, (_, each) in enumerate(runs):
                self._on_every_node(job, runs, index, partial(each.start_held, job, job.attempt))

    def _on_every_node(
        self,
        job: Job,
        runs: Sequence[tuple[str, Node]],
        index: int,
        act: Callable[[], None],
    ) -> None:
        """`act` on run `index` of a job across nodes, re-raising its LaunchError so.

        When it fails on a node but the first, the runs before it are killed and its
        LaunchError raised again naming its node (the job's end then removes them
        all); a node whose docker engine does not answer makes it node_busy (requeued,
        no retry used), as the first node's does."""
        try:
            act()
        except LaunchError as err:
            if index == 0:
                raise
            for _, started in runs[:index]:
                started.signal(job, job.attempt, signal.SIGKILL)
            name, node = runs[index]
            busy, what = err.node_busy, str(err)
            engine = None
            if not (busy or err.maybe_started) and job.spec.image is not None:
                engine = node.docker_problem(self.clock())
            if engine is not None:
                # Not the job's fault: it waits for that engine and keeps its retries.
                busy, what = True, f"its docker engine does not answer ({engine})"
            raise LaunchError(
                f"on {name} (node {index} of {len(runs)}): {what}",
                maybe_started=err.maybe_started,
                node_busy=busy,
            ) from err

    def _launch(self, job: Job, node: Node, gpus: Sequence[int], now: float) -> bool:
        """Start `job` (CONFIGURING, its attempt counted) on `node`: True when its run
        exists. When it does not, the job is requeued or failed as the error says, or
        left CONFIGURING when the start may yet appear."""
        try:
            self._launch_runs(job, node, gpus)
        except LaunchError as err:
            if err.maybe_started:
                # Left CONFIGURING: the collect step adopts the run if it exists and
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
                self.runs.end_run(job, JobState.PENDING, reason, now, end_time=now)
                return False
            engine = node.docker_problem(self.clock()) if job.spec.image is not None else None
            if engine is not None:
                # Not the job's fault: it waits for the engine and keeps its retries.
                reason = f"docker engine on {node.name} does not answer ({engine}); requeued"
                self.runs.end_run(job, JobState.PENDING, reason, now, end_time=now)
                return False
            retry = self.runs.retries_used(job) < job.spec.retries
            new = JobState.PENDING if retry else JobState.FAILED
            # Never 0:0, which reads as success to a script checking ExitCode.
            self.runs.end_run(
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
