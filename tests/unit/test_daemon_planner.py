"""The daemon's loop pass through the incremental Planner does what the full plan()
path does, tick after tick, over a real store and random operations: submits (with
--begin, dependencies, priorities, time limits), holds and releases, cancels, priority
updates, run ends, daemon restarts and the clock. Same starts, same reason on every
job, same expected starts (squeue --start).

The incremental side also reads its window through the store's change feed
(Store.read_window), the full side reads it whole every pass; the window is cut to a
few jobs per user so that jobs leave full windows (start, cancel, hold, a lower
priority) and others come in from the store in their place. After every pass the
feed's window is what a whole read gives."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gbatch.config import Config, Paths
from gbatch.head.daemon import Daemon
from gbatch.head.store import RunnableWindow, Store
from gbatch.model import IllegalTransition, Job, JobSpec, JobState, NodeView

NODES = ("n1", "n2")
GPUS = 4
USERS = ("alice", "bob", "carol")
T0 = 1_700_000_000.0
WINDOW = 3  # each user's first jobs planned (the daemon's PLAN_JOBS_PER_USER)


class Side:
    """A daemon over its own store, its nodes faked (three up nodes of 4 GPUs, what
    its allocated jobs leave free) and its starts recorded and applied at once."""

    def __init__(self, home: Path, incremental: bool) -> None:
        paths = Paths(home)
        self.store = Store(paths.store)
        self.daemon = Daemon(paths, Config(simulate_gpus=0), self.store)
        self.daemon._window = RunnableWindow(WINDOW)
        self.incremental = incremental
        if not incremental:
            self.daemon.planner = None
        self.daemon.fleet.nodes = {name: name for name in NODES}  # type: ignore[misc]
        self.daemon.fleet.node_view = self.node_view  # type: ignore[method-assign]
        self.daemon.dispatch = self.dispatch  # type: ignore[method-assign]
        self.started: list[tuple[int, str, tuple[int, ...]]] = []

    def node_view(
        self,
        node: str,
        allocated: Sequence[Job],
        drained: object,
        *,
        check_engine: bool = False,
        now: float = 0.0,
    ) -> NodeView:
        mine = [job for job in allocated if job.node == node]
        held = {g for job in mine for g in job.gpus}
        return NodeView(
            name=node,
            gpus_total=GPUS,
            free_gpus=tuple(g for g in range(GPUS) if g not in held),
            releases=tuple(
                ((job.start_time or now) + job.spec.time_limit, len(job.gpus))
                if job.spec.time_limit
                else (float("inf"), len(job.gpus))
                for job in mine
                if job.gpus
            ),
            partitions=frozenset({"gpu"}),
        )

    def dispatch(self, starts: Sequence[tuple[Job, str, Sequence[int]]], now: float) -> None:
        for job, node, gpus in starts:
            self.started.append((job.id, node, tuple(gpus)))
            self.store.set_state(job.id, JobState.CONFIGURING, "", now, node=node, gpus=tuple(gpus))
            self.store.set_state(job.id, JobState.RUNNING, "", now, start_time=now)

    def schedule(self, now: float) -> None:
        if not self.incremental:  # a whole read, as a restarted daemon's first pass
            self.daemon._window.seen = None
        self.daemon.schedule(now)

    def restart(self) -> None:
        """A new daemon's loop state over the same store: its first read reads all."""
        self.daemon._window = RunnableWindow(WINDOW)

    def seen(self) -> list[tuple[int, str, str, bool]]:
        return [(j.id, j.state.value, j.reason, j.held) for j in self.store.jobs()]

    def close(self) -> None:
        self.daemon.committer.close()
        self.store.close()


KINDS = (
    "submit",
    "submit",
    "hold",
    "release",
    "cancel",
    "end",
    "priority",
    "priority",
    "reason",
    "clock",
    "restart",
)


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[object, ...]]:
    ops: list[tuple[object, ...]] = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(KINDS))
        if kind == "submit":
            ops.append(
                (
                    kind,
                    draw(st.sampled_from(USERS)),
                    draw(st.lists(st.integers(0, 5), min_size=1, max_size=6)),
                    draw(st.sampled_from((None, 60, 3600))),
                    draw(st.sampled_from((0, 0, 10))),
                    draw(st.sampled_from((None, None, -5.0, 30.0))),
                    draw(st.sampled_from((None, None, 1, 2, 5))),
                )
            )
        else:
            ops.append((kind, draw(st.integers(0, 40)), draw(st.integers(-5, 5))))
    return ops


