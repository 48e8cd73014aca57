"""Idle GPU hoarders: flag, tell and maybe cancel running jobs whose GPUs all stay idle.

Running jobs whose GPUs all stay under a utilisation threshold for a while are flagged
(their reason reads IDLE_REASON), told to their owner once, and, where the admins' policy
says so, cancelled after a longer grace. Pure: the daemon feeds each node report's readings
in with `now` and applies what comes back.

A streak starts at the first report in which every GPU of the run reads under the
threshold, and ends at the first report in which one does not, or cannot tell
(utilization_pct None: NVML's "not supported"): a GPU that cannot report is never idle.
A report that does not show the run's GPUs (its node silent, or they vanished from it)
neither extends nor ends a streak. Streaks live in the daemon's memory: a restarted
daemon starts counting again, which can only delay a flag or a cancel, never hasten it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gbatch.core.gpuusage import GpuReading
from gbatch.site.config import IDLE_GPU_EVENT, IdleGpuPolicy

# squeue's %r and scontrol's Reason= for a flagged run start with this (as Slurm's
# reasons are one CamelCase word; what follows says since when and under what).
IDLE_REASON = "IdleGPU"
EVENT = IDLE_GPU_EVENT

POLICY_SUFFIX = "(idle_gpu policy)"  # ends the reason of a job it cancelled

Run = tuple[int, int]  # (job id, attempt)


def all_idle(readings: Iterable[GpuReading], gpus: Sequence[int], threshold: float) -> bool | None:
    """Whether all of the run's `gpus` read under `threshold` percent in this report.

    None when the report shows none of them (no news), False when one is busy or cannot tell
    its utilisation.
    """
    wanted = set(gpus)
    mine = [g.utilization_pct for g in readings if g.index in wanted]
    if not mine:
        return None
    return all(u is not None and u < threshold for u in mine)


def all_idle_across(
    nodes: Iterable[tuple[Iterable[GpuReading] | None, Sequence[int]]], threshold: float
) -> bool | None:
    """Whether all of a run's GPUs on all its nodes read under `threshold` percent.

    `nodes`: each node's latest readings (None: it has none) with the run's GPUs there.
    False when a GPU on any node is busy or cannot tell; True only when every node's
    report shows its GPUs there, all idle; else None (no news)."""
    answers = [
        None if readings is None else all_idle(readings, gpus, threshold)
        for readings, gpus in nodes
    ]
    if False in answers:
        return False
    return True if answers and all(answers) else None


@dataclass(frozen=True)
class Verdicts:
    """What one pass asks of the daemon: runs to flag, runs whose flag goes, runs to cancel.

    Runs to flag come with their streak's start; runs whose flag goes are no longer idle;
    runs to cancel come with how long they were idle.
    """

    flag: Mapping[Run, float]
    clear: frozenset[Run]
    cancel: Mapping[Run, float]


class IdleStreaks:
    """Per running run, since when all its GPUs have read idle, and which are flagged."""

    def __init__(self, policy: IdleGpuPolicy) -> None:
        self.policy = policy
        self._since: dict[Run, float] = {}
        self._flagged: set[Run] = set()
        self._cancelled: set[Run] = set()

    def adopt(self, flagged: Iterable[Run]) -> None:
        """Take in runs already flagged (by an earlier daemon, in their reason).

        They are not flagged or told again, and their flag goes when they work again.
        """
        self._flagged.update(flagged)

    def since(self, run: Run) -> float | None:
        return self._since.get(run)

    def observe(
        self, running: Iterable[Run], idle: Mapping[Run, bool | None], now: float
    ) -> Verdicts:
        """Fold one pass in, and return what the daemon should flag, clear and cancel.

        `running`: every run now RUNNING (the others are forgotten); `idle`: what the fresh
        reports say of some of them (all_idle's answer).
        """
        live = set(running)
        for gone in set(self._since) - live:
            del self._since[gone]
        self._flagged &= live
        self._cancelled &= live
        flag: dict[Run, float] = {}
        clear: set[Run] = set()
        cancel: dict[Run, float] = {}
        for run in live:
            news = idle.get(run)
            if news is False:
                self._since.pop(run, None)
                if run in self._flagged:
                    self._flagged.discard(run)
                    clear.add(run)
                continue
            if news is True:
                self._since.setdefault(run, now)
            since = self._since.get(run)
            if since is None:
                continue
            idle_for = now - since
            if idle_for >= self.policy.after_seconds and run not in self._flagged:
                self._flagged.add(run)
                flag[run] = since
            grace = self.policy.cancel_after_seconds
            if grace is not None and idle_for >= grace and run not in self._cancelled:
                self._cancelled.add(run)
                cancel[run] = idle_for
        return Verdicts(flag, frozenset(clear), cancel)


def flag_reason(policy: IdleGpuPolicy, since_text: str) -> str:
    """The reason a flagged run's job shows: `IdleGPU: all GPUs under 5% since <time>`."""
    return f"{IDLE_REASON}: all GPUs under {policy.threshold_percent:g}% since {since_text}"


def cancel_reason(idle_for: float) -> str:
    """Why the policy cancelled a run: `cancelled: GPUs idle for 60 min (idle_gpu policy)`."""
    span = f"{idle_for / 60:.0f} min" if idle_for >= 60 else f"{idle_for:.0f} s"
    return f"cancelled: GPUs idle for {span} {POLICY_SUFFIX}"
