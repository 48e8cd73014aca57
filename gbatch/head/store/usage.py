"""Usage: each user's fair-share GPU-seconds and each run's GPU usage samples.

The GPU-seconds are folded in as runs end and decayed when read; the samples are what
seff and sacct's TRESUsageInMax show.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from gbatch.core.gpuusage import GpuUsage
from gbatch.head import fairshare
from gbatch.head.store.db import Database
from gbatch.head.store.rows import _chunks, _marks, decode_peers


class RunningGpus(NamedTuple):
    """A RUNNING job's run on GPUs of one node, as the GPU sampling reads it."""

    job_id: int
    attempt: int
    node: str
    gpus: tuple[int, ...]
    gpu_mem_mb: int | None  # its GPU memory budget (--gpu-mem), None: none


@dataclass(frozen=True)
class Usage:
    """GPU-seconds a run used, to fold into its user's fair-share usage."""

    user: str
    gpu_seconds: float
    half_life: float


def _accrue(db: sqlite3.Connection, usage: Usage, now: float) -> None:
    """Fold a run's GPU-seconds into its user's usage, decayed to `now`, in the open
    transaction (the state change that ended the run)."""
    row = db.execute(
        "SELECT gpu_seconds, as_of FROM usage WHERE user = ?", (usage.user,)
    ).fetchone()
    stored, as_of = (row[0], row[1]) if row else (0.0, now)
    total = fairshare.accrue(stored, as_of, usage.gpu_seconds, now, usage.half_life)
    db.execute(
        "INSERT INTO usage (user, gpu_seconds, as_of) VALUES (?, ?, ?)"
        " ON CONFLICT(user) DO UPDATE SET gpu_seconds = excluded.gpu_seconds,"
        " as_of = excluded.as_of",
        (usage.user, total, now),
    )


class UsageRecords(Database):
    """Fair-share usage and each run's GPU usage, written as runs go.

    Read by the planner, seff and sacct.
    """

    def add_gpu_samples(self, samples: Sequence[tuple[int, int, GpuUsage]]) -> None:
        """Fold each (job id, attempt, sample) into that run's GPU usage.

        One transaction for a whole poll of the fleet, however many runs it samples;
        not waiting for the disk (telemetry: Store._write's `durable`).
        """
        if not samples:
            return
        with self._write(durable=False) as db:
            db.executemany(
                "INSERT INTO gpu_usage (job_id, attempt, samples, util_samples, util_sum,"
                " util_max, mem_max_mib, mem_total_mib, own_samples, own_mem_mib,"
                " own_mem_max_mib) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(job_id, attempt) DO UPDATE SET"
                " samples = samples + excluded.samples,"
                " util_samples = util_samples + excluded.util_samples,"
                " util_sum = util_sum + excluded.util_sum,"
                " util_max = max(util_max, excluded.util_max),"
                " mem_max_mib = max(mem_max_mib, excluded.mem_max_mib),"
                " mem_total_mib = max(mem_total_mib, excluded.mem_total_mib),"
                " own_samples = own_samples + excluded.own_samples,"
                " own_mem_mib = excluded.own_mem_mib,"
                " own_mem_max_mib = max(own_mem_max_mib, excluded.own_mem_max_mib)",
                [(job_id, attempt, *usage.to_wire()) for job_id, attempt, usage in samples],
            )

    def running_gpus(self) -> list[RunningGpus]:
        """Every RUNNING job holding GPUs: its run, node, GPU indices and memory budget.

        A job across nodes comes once per node of it that holds GPUs (Job.placements:
        its first node first, then its peers), all with its run. The daemon's GPU
        sampling reads this each poll, without decoding any spec.
        """
        with self._lock:
            rows = self._db.execute(
                "SELECT id, attempt, node, gpus, json_extract(spec, '$.gpu_mem'), peers"
                " FROM jobs WHERE state = 'RUNNING' AND gpus != '' AND node IS NOT NULL"
            ).fetchall()
        running = []
        for i, a, n, g_, budget, peers in rows:
            first = (str(n), tuple(int(g) for g in g_.split(",")))
            for node, gpus in (first, *decode_peers(peers)):
                if gpus:
                    mib = None if budget is None else int(budget)
                    running.append(RunningGpus(int(i), int(a), node, gpus, mib))
        return running

    def gpu_usage(self, runs: Collection[tuple[int, int]]) -> dict[tuple[int, int], GpuUsage]:
        """The GPU usage recorded for each (job id, attempt) in `runs` that has any."""
        found: dict[tuple[int, int], GpuUsage] = {}
        wanted = set(runs)
        by_job: dict[int, set[int]] = {}
        for job_id, attempt in wanted:
            by_job.setdefault(job_id, set()).add(attempt)
        with self._lock:
            for chunk in _chunks(sorted(by_job)):
                rows = self._db.execute(
                    "SELECT job_id, attempt, samples, util_samples, util_sum, util_max,"
                    " mem_max_mib, mem_total_mib, own_samples, own_mem_mib, own_mem_max_mib"
                    f" FROM gpu_usage WHERE job_id IN ({_marks(chunk)})",
                    list(chunk),
                ).fetchall()
                for job_id, attempt, *values in rows:
                    if attempt in by_job[job_id]:
                        found[(job_id, attempt)] = GpuUsage.from_wire(values)
        return found

    def usage(self, now: float, half_life: float) -> dict[str, float]:
        """Every user's stored GPU-seconds, decayed to `now`."""
        with self._lock:
            rows = self._db.execute("SELECT user, gpu_seconds, as_of FROM usage").fetchall()
        return {user: fairshare.decay(value, now - as_of, half_life) for user, value, as_of in rows}