def apply(side: Side, op: tuple[object, ...], now: float) -> None:
    store = side.store
    kind = op[0]
    if kind == "submit":
        _, user, gpu_counts, limit, priority, begin, depends = op
        assert isinstance(user, str) and isinstance(gpu_counts, list)
        specs = [
            JobSpec(
                name=f"j{gpus}",
                command=("true",),
                gpus=gpus,
                time_limit=limit,  # type: ignore[arg-type]
                priority=priority,  # type: ignore[arg-type]
                begin=None if begin is None else now + begin,  # type: ignore[operator]
                dependency=None if depends is None else f"afterok:{depends}",
            )
            for gpus in gpu_counts
        ]
        store.submit(specs, 1000, user, now)
        return
    index, amount = op[1], op[2]
    jobs = store.jobs()
    if not jobs:
        return
    assert isinstance(index, int) and isinstance(amount, int)
    job = jobs[index % len(jobs)]
    try:
        if kind in ("hold", "release"):
            store.set_held(job.id, kind == "hold", now)
        elif kind == "cancel" and job.state is JobState.PENDING:
            store.cancel_pending([job.id], "cancelled", now)
        elif kind == "end" and job.state is JobState.RUNNING:
            state = JobState.COMPLETED if amount >= 0 else JobState.FAILED
            store.set_state(job.id, state, "", now, end_time=now)
        elif kind == "priority" and job.state is JobState.PENDING:
            new = replace(job.spec, priority=amount)
            store.update_spec(job.id, job.spec, new, {JobState.PENDING}, "update", now)
        elif kind == "restart" and side.incremental:
            side.restart()
        elif kind == "reason" and job.state is JobState.PENDING:
            # Another writer's reason (a stale one): the next pass must write its own.
            store.set_pending_reasons({job.id: "Stale"})
    except IllegalTransition:
        pass


@settings(max_examples=150, deadline=None)
@given(operations())
def test_the_loop_through_the_planner_does_what_the_full_plan_does(
    ops: list[tuple[object, ...]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sides = [Side(Path(tmp) / "full", False), Side(Path(tmp) / "incremental", True)]
        full, incremental = sides
        try:
            now = T0
            for op in ops:
                if op[0] == "clock":
                    now += 20.0
                for side in sides:
                    apply(side, op, now)
                    side.schedule(now)
                assert incremental.started == full.started
                assert incremental.seen() == full.seen()
                assert incremental.daemon.expected_starts == full.daemon.expected_starts
                store = incremental.store
                window = incremental.daemon._window
                assert store.read_window(window) == store.runnable_jobs(per_user=WINDOW)
        finally:
            for side in sides:
                side.close()


def test_reasons_not_written_are_planned_again_at_the_next_pass(tmp_path: Path) -> None:
    """A pass whose reasons could not be written (the disk full, say): the next one
    writes them, though nothing changed in between."""
    side = Side(tmp_path, incremental=True)
    try:
        store = side.store
        ids = store.submit(
            [JobSpec(name="big", command=("true",), gpus=4, time_limit=60)] * 3, 1000, "alice", T0
        )
        write = store.set_pending_reasons

        def full(reasons: object) -> None:
            raise OSError("disk full")

        store.set_pending_reasons = full  # type: ignore[method-assign]
        with pytest.raises(OSError):
            side.daemon.schedule(T0)
        store.set_pending_reasons = write  # type: ignore[method-assign]
        side.daemon.schedule(T0)
        assert [store.require(i).reason for i in ids[2:]] == ["Resources"]
    finally:
        side.close()


def test_changes_a_failed_pass_read_are_planned_at_the_next(tmp_path: Path) -> None:
    """A pass that raised after reading the window's changes (a store read failing,
    say): the next one still gives them to the planner, though the feed has moved on."""
    side = Side(tmp_path, incremental=True)
    try:
        store = side.store
        big = JobSpec(name="big", command=("true",), gpus=4, time_limit=60)
        store.submit([big] * 2, 1000, "alice", T0)
        side.daemon.schedule(T0)
        side.daemon.schedule(T0)  # reads the reasons the first wrote
        (late,) = store.submit([big], 1000, "bob", T0)
        jobs_in = store.jobs_in

        def failing(states: object) -> object:
            raise OSError("read failed")

        store.jobs_in = failing  # type: ignore[method-assign]
        with pytest.raises(OSError):
            side.daemon.schedule(T0)
        store.jobs_in = jobs_in  # type: ignore[method-assign]
        side.daemon.schedule(T0)
        assert store.require(late).reason != ""
    finally:
        side.close()
