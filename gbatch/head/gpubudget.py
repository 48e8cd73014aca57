"""GPU memory budgets: warn, then maybe stop, running jobs whose processes use more than theirs.

A job with a budget (`--gpu-mem`, JobSpec.gpu_mem_mb) is over it in a report when its own
processes on its GPUs (nodes/report.py `run_gpu_memory`) use more GPU memory than that.
The first report over it in a run warns it: its reason reads WARN_REASON, an event
(GPU_MEM_BUDGET) tells its owner. With the admins' gpu_mem_policy `kill`, a job still
over after gpu_mem_grace_seconds is stopped: OUT_OF_MEMORY, reason BUDGET_REASON. Over
means every report for that long: one report under the budget ends the streak, so a
spike shorter than the grace is only warned. Pure: the daemon feeds each fresh report's
readings in with `now` and applies what comes back.

A report that does not show the run (its node silent, its GPUs gone from it) neither
extends nor ends a streak. Streaks live in the daemon's memory: a restarted daemon starts
counting again, which can only delay a stop, never hasten it; a run warned before the
restart (its reason says so) is not told again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gbatch.core.labels import memory_text
from gbatch.core.model import GPU_MEM_EVENT

# Slurm-style reasons, one CamelCase word first: a running job over its budget shows
# WARN_REASON (squeue's %r, scontrol's Reason=); one the policy stopped ends with
# BUDGET_REASON (sacct's Reason, squeue -t all's NODELIST(REASON)).
WARN_REASON = "GpuMemOverBudget"
BUDGET_REASON = "OutOfGpuMemoryBudget"
EVENT = GPU_MEM_EVENT
KILL = "kill"

Run = tuple[int, int]  # (job id, attempt)


@dataclass(frozen=True)
class Reading:
    """What a run's own processes use in one report, beside its budget, in MiB."""

    used_mib: int
    budget_mib: int

    @property
    def over(self) -> bool:
        return self.used_mib > self.budget_mib


@dataclass(frozen=True)
class Verdicts:
    """What one pass asks of the daemon.

    `warn`: runs over their budget for the first time in their run (reason, event, owner
    told), with the streak's start; `flag`: runs over again after going under (reason
    only: told once per run); `clear`: runs back under (their reason goes); `stop`: runs
    to stop, with how long they have been over.
    """

    warn: Mapping[Run, tuple[Reading, float]]
    flag: Mapping[Run, tuple[Reading, float]]
    clear: frozenset[Run]
    stop: Mapping[Run, tuple[Reading, float]]


class OverStreaks:
    """Per running run, since when it has been over its budget, and what it was told."""

    def __init__(self, policy: str, grace_seconds: float) -> None:
        self.policy = policy
        self.grace_seconds = grace_seconds
        self._since: dict[Run, float] = {}
        self._flagged: set[Run] = set()  # its reason says it is over now
        self._warned: set[Run] = set()  # told once in this run
        self._stopped: set[Run] = set()

    def adopt(self, flagged: Iterable[Run]) -> None:
        """Take in runs already warned (by an earlier daemon, in their reason).

        They are not told again, and their flag goes when they are back under.
        """
        runs = set(flagged)
        self._flagged |= runs
        self._warned |= runs

    def observe(
        self, running: Iterable[Run], readings: Mapping[Run, Reading], now: float
    ) -> Verdicts:
        """Fold one pass in and return what the daemon should warn, flag, clear and stop.

        `running`: every run now RUNNING (the others are forgotten); `readings`: what the
        fresh reports say of those with a budget that they show.
        """
        live = set(running)
        for gone in set(self._since) - live:
            del self._since[gone]
        self._flagged &= live
        self._warned &= live
        self._stopped &= live
        warn: dict[Run, tuple[Reading, float]] = {}
        flag: dict[Run, tuple[Reading, float]] = {}
        clear: set[Run] = set()
        stop: dict[Run, tuple[Reading, float]] = {}
        for run, reading in readings.items():
            if run not in live:
                continue
            if not reading.over:
                self._since.pop(run, None)
                if run in self._flagged:
                    self._flagged.discard(run)
                    clear.add(run)
                continue
            since = self._since.setdefault(run, now)
            if run not in self._flagged:
                self._flagged.add(run)
                (flag if run in self._warned else warn)[run] = (reading, since)
                self._warned.add(run)
            over_for = now - since
            if self.policy == KILL and over_for >= self.grace_seconds and run not in self._stopped:
                self._stopped.add(run)
                stop[run] = (reading, over_for)
        return Verdicts(warn, flag, frozenset(clear), stop)


def warn_reason(reading: Reading, since_text: str, policy: str, grace_seconds: float) -> str:
    """A running job's reason while it is over its budget.

    `GpuMemOverBudget: its processes use 25G of its 20G GPU memory budget since <time>;
    stopped if still over after 30 s` (the last part under gpu_mem_policy kill).
    """
    then = f"; stopped if still over after {grace_seconds:g} s" if policy == KILL else ""
    return (
        f"{WARN_REASON}: its processes use {memory_text(reading.used_mib)} of its "
        f"{memory_text(reading.budget_mib)} GPU memory budget since {since_text}{then}"
    )


def stop_reason(reading: Reading, over_for: float) -> str:
    """Why the policy stops a run: its reason while COMPLETING, and that event's.

    `OutOfGpuMemoryBudget: its processes used 25G of its 20G GPU memory budget for 31 s
    (gpu_mem_policy kill)`.
    """
    return (
        f"{BUDGET_REASON}: its processes used {memory_text(reading.used_mib)} of its "
        f"{memory_text(reading.budget_mib)} GPU memory budget for {over_for:.0f} s "
        "(gpu_mem_policy kill)"
    )
