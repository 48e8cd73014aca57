"""How busy a run kept its GPUs, as one small record per run that seff and sacct read back.

The daemon folds each node report's readings of a running job's GPUs into one record per
run (job id, attempt). O(1) per run however long it runs: sample count, sum and max of
utilisation, and the most memory its GPUs held at once; never a time series. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol


class GpuReading(Protocol):
    """One GPU as a node report reads it (nodes.report.GpuReport, model.Gpu)."""

    @property
    def index(self) -> int: ...
    @property
    def memory_total_mib(self) -> int: ...
    @property
    def memory_used_mib(self) -> int: ...
    @property
    def utilization_pct(self) -> int | None: ...


@dataclass(frozen=True)
class GpuUsage:
    """A run's GPU samples so far, folded into counts, sums and maxima.

    A sample is one node report: its utilisation is the mean over the run's GPUs in that
    report; `util_max` the busiest single GPU in any report; `mem_max_mib` the run's GPUs'
    memory used together, at the report where that was highest, and `mem_total_mib` the
    largest total of their memory any report gave. `util_samples` counts reports whose
    GPUs all told their utilisation (a device that does not: NVML's "not supported").
    """

    samples: int
    util_samples: int
    util_sum: float
    util_max: int
    mem_max_mib: int
    mem_total_mib: int

    @property
    def util_mean(self) -> float | None:
        return self.util_sum / self.util_samples if self.util_samples else None

    def merged(self, other: GpuUsage) -> GpuUsage:
        """Both records' samples as one (what the store's upsert does in SQL)."""
        return GpuUsage(
            samples=self.samples + other.samples,
            util_samples=self.util_samples + other.util_samples,
            util_sum=self.util_sum + other.util_sum,
            util_max=max(self.util_max, other.util_max),
            mem_max_mib=max(self.mem_max_mib, other.mem_max_mib),
            mem_total_mib=max(self.mem_total_mib, other.mem_total_mib),
        )

    def to_wire(self) -> list[float | int]:
        return [
            self.samples,
            self.util_samples,
            self.util_sum,
            self.util_max,
            self.mem_max_mib,
            self.mem_total_mib,
        ]

    @classmethod
    def from_wire(cls, data: Sequence[float | int]) -> GpuUsage:
        samples, util_samples, util_sum, util_max, mem_max, mem_total = data
        return cls(
            int(samples),
            int(util_samples),
            float(util_sum),
            int(util_max),
            int(mem_max),
            int(mem_total),
        )


def sample(readings: Iterable[GpuReading], gpus: Sequence[int]) -> GpuUsage | None:
    """One report's sample of the run holding GPU indices `gpus`; None if it shows none.

    None when the report shows none of them: the run's GPUs vanished from it, so there is
    nothing to count.
    """
    wanted = set(gpus)
    mine = [g for g in readings if g.index in wanted]
    if not mine:
        return None
    utils = [g.utilization_pct for g in mine]
    known = [u for u in utils if u is not None]
    whole = len(known) == len(utils)
    return GpuUsage(
        samples=1,
        util_samples=1 if whole else 0,
        util_sum=sum(known) / len(known) if whole else 0.0,
        util_max=max(known, default=0),
        mem_max_mib=sum(g.memory_used_mib for g in mine),
        mem_total_mib=sum(g.memory_total_mib for g in mine),
    )


def tres_usage(usage: GpuUsage | None) -> str:
    """sacct's TRESUsageInMax for the GPUs, `gres/gpumem=11.20G,gres/gpuutil=98`.

    The names are Slurm's gpu TRES names. Empty where nothing was measured; without
    gpuutil where the GPUs never told their utilisation.
    """
    if usage is None or usage.samples == 0:
        return ""
    parts = [f"gres/gpumem={_gib(usage.mem_max_mib)}G"]
    if usage.util_samples:
        parts.append(f"gres/gpuutil={usage.util_max}")
    return ",".join(parts)


def seff_lines(usage: GpuUsage | None) -> list[str]:
    """seff's two GPU lines, utilisation then memory.

    `GPU Utilization: 63.2% (mean over N samples), max 98%` and `GPU Memory: max 11.20 GiB
    of 80.00 GiB`; both read `not measured` without samples, and utilisation alone does
    when the GPUs do not report it.
    """
    if usage is None or usage.samples == 0:
        return ["GPU Utilization: not measured", "GPU Memory: not measured"]
    mean = usage.util_mean
    if mean is None:
        util = "GPU Utilization: not measured (the GPUs do not report it)"
    else:
        many = "sample" if usage.util_samples == 1 else "samples"
        util = (
            f"GPU Utilization: {mean:.1f}% (mean over {usage.util_samples} {many}), "
            f"max {usage.util_max}%"
        )
    return [
        util,
        f"GPU Memory: max {_gib(usage.mem_max_mib)} GiB of {_gib(usage.mem_total_mib)} GiB",
    ]


def _gib(mib: int) -> str:
    return f"{mib / 1024:.2f}"
