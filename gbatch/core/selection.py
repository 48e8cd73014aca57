"""scancel's job filters -n/--name, -p/--partition and -w/--nodelist, as one value.

A job passes when it matches one item of each list given (AND between the filters, OR
within one), as Slurm's scancel combines them; the store turns the same value into SQL
(gbatch/head/store/rows.py, filter_sql) so a sweep reads only the jobs it keeps.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from gbatch.core.constants import IMPLICIT_PARTITION
from gbatch.core.model import Job


@dataclass(frozen=True)
class JobFilter:
    """Names, partitions and nodes a job must match (each: one of the list; empty: any).

    A job queued before partitions existed is in the implicit partition, as squeue shows
    it; a job with no node (pending) matches no node list, and a job across nodes
    matches a list naming any of its nodes."""

    names: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.names or self.partitions or self.nodes)

    def keeps(self, job: Job) -> bool:
        """Whether `job` passes every list given."""
        partition = job.spec.partition or IMPLICIT_PARTITION
        return (
            (not self.names or job.spec.name in self.names)
            and (not self.partitions or partition in self.partitions)
            and (not self.nodes or on_any(job, self.nodes))
        )


def on_any(job: Job, nodes: Collection[str]) -> bool:
    """Whether `job` holds any of `nodes` (its first node or a peer: scancel and squeue -w)."""
    if job.node is None:
        return False
    return job.node in nodes or any(name in nodes for name, _ in job.peers)
