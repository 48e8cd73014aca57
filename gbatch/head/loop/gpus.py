"""The loop's GPU step: how busy running jobs keep their GPUs, idle GPUs, memory budgets.

How busy they keep them (for seff, sacct and scontrol), and how much GPU memory each
run's own processes use, is read from each node's new report (a job across nodes: from
all its nodes' latest, as one run); the idle_gpu policy and the gpu_mem_policy watch the
same readings.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from functools import partial

from gbatch.core import gpuusage
from gbatch.core.model import IllegalTransition, JobState
from gbatch.core.timefmt import format_timestamp
from gbatch.head import gpubudget, idlegpu
from gbatch.head.fleet import Fleet
from gbatch.head.gpuhistory import GpuHistory
from gbatch.head.store import Store
from gbatch.head.store.usage import RunningGpus
from gbatch.nodes.report import NodeReport, RunOwner, run_gpu_memory
from gbatch.site.config import Config

Run = tuple[int, int]  # (job id, attempt)
Owners = Mapping[Run, RunOwner]
# A run's GPU indices on one node, with that node's latest readings (None: no report).
NodeGpus = tuple[Sequence[gpuusage.GpuReading] | None, tuple[int, ...]]

log = logging.getLogger("gbatchd")


class GpuSampler:
    """Each node's report last sampled, and the idle GPU streaks of running runs."""

    def __init__(
        self,
        store: Store,
        fleet: Fleet,
        config: Config,
        wake: threading.Event,
        history: GpuHistory | None = None,
    ) -> None:
        self.store = store
        self.history = history
        self.fleet = fleet
        self.config = config
        self.wake = wake
        # node name -> the number of its report last folded into runs' GPU usage
        self._sampled_seq: dict[str, int] = {}
        # node name -> its latest report's GPU readings, the report, and its runs' owners
        # (a job across nodes is sampled with its other nodes' latest).
        self._latest: dict[str, tuple[Sequence[gpuusage.GpuReading], NodeReport, Owners]] = {}
        # Idle GPU streaks of running runs (gbatch/head/idlegpu.py); None: not watched.
        # Runs flagged by an earlier daemon are adopted at the first pass.
        policy = config.idle_gpu
        self._idle = None if policy is None else idlegpu.IdleStreaks(policy)
        self._idle_adopted = False
        # Runs over their GPU memory budget (gbatch/head/gpubudget.py); runs warned by an
        # earlier daemon are adopted at the first pass.
        self._over = gpubudget.OverStreaks(config.gpu_mem_policy, config.gpu_mem_grace_seconds)
        self._over_adopted = False

    def sample(self, now: float) -> None:
        """Fold each node's new report into its runs' GPU usage, then look for idle GPUs.

        A new report is one not sampled yet. One store read of the running jobs and one
        write, per poll. A job across nodes is one run: sampled at a poll that brings a
        new report of any of its nodes, over its GPUs on every node (each node's latest
        report). Then the same readings are watched for idle GPU hoarders and budgets.
        """
        fresh = set()
        for name, node in self.fleet.nodes.items():
            seq = node.report_seq
            report, _ = node.report()
            if report is None:
                self._latest.pop(name, None)  # silent: no readings of it are current
            elif seq != self._sampled_seq.get(name):
                # Its MIG slices too, numbered as jobs hold them (to_gpus).
                self._latest[name] = (node.gpus(report), report, node.run_owners(report))
                fresh.add(name)
                if self.history is not None:
                    self.history.record(name, self._latest[name][0], now)
            self._sampled_seq[name] = seq
        for name in set(self._latest) - set(self.fleet.nodes):
            del self._latest[name]
        if not fresh:
            return
        running = self.store.running_gpus()
        by_run: dict[Run, list[RunningGpus]] = {}
        for held in running:
            by_run.setdefault((held.job_id, held.attempt), []).append(held)
        samples = []
        news: dict[Run, list[NodeGpus]] = {}
        budgets: dict[Run, gpubudget.Reading] = {}
        for run, places in by_run.items():
            if not any(held.node in fresh for held in places):
                continue  # no new report of any of its nodes: no news of it
            nodes, own = self._read(run, places)
            news[run] = nodes
            usage = gpuusage.sample_across(
                [(readings, gpus) for readings, gpus in nodes if readings is not None], own
            )
            if usage is None:
                continue  # its GPUs are not in the reports: no news of it
            samples.append((*run, usage))
            budget = places[0].gpu_mem_mb
            if budget is not None:
                budgets[run] = gpubudget.Reading(own or 0, budget)
        self.store.add_gpu_samples(samples)
        self._watch_idle(running, news, now)
        self._watch_budgets(running, budgets, now)

    def _read(self, run: Run, places: Sequence[RunningGpus]) -> tuple[list[NodeGpus], int | None]:
        """A run's GPUs on each of its nodes with that node's latest readings (None: it has
        no report), and what its own processes use on all of them (None: none listed)."""
        nodes: list[NodeGpus] = []
        own: int | None = None
        for held in places:
            latest = self._latest.get(held.node)
            if latest is None:
                nodes.append((None, held.gpus))
                continue
            readings, report, owners = latest
            nodes.append((readings, held.gpus))
            owner = owners.get(run)
            used = None if owner is None else run_gpu_memory(report, held.gpus, owner)
            if used is not None:
                own = (own or 0) + used
        return nodes, own

    def _watch_budgets(
        self, running: Sequence[RunningGpus], readings: Mapping[Run, gpubudget.Reading], now: float
    ) -> None:
        """The gpu_mem_policy: warn runs whose own processes use more GPU memory than their
        budget (their reason, an event, GPU_MEM_BUDGET told once per run), take the flag
        off when they are back under, and stop them after the grace where it says kill."""
        config, streaks = self.config, self._over
        warn = partial(
            gpubudget.warn_reason,
            policy=config.gpu_mem_policy,
            grace_seconds=config.gpu_mem_grace_seconds,
        )
        if not self._over_adopted:
            streaks.adopt(
                (job.id, job.attempt)
                for job in self.store.jobs_in((JobState.RUNNING,))
                if job.reason.startswith(gpubudget.WARN_REASON)
            )
            self._over_adopted = True
        verdicts = streaks.observe([(r.job_id, r.attempt) for r in running], readings, now)
        for (job_id, _), (reading, since) in verdicts.warn.items():
            reason = warn(reading, format_timestamp(since))
            if self.store.note(job_id, JobState.RUNNING, reason, now):
                log.warning("job %d: %s", job_id, reason)
                self.store.queue_job_event(job_id, gpubudget.EVENT, now)
        for (job_id, attempt), (reading, since) in verdicts.flag.items():
            self.store.set_running_reason(job_id, attempt, warn(reading, format_timestamp(since)))
        for job_id, attempt in verdicts.clear:
            self.store.set_running_reason(job_id, attempt, "", replacing=gpubudget.WARN_REASON)
        for (job_id, _), (reading, over_for) in verdicts.stop.items():
            reason = gpubudget.stop_reason(reading, over_for)
            self._stop(job_id, reason, JobState.OUT_OF_MEMORY, now)

    def _watch_idle(
        self,
        running: Sequence[RunningGpus],
        news: Mapping[Run, Sequence[NodeGpus]],
        now: float,
    ) -> None:
        """The idle_gpu policy: flag runs whose GPUs (on all their nodes: `news`, the
        latest readings of the runs with a new report) all read idle long enough (their
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
        threshold = policy.threshold_percent
        idle = {run: idlegpu.all_idle_across(nodes, threshold) for run, nodes in news.items()}
        verdicts = streaks.observe([(r.job_id, r.attempt) for r in running], idle, now)
        for (job_id, _), since in verdicts.flag.items():
            reason = idlegpu.flag_reason(policy, format_timestamp(since))
            if self.store.note(job_id, JobState.RUNNING, reason, now):
                log.info("job %d: %s", job_id, reason)
                self.store.queue_job_event(job_id, idlegpu.EVENT, now)
        for job_id, attempt in verdicts.clear:
            # Its own flag only: a budget warning written since stays.
            self.store.set_running_reason(job_id, attempt, "", replacing=idlegpu.IDLE_REASON)
        for (job_id, _), idle_for in verdicts.cancel.items():
            self._stop(job_id, idlegpu.cancel_reason(idle_for), JobState.CANCELLED, now)

    def _stop(self, job_id: int, reason: str, final: JobState, now: float) -> None:
        """Stop a policy's running job: COMPLETING with `reason`, then `final` once it ended."""
        try:
            self.store.set_state(
                job_id,
                JobState.COMPLETING,
                reason,
                now,
                expect={JobState.RUNNING},
                stop_state=final,
            )
        except IllegalTransition:
            return  # it ended or was stopped meanwhile
        log.warning("job %d: %s", job_id, reason)
        self.wake.set()  # the limits step stops its run at the next step
