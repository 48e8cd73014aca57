"""The daemon's loop with a job across nodes (issue 32): a pending 2-node job at the top
of the queue is not starved by a stream of 1-GPU jobs. Its reservation spans both
nodes, short jobs backfill where they end before it, long ones wait, and it starts on
both nodes at once when the GPUs it waits for come free. The loop over a real store,
its nodes faked (test_daemon_planner's Side), as the planner is driven by the daemon."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from test_daemon_planner import GPUS, T0, Side

from gbatch.core.model import Job, JobSpec, JobState, on_node
from gbatch.core.plan import NodeView


class NodesSide(Side):
    """Side, with the jobs across nodes counted on every node they hold, and their
    other nodes recorded at dispatch (as the dispatcher's intent records them)."""

    def node_view(
        self,
        node: str,
        allocated: Sequence[Job],
        drained: object,
        *,
        check_engine: bool = False,
        now: float = 0.0,
    ) -> NodeView:
        mine = on_node(allocated, node)
        held = {g for job in mine for g in job.gpus}
        return NodeView(
            name=node,
            gpus_total=GPUS,
            free_gpus=tuple(g for g in range(GPUS) if g not in held),
            releases=tuple(
                ((job.start_time or now) + (job.spec.time_limit or 0), len(job.gpus))
                for job in mine
                if job.gpus and job.spec.time_limit
            ),
            partitions=frozenset({"gpu"}),
            busy=bool(mine),
        )

    def dispatch(self, starts: Sequence[tuple[Job, str, Sequence[int]]], now: float) -> None:
        for job, node, gpus in starts:
            self.started.append((job.id, node, tuple(gpus)))
            self.store.set_state(
                job.id,
                JobState.CONFIGURING,
                "",
                now,
                node=node,
                gpus=tuple(gpus),
                peers=job.peers,
            )
            self.store.set_state(job.id, JobState.RUNNING, "", now, start_time=now)


def spec(gpus: int, limit: int, nodes: int = 1) -> JobSpec:
    return JobSpec(
        name="j", command=("true",), gpus=gpus, nodes=nodes, time_limit=limit, partition="gpu"
    )


@pytest.mark.parametrize("incremental", [True, False])
def test_a_pending_job_across_nodes_is_not_starved_by_a_stream_of_one_gpu_jobs(
    tmp_path: Path, incremental: bool
) -> None:
    side = NodesSide(tmp_path, incremental)
    store = side.store
    try:
        # n1 half taken for 10 minutes; then alice's job asks both nodes whole.
        store.submit([spec(2, 600)], 1001, "bob", T0)
        side.schedule(T0)
        (big,) = store.submit([spec(GPUS, 3600, nodes=2)], 1000, "alice", T0)
        now = T0
        started_small: list[tuple[float, int]] = []  # (when, time limit)
        while store.require(big).state is JobState.PENDING:
            assert now <= T0 + 600, "the job across nodes is late"
            # A stream of carol's 1-GPU jobs, one short and one long each minute.
            store.submit([spec(1, 30), spec(1, 3600)], 1002, "carol", now)
            for job in store.jobs_in({JobState.RUNNING}):  # runs end at their limits
                if job.start_time is not None and job.start_time + job.spec.time_limit <= now:
                    store.set_state(job.id, JobState.COMPLETED, "", now, end_time=now)
            before = {job_id for job_id, _, _ in side.started}
            side.schedule(now)
            for job_id, _, _ in side.started:
                if job_id not in before and job_id != big:
                    started_small.append((now, store.require(job_id).spec.time_limit or 0))
            if store.require(big).state is JobState.PENDING:
                assert store.require(big).reason == "Resources"
                assert side.daemon.expected_starts.get(big) == T0 + 600
            now += 60
        ran = store.require(big)
        assert ran.start_time == T0 + 600  # when bob's job ended: not a minute later
        assert {ran.node, *dict(ran.peers)} == {"n1", "n2"}
        assert [gpus for _, gpus in ran.placements] == [tuple(range(GPUS))] * 2
        # Short jobs backfilled meanwhile; none that would have outlived the reservation.
        assert started_small and all(when + limit <= T0 + 600 for when, limit in started_small)
    finally:
        side.close()


def test_test_only_names_every_node_a_job_across_nodes_would_start_on(tmp_path: Path) -> None:
    """sbatch --test-only of a 2-node job prints Slurm's `on nodes n[1-2]`, not one node."""
    side = NodesSide(tmp_path, incremental=True)
    try:
        probe = Job(0, 1000, "carol", spec(GPUS, 60, nodes=2), JobState.PENDING, T0)
        start, nodes, gpus, reason = side.daemon.would_start(probe, T0)
        assert (start, nodes, gpus, reason) == (T0, "n[1-2]", tuple(range(GPUS)), "")
    finally:
        side.close()
