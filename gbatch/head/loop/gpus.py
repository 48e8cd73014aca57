"""The loop's GPU step: how busy running jobs keep their GPUs, and the idle_gpu policy.

How busy they keep them (for seff and sacct) is read from each node's new report; the
idle_gpu policy watches the same readings.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

from gbatch.core import gpuusage
from gbatch.core.model import IllegalTransition, JobState
from gbatch.core.timefmt import format_timestamp
from gbatch.head import idlegpu
from gbatch.head.fleet import Fleet
from gbatch.head.store import Store
from gbatch.site.config import Config

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

    def sample(self, now: float) -> None:
        """Fold each node's new report into its runs' GPU usage, then look for idle GPUs.

        A new report is one not sampled yet. One store read of the running jobs and one
        write, per poll. Then the same readings are watched for idle GPU hoarders.
        """
        fresh = {}
        for name, node in self.fleet.nodes.items():
            seq = node.report_seq
            if seq == self._sampled_seq.get(name):
                continue
            report, _ = node.report()
            if report is not None:
                # Its MIG slices too, numbered as jobs hold them (to_gpus).
                fresh[name] = node.gpus(report)
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
        self._watch_idle(running, fresh, now)

    def _watch_idle(
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
            self.wake.set()  # the limits step stops its run at the next step
