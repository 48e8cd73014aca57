"""`-p gpu,uni`: a job that may run on the lab or on a Slurm cluster runs where it starts first.

Such a job waits in the lab's partition (spec.partition) with the cluster's partition
beside it (spec.alternate), and the lab's planner plans it like any other: its limits,
fair share and QOS hold it back as they do any job. Each pass, after the plan:

- a job the plan starts runs on the lab (the dispatcher), and never goes to the cluster;
- a job that waits only for room (Resources, Priority, NodeDown) goes to the cluster
  when the cluster's estimate (`sbatch --test-only`, asked by the cluster step at most
  once per job per pass, kept ESTIMATE_SECONDS) is earlier than the lab's: the plan's
  reserved start for it, or for a job it waits behind (the latest reserved start; none
  known: never, here). Ties stay on the lab;
- a job held back by a limit, a hold, a dependency or a --begin stays (what holds it
  here would not hold it there).

Going is one store write (the job's partition becomes the cluster's, with its event),
after which the cluster step sends it; a lab start of the same job after that is
refused by the store (a job with an open cluster row never becomes CONFIGURING), so a
job never runs in both.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping

from gbatch.core.model import Job
from gbatch.head.loop.cluster import ClusterJobsStep
from gbatch.head.store import Store

# The planner's reasons for a job that waits only for room on the lab's nodes.
WAITING_FOR_ROOM = frozenset({"Resources", "Priority", "NodeDown"})


def starts_first_there(here: float, there: float | None) -> bool:
    """Whether a job the lab would start at `here` starts sooner on the cluster.

    `there`: the cluster's estimate, None when it would not take the job. Ties stay on
    the lab."""
    return there is not None and there < here


def _when(at: float) -> str:
    if math.isinf(at):
        return "not known here"
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(at))


class Router:
    """Sends the jobs of `-p gpu,uni` that the cluster starts first to the cluster."""

    def __init__(self, store: Store, clusters: ClusterJobsStep) -> None:
        self.store = store
        self.clusters = clusters

    def route(
        self,
        jobs: Iterable[Job],
        started: Collection[int],
        reason_of: Callable[[Job], str],
        starts: Mapping[int, float],
        now: float,
    ) -> list[int]:
        """Send to their cluster the `jobs` it starts first; the ids of those sent.

        `started`: the jobs the plan starts on the lab; `reason_of` a job's pending
        reason as the plan leaves it; `starts` the plan's reserved starts."""
        later_than = max(starts.values(), default=math.inf)
        moved = []
        full: set[str] = set()
        for job in jobs:
            cluster = job.spec.alternate
            lab = job.spec.partition
            if cluster is None or lab is None or job.id in started or job.held:
                continue
            if cluster in self.clusters.down or cluster in full:
                continue
            if reason_of(job) not in WAITING_FOR_ROOM:
                continue
            there = self.clusters.estimate(job, cluster, now)
            here = starts.get(job.id, later_than)
            if not starts_first_there(here, there):
                continue
            if not self.clusters.room(cluster):
                full.add(cluster)  # it would wait in gbatch for the cluster: stay
                continue
            assert there is not None
            reason = (
                f"routed to cluster {cluster}: it starts there first "
                f"(there {_when(there)}, here {_when(here)})"
            )
            if self.store.route_to_cluster(job.id, lab, cluster, reason, now):
                moved.append(job.id)
        if moved:
            self.clusters.poke()
        return moved
