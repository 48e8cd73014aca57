"""How busy a run kept its GPUs, as one small record per run that seff and sacct read back.

The daemon folds each node report's readings of a running job's GPUs into one record per
run (job id, attempt). O(1) per run however long it runs: sample count, sum and max of
utilisation, the most memory its GPUs held at once, and the memory its own processes
use now and at most; never a time series. A job across nodes is one run: each sample
reads its GPUs on every node. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gbatch.core.labels import memory_text

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Protocol
else:
    Protocol = object  # GpuReading is a type for checkers: nothing builds or isinstance()s one


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

    A sample is one node report (for a job across nodes, one poll bringing a new report of
    any of its nodes, read with its other nodes' latest): its utilisation is the mean
    over the run's GPUs in that report (on all its nodes); `util_max` the busiest single
    GPU in any report; `mem_max_mib` the run's GPUs' memory used together, at the report
    where that was highest, and `mem_total_mib` the largest total of their memory any
    report gave. `util_samples` counts reports whose GPUs all told their utilisation (a
    device that does not: NVML's "not supported").

    The run's own processes (its shim's session, its container: nodes/report.py
    `run_gpu_memory`) on its GPUs: `own_samples` counts reports that listed one of them,
    `own_mem_mib` is what they used together in the latest report (0 once none is
    listed), `own_mem_max_mib` the most they used together in any. A GPU shared by
    several jobs is told apart only by these; `mem_max_mib` counts the whole card.
    """

    samples: int
    util_samples: int
    util_sum: float
    util_max: int
    mem_max_mib: int
    mem_total_mib: int
    own_samples: int = 0
    own_mem_mib: int = 0
    own_mem_max_mib: int = 0

    @property
    def own_measured(self) -> bool:
        """Whether a report has listed a process of the run on its GPUs."""
        return self.own_samples > 0

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
            own_samples=self.own_samples + other.own_samples,
            own_mem_mib=other.own_mem_mib,  # the later sample's: what it uses now
            own_mem_max_mib=max(self.own_mem_max_mib, other.own_mem_max_mib),
        )

    def to_wire(self) -> list[float | int]:
        return [
            self.samples,
            self.util_samples,
            self.util_sum,
            self.util_max,
            self.mem_max_mib,
            self.mem_total_mib,
            self.own_samples,
            self.own_mem_mib,
            self.own_mem_max_mib,
        ]

    @classmethod
    def from_wire(cls, data: Sequence[float | int]) -> GpuUsage:
        """The record to_wire made; an older daemon's six values leave the own ones 0."""
        samples, util_samples, util_sum, util_max, mem_max, mem_total = data[:6]
        own = [int(v) for v in data[6:9]] + [0] * (9 - max(6, len(data[:9])))
        return cls(
            int(samples),
            int(util_samples),
            float(util_sum),
            int(util_max),
            int(mem_max),
            int(mem_total),
            *own,
        )


def sample(
    readings: Iterable[GpuReading], gpus: Sequence[int], own_mib: int | None = None
) -> GpuUsage | None:
    """One report's sample of the run holding GPU indices `gpus`; None if it shows none.

    None when the report shows none of them: the run's GPUs vanished from it, so there is
    nothing to count. `own_mib` is what the run's own processes on those GPUs use in this
    report (nodes/report.py `run_gpu_memory`); None when the report lists none of them.
    """
    return sample_across([(readings, gpus)], own_mib)


def sample_across(
    nodes: Iterable[tuple[Iterable[GpuReading], Sequence[int]]], own_mib: int | None = None
) -> GpuUsage | None:
    """One poll's sample of a run over all its nodes: (a report's readings, its GPUs there).

    As `sample`, its GPUs on every node as one set: the utilisation their mean, the memory
    theirs together; None when no node's report shows one of them. `own_mib`: what its
    own processes use on all its nodes together."""
    mine: list[GpuReading] = []
    for readings, gpus in nodes:
        wanted = set(gpus)
        mine.extend(g for g in readings if g.index in wanted)
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
        own_samples=0 if own_mib is None else 1,
        own_mem_mib=own_mib or 0,
        own_mem_max_mib=own_mib or 0,
    )


def tres_usage(usage: GpuUsage | None) -> str:
    """sacct's TRESUsageInMax for the GPUs, `gres/gpumem=11.20G,gres/gpuutil=98`.

    The names are Slurm's gpu TRES names. gpumem is the run's own processes' peak, as
    Slurm's gpu plugin measures it per process, once a report has listed one of them;
    until then its GPUs' memory used (a card whose driver lists no process). Empty where
    nothing was measured; without gpuutil where the GPUs never told their utilisation.
    """
    if usage is None or usage.samples == 0:
        return ""
    peak = usage.own_mem_max_mib if usage.own_measured else usage.mem_max_mib
    parts = [f"gres/gpumem={_gib(peak)}G"]
    if usage.util_samples:
        parts.append(f"gres/gpuutil={usage.util_max}")
    return ",".join(parts)


def seff_lines(usage: GpuUsage | None, budget_mib: int | None = None) -> list[str]:
    """seff's GPU lines, utilisation then memory, then its processes' memory if measured.

    `GPU Utilization: 63.2% (mean over N samples), max 98%` and `GPU Memory: max 11.20 GiB
    of 80.00 GiB`; both read `not measured` without samples, and utilisation alone does
    when the GPUs do not report it. A third, `GPU Memory of its processes: max 21.00 GiB
    (budget 20.00 GiB)`, once a report has listed one of its processes, or it has a
    budget (`budget_mib`, the job's --gpu-mem).
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
    lines = [
        util,
        f"GPU Memory: max {_gib(usage.mem_max_mib)} GiB of {_gib(usage.mem_total_mib)} GiB",
    ]
    if usage.own_measured or budget_mib is not None:
        own = f"max {_gib(usage.own_mem_max_mib)} GiB" if usage.own_measured else "not measured"
        budget = "" if budget_mib is None else f" (budget {_gib(budget_mib)} GiB)"
        lines.append(f"GPU Memory of its processes: {own}{budget}")
    return lines


def own_memory_fields(usage: GpuUsage | None, running: bool) -> str:
    """scontrol's `GpuMemUsed=1500M GpuMemPeak=2G` of a run's own processes; "" unmeasured.

    GpuMemUsed only while the job runs (it is what the latest report showed).
    """
    if usage is None or not usage.own_measured:
        return ""
    peak = f"GpuMemPeak={_size(usage.own_mem_max_mib)}"
    return f"GpuMemUsed={_size(usage.own_mem_mib)} {peak}" if running else peak


def max_gpu_mem(usage: GpuUsage | None) -> str:
    """sacct's MaxGpuMem: the run's own processes' peak (`21G`, `1500M`); "" unmeasured."""
    return _size(usage.own_mem_max_mib) if usage is not None and usage.own_measured else ""


def _size(mib: int) -> str:
    return memory_text(mib) if mib else "0"


def _gib(mib: int) -> str:
    return f"{mib / 1024:.2f}"
