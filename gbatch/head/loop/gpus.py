"""The loop's GPU step: how busy running jobs keep their GPUs, idle GPUs, memory budgets.

How busy they keep them (for seff, sacct and scontrol), and how much GPU memory each
run's own processes use, is read from each node's new report; the idle_gpu policy and
the gpu_mem_policy watch the same readings.
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
from gbatch.head.store import Store
from gbatch.head.store.usage import RunningGpus
from gbatch.nodes.report import NodeReport, RunOwner, run_gpu_memory
from gbatch.site.config import Config

Run = tuple[int, int]  # (job id, attempt)

log = logging.getLogger("gbatchd")


class GpuSampler:
    """Each node's report last sampled, and the idle GPU streaks of running runs."""

    def __init__(self, store: Store, fleet: Fleet, config: Config, wake: threading.Event) -> None:
        self.store = store
        self.fleet = fleet
        self.config = config
        self.wake = wake
        # node name -> the number of its report last folded into runs' GPU usage
        self._sampled_seq: dict[str, int] = {}
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
        write, per poll. Then the same readings are watched for idle GPU hoarders.
        """
        fresh = {}
        reports: dict[str, tuple[NodeReport, Mapping[Run, RunOwner]]] = {}
        for name, node in self.fleet.nodes.items():
            seq = node.report_seq
            if seq == self._sampled_seq.get(name):
                continue
            report, _ = node.report()
            if report is not None:
                # Its MIG slices too, numbered as jobs hold them (to_gpus).
                fresh[name] = node.gpus(report)
                reports[name] = (report, node.run_owners(report))
            self._sampled_seq[name] = seq
        if not fresh:
            return
        samples = []
        budgets: dict[Run, gpubudget.Reading] = {}
        running = self.store.running_gpus()
        for run in running:
            readings = fresh.get(run.node)
            if readings is None:
                continue
            report, owners = reports[run.node]
            owner = owners.get((run.job_id, run.attempt))
            own = None if owner is None else run_gpu_memory(report, run.gpus, owner)
            usage = gpuusage.sample(readings, run.gpus, own)
            if usage is None:
                continue  # its GPUs are not in the report: no news of it
            samples.append((run.job_id, run.attempt, usage))
            if run.gpu_mem_mb is not None:
                budgets[(run.job_id, run.attempt)] = gpubudget.Reading(own or 0, run.gpu_mem_mb)
        self.store.add_gpu_samples(samples)
        self._watch_idle(running, fresh, now)
        self._watch_budgets(running, budgets, now)

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
        for job_id, attempt, node_name, gpus, _ in running:
            readings = fresh.get(node_name)
            if readings is not None:
                idle[(job_id, attempt)] = idlegpu.all_idle(readings, gpus, policy.threshold_percent)
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
