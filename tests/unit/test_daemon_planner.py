"""The daemon's loop pass through the incremental Planner does what the full plan()
path does, tick after tick, over a real store and random operations: submits (with
--begin, dependencies, priorities, time limits), holds and releases, cancels, priority
updates, run ends, nodes going down and back (many reasons rewritten at once), daemon
restarts and the clock. Same starts, same reason on every job, same expected starts
(squeue --start).

The incremental side also reads its window through the store's change feed
(Store.read_window), the full side reads it whole every pass; the window is cut to a
few jobs per user so that jobs leave full windows (start, cancel, hold, a lower
priority) and others come in from the store in their place. After every pass the
feed's window is what a whole read gives, with the reasons the loop wrote (which the
window keeps rather than reads back). A restart is a new daemon's loop state (window
and planner): its first read is spread over passes of a few rows each, as a restarted
daemon's over a long queue, which start nothing and write no reason until the window
is whole; the pass that completes it plans as the full side does."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gbatch.core.model import IllegalTransition, Job, JobSpec, JobState
from gbatch.core.plan import NodeView, Plan
from gbatch.head.daemon import Daemon
from gbatch.head.scheduler import Planner
from gbatch.head.store import RunnableWindow, Store, planning_job
from gbatch.site.config import Config, Paths

NODES = ("n1", "n2")
GPUS = 4
USERS = ("alice", "bob", "carol")
T0 = 1_700_000_000.0
WINDOW = 3  # each user's first jobs planned (the daemon's PLAN_JOBS_PER_USER)
ROWS_PER_READ = 2  # a first read's rows per pass (the daemon's WINDOW_ROWS_PER_PASS)
REASONS_PER_PASS = 2  # the reasons a pass writes (the daemon's REASONS_PER_PASS)
READ_ALONE_ROWS = 2  # a pass reading more changes plans at the next (READ_ALONE_ROWS)


class Side:
    """A daemon over its own store, its nodes faked (three up nodes of 4 GPUs, what
    its allocated jobs leave free) and its starts recorded and applied at once."""

    def __init__(
        self, home: Path, incremental: bool, rows_per_read: int | None = ROWS_PER_READ
    ) -> None:
        paths = Paths(home)
        self.store = Store(paths.store)
        self.daemon = Daemon(paths, Config(simulate_gpus=0), self.store)
        rows = rows_per_read if incremental else None
        self.daemon.scheduling.window = RunnableWindow(WINDOW, rows)
        self.incremental = incremental
        if not incremental:
            self.daemon.scheduling.planner = None
        self.daemon.fleet.nodes = {name: name for name in NODES}  # type: ignore[misc]
        self.daemon.fleet.node_view = self.node_view  # type: ignore[method-assign]
        self.daemon.dispatch = self.dispatch  # type: ignore[method-assign]
        self.started: list[tuple[int, str, tuple[int, ...]]] = []
        self.down: set[str] = set()  # nodes down: their jobs' reasons change en masse
        # The plan's reasons (those written with the window) a pass gave the store.
        self.planned_writes = 0
        write = self.store.set_pending_reasons

        def counted(reasons: Mapping[int, str], window: RunnableWindow | None = None) -> None:
            if window is not None:
                self.planned_writes += len(reasons)
            write(reasons, window)

        self.store.set_pending_reasons = counted  # type: ignore[method-assign]

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
            available=node not in self.down,
        )

    def dispatch(self, starts: Sequence[tuple[Job, str, Sequence[int]]], now: float) -> None:
        for job, node, gpus in starts:
            self.started.append((job.id, node, tuple(gpus)))
            self.store.set_state(job.id, JobState.CONFIGURING, "", now, node=node, gpus=tuple(gpus))
            self.store.set_state(job.id, JobState.RUNNING, "", now, start_time=now)

    def schedule(self, now: float, plans: int = 1) -> int:
        """The loop's passes at `now` until it caught up, as the loop runs them at once;
        the full side plans `plans` times (as many as the other's). How many planned."""
        if not self.incremental:
            for _ in range(plans):
                self.daemon.scheduling.window.seen = None  # a whole read, as a restarted daemon's
                self.daemon.schedule(now)
            return plans
        # A spread first read: passes that start nothing and write nothing, until the
        # one after that which completes the window. Then, while reasons are owed, each
        # pass writes at most the bound of them.
        planned = 0
        while True:
            before = (list(self.started), self.seen())
            self.planned_writes = 0
            self.daemon.schedule(now)
            if self.daemon.scheduling.unread:
                assert (self.started, self.seen()) == before
            else:
                planned += 1
                bound = self.daemon.scheduling.reasons_per_pass
                assert bound is None or self.planned_writes <= bound
            if self.daemon.caught_up:
                return planned

    def restart(self) -> None:
        """A new daemon's loop state over the same store: its window, read anew over
        passes, and its planner, given the reasons the rows show."""
        self.daemon.scheduling.window = RunnableWindow(WINDOW, ROWS_PER_READ)
        self.daemon.scheduling.planner, self.daemon.scheduling.planned = Planner(), {}
        self.daemon.scheduling.plan_all = True

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
    "node",
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
        elif kind == "restart":  # and a run ended meanwhile: its first pass has GPUs
            if side.incremental:
                side.restart()
            if job.state is JobState.RUNNING:
                store.set_state(job.id, JobState.COMPLETED, "", now, end_time=now)
        elif kind == "node":  # a node goes down or comes back: many reasons rewritten
            side.down ^= {NODES[amount % len(NODES)]}
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
        full.daemon.scheduling.reasons_per_pass = None
        full.daemon.scheduling.read_alone_rows = None
        incremental.daemon.scheduling.reasons_per_pass = REASONS_PER_PASS
        incremental.daemon.scheduling.read_alone_rows = READ_ALONE_ROWS
        try:
            now = T0
            for op in ops:
                if op[0] == "clock":
                    now += 20.0
                for side in sides:
                    apply(side, op, now)
                full.schedule(now, incremental.schedule(now))
                assert incremental.started == full.started
                assert incremental.seen() == full.seen()
                assert incremental.daemon.expected_starts == full.daemon.expected_starts
                store = incremental.store
                window = incremental.daemon.scheduling.window
                # The window's Jobs as read (over reads of the rows written since, as
                # many a read), with the reasons the loop wrote since.
                store.update_window(window)
                while window.behind:
                    store.update_window(window)
                read = [replace(job, reason=window.reason(job)) for job in window.jobs()]
                assert read == [planning_job(job) for job in store.runnable_jobs(per_user=WINDOW)]
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

        def full(reasons: object, window: object = None) -> None:
            raise OSError("disk full")

        store.set_pending_reasons = full  # type: ignore[method-assign]
        with pytest.raises(OSError):
            for _ in range(5):  # the first read's passes (spread), then the one that plans
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


def busy_nodes(side: Side) -> None:
    """Both nodes taken by bob's jobs (one hour each), through a pass."""
    big = JobSpec(name="busy", command=("true",), gpus=GPUS, time_limit=3600)
    side.store.submit([big] * len(NODES), 1001, "bob", T0)
    side.daemon.schedule(T0)
    assert len(side.started) == len(NODES)


def test_the_reasons_a_pass_writes_are_not_read_back_by_the_next(tmp_path: Path) -> None:
    """The window keeps the reasons the loop wrote: its next read reads none of those
    rows again (no new Jobs, nothing put in the planner), and has the rows' reasons."""
    side = Side(tmp_path, incremental=True)
    try:
        store, window = side.store, side.daemon.scheduling.window
        busy_nodes(side)
        big = JobSpec(name="big", command=("true",), gpus=GPUS, time_limit=60)
        ids = store.submit([big] * WINDOW, 1000, "alice", T0)
        side.schedule(T0)  # read over passes of ROWS_PER_READ, then planned
        assert {store.require(i).reason for i in ids} == {"Resources", "Priority"}
        held = {job.id: job for job in window.jobs()}
        assert store.read_window(window) == sorted(held.values(), key=lambda job: job.id)
        assert window.take_changes() == {}
        for job in store.read_window(window):
            assert job is held[job.id]
            assert window.reason(job) == store.require(job.id).reason
        side.daemon.schedule(T0)
        assert window.take_changes() == {}
    finally:
        side.close()


def test_a_write_between_the_windows_read_and_the_loops_reasons_is_read(
    tmp_path: Path,
) -> None:
    """Another writer's change that lands after the pass read its window and before its
    reasons are written (a hold, from a request) is read into the window all the same."""
    side = Side(tmp_path, incremental=True, rows_per_read=None)  # one pass reads them all
    try:
        store, window = side.store, side.daemon.scheduling.window
        busy_nodes(side)
        big = JobSpec(name="big", command=("true",), gpus=GPUS, time_limit=60)
        ids = store.submit([big] * WINDOW, 1000, "alice", T0)
        planner = side.daemon.scheduling.planner
        assert planner is not None
        plan = planner.plan

        def plan_then_hold(*args: object, **kwargs: object) -> object:
            result = plan(*args, **kwargs)  # type: ignore[arg-type]
            store.set_held(ids[1], True, T0)
            return result

        planner.plan = plan_then_hold  # type: ignore[method-assign]
        side.daemon.schedule(T0)
        read = [replace(job, reason=window.reason(job)) for job in store.read_window(window)]
        assert ids[1] not in {job.id for job in read}
        assert read == [planning_job(job) for job in store.runnable_jobs(per_user=WINDOW)]
        # and the plan's reason, read before the hold, is not written over the hold's
        assert store.require(ids[1]).reason == "JobHeldUser"
    finally:
        side.close()


def test_test_only_plans_behind_the_queue_as_stored_now(tmp_path: Path) -> None:
    """sbatch --test-only (Daemon.would_start) plans the job behind every runnable job
    stored, a job submitted since the loop's last pass included."""
    side = Side(tmp_path, incremental=True)
    try:
        store = side.store
        big = JobSpec(name="big", command=("true",), gpus=GPUS, time_limit=60)
        store.submit([big], 1001, "bob", T0)
        side.daemon.schedule(T0)  # bob's job takes one node
        probe = Job(0, 1000, "carol", big, JobState.PENDING, T0 + 1)
        assert side.daemon.would_start(probe, T0 + 1)[:2] == (T0 + 1, "n2")
        store.submit([big], 1000, "alice", T0 + 1)  # the loop has not seen it yet
        later = replace(probe, submit_time=T0 + 2)
        start, node, gpus, reason = side.daemon.would_start(later, T0 + 2)
        assert (start, node, gpus) == (None, None, ())
        assert reason in ("Resources", "Priority")
    finally:
        side.close()


def test_a_spread_first_read_plans_nothing_and_wakes_the_loop_until_it_is_whole(
    tmp_path: Path,
) -> None:
    """A restarted daemon's first read over more rows than a pass reads: each pass until
    the window is whole starts nothing and writes no reason, and wakes the loop for the
    next; the pass after the one that completes it plans."""
    side = Side(tmp_path, incremental=True)
    try:
        store, daemon = side.store, side.daemon
        small = JobSpec(name="small", command=("true",), gpus=1, time_limit=60)
        for user in USERS:
            store.submit([small] * WINDOW, 1000, user, T0)
        daemon.wake.clear()
        daemon.schedule(T0)
        assert not daemon.scheduling.window.complete
        assert daemon.wake.is_set()
        assert side.started == [] and {job.reason for job in store.jobs()} == {""}
        passes = 1
        while not daemon.scheduling.window.complete:
            daemon.wake.clear()
            daemon.schedule(T0)
            passes += 1
        assert passes == len(USERS)  # a user's 3 rows a pass: over the 2 it may read
        assert daemon.wake.is_set()  # its plan comes at the next pass
        assert side.started == [] and {job.reason for job in store.jobs()} == {""}
        daemon.wake.clear()
        daemon.schedule(T0)
        assert len(side.started) == len(NODES) * GPUS
        assert not daemon.wake.is_set()
    finally:
        side.close()


def test_a_restart_over_reasons_already_written_writes_none(tmp_path: Path) -> None:
    """A restarted daemon over a queue whose reasons the last one wrote, nothing changed
    meanwhile: its planner, given the rows' reasons, reports none, and none is written."""
    side = Side(tmp_path, incremental=True)
    try:
        store = side.store
        busy_nodes(side)
        big = JobSpec(name="big", command=("true",), gpus=GPUS, time_limit=60)
        for user in USERS:
            store.submit([big] * WINDOW, 1000, user, T0)
        side.schedule(T0)
        before = side.seen()
        assert {reason for _, state, reason, _ in before if state == "PENDING"} == {
            "Resources",
            "Priority",
        }
        side.restart()
        written: list[dict[int, str]] = []
        write = store.set_pending_reasons

        def recorded(reasons: dict[int, str], window: object = None) -> None:
            if reasons:
                written.append(dict(reasons))
            write(reasons, window)  # type: ignore[arg-type]

        store.set_pending_reasons = recorded  # type: ignore[method-assign,assignment]
        planner = side.daemon.scheduling.planner
        assert planner is not None
        plan = planner.plan
        reported: list[dict[int, str]] = []

        def told(*args: object, **kwargs: object) -> Plan:
            result = plan(*args, **kwargs)  # type: ignore[arg-type]
            reported.append(dict(result.reasons))
            return result

        planner.plan = told  # type: ignore[method-assign]
        side.schedule(T0)
        assert written == [] and side.seen() == before
        assert reported == [{}]  # one plan, at the pass that completed the read
        assert side.daemon.expected_starts  # it planned: the reservation is there
    finally:
        side.close()


def test_a_plan_of_more_reasons_than_a_pass_writes_writes_them_over_the_next_passes(
    tmp_path: Path,
) -> None:
    """A fresh store's first plan, more reasons than the bound: the first pass writes the
    bound's worth, the lowest job ids first, and wakes the loop; the next passes write
    the rest, and each job ends with the reason one unbounded pass gives it."""
    sides = [Side(tmp_path / "bounded", True, None), Side(tmp_path / "whole", True, None)]
    bounded, whole = sides
    bounded.daemon.scheduling.reasons_per_pass = 2
    whole.daemon.scheduling.reasons_per_pass = None
    try:
        big = JobSpec(name="big", command=("true",), gpus=GPUS, time_limit=60)
        for side in sides:
            busy_nodes(side)
            for user in USERS:
                side.store.submit([big] * WINDOW, 1000, user, T0)
        whole.daemon.schedule(T0)
        assert whole.daemon.caught_up
        expected = whole.seen()
        waiting = [job_id for job_id, state, _, _ in expected if state == "PENDING"]
        daemon = bounded.daemon
        daemon.wake.clear()
        daemon.schedule(T0)
        told = [job_id for job_id, _, reason, _ in bounded.seen() if job_id in waiting and reason]
        assert told == waiting[:2]
        assert daemon.wake.is_set() and not daemon.caught_up
        passes = 1
        while not daemon.caught_up:
            daemon.wake.clear()
            daemon.schedule(T0)
            passes += 1
        assert passes == -(-len(waiting) // 2)
        assert not daemon.wake.is_set()
        assert bounded.seen() == expected
        assert bounded.started == whole.started
    finally:
        for side in sides:
            side.close()


def test_an_owed_reason_of_a_job_changed_meanwhile_is_not_written(tmp_path: Path) -> None:
    """A job held, or given another reason, while the loop still owes it a reason: the
    owed one is not written over the hold's, and the next plan tells the new reason."""
    side = Side(tmp_path, incremental=True, rows_per_read=None)  # a pass reads them all
    side.daemon.scheduling.reasons_per_pass = 1
    try:
        store, daemon = side.store, side.daemon
        busy_nodes(side)
        big = JobSpec(name="big", command=("true",), gpus=GPUS, time_limit=60)
        held, stale, other = store.submit([big] * 3, 1000, "alice", T0)
        daemon.schedule(T0)  # writes `held`'s, owes the others
        assert store.require(held).reason != "" and store.require(stale).reason == ""
        store.set_held(stale, True, T0)
        daemon.schedule(T0)
        assert store.require(stale).reason == "JobHeldUser"
        store.set_held(stale, False, T0)
        daemon.schedule(T0)
        while not daemon.caught_up:
            daemon.schedule(T0)
        assert store.require(stale).reason == store.require(other).reason == "Priority"
    finally:
        side.close()


def test_a_pass_that_read_many_rows_plans_them_at_the_next_which_reads_none(
    tmp_path: Path,
) -> None:
    """A pass whose read brings more changed rows than `read_alone_rows` (the last of a
    newcomer's burst) starts nothing, writes no reason and wakes the loop; the next pass
    plans them without reading the jobs submitted since (so a flood never keeps the loop
    from planning) and wakes the loop again; the pass after reads and plans those."""
    side = Side(tmp_path, incremental=True)
    try:
        store, daemon = side.store, side.daemon
        daemon.scheduling.window = RunnableWindow(WINDOW, rows_per_read=100)
        daemon.scheduling.read_alone_rows = 2
        small = JobSpec(name="small", command=("true",), gpus=1, time_limit=60)
        store.submit([small], 1000, "alice", T0)
        daemon.schedule(T0)  # a first read plans at once
        assert len(side.started) == 1 and daemon.caught_up
        bob = store.submit([small] * 3, 1000, "bob", T0)
        daemon.wake.clear()
        daemon.schedule(T0)
        assert daemon.wake.is_set() and not daemon.caught_up
        assert len(side.started) == 1
        assert {job.reason for job in store.jobs() if job.state is JobState.PENDING} == {""}
        carol = store.submit([small] * 3, 1000, "carol", T0)  # as many again
        daemon.wake.clear()
        daemon.schedule(T0)
        assert sorted(job_id for job_id, _, _ in side.started[1:]) == bob
        assert daemon.wake.is_set() and not daemon.caught_up
        daemon.wake.clear()
        daemon.schedule(T0)  # carol's: many again, so planned at the next
        daemon.schedule(T0)
        assert sorted(job_id for job_id, _, _ in side.started[4:]) == carol
        for _ in range(3):  # the starts read back (3 rows: many again), then caught up
            daemon.wake.clear()
            daemon.schedule(T0)
            if daemon.caught_up:
                break
        assert daemon.caught_up and not daemon.wake.is_set() and len(side.started) == 7
    finally:
        side.close()


def test_a_read_of_the_change_feed_left_behind_plans_nothing_until_it_ends(
    tmp_path: Path,
) -> None:
    """A burst of one transaction's rows past what a pass reads (the window's
    rows_per_read) is read over passes that start nothing and write no reason, each
    waking the loop; the pass that reads the last of it plans it whole."""
    side = Side(tmp_path, incremental=True, rows_per_read=1)
    try:
        store, daemon = side.store, side.daemon
        daemon.scheduling.read_alone_rows = None
        small = JobSpec(name="small", command=("true",), gpus=1, time_limit=60)
        daemon.schedule(T0)  # a first read, of nothing
        burst = store.submit([small] * WINDOW, 1000, "bob", T0)
        for _ in range(2):
            daemon.wake.clear()
            daemon.schedule(T0)
            assert daemon.scheduling.window.behind and daemon.wake.is_set() and not daemon.caught_up
            assert side.started == []
        daemon.wake.clear()
        daemon.schedule(T0)
        assert not daemon.scheduling.window.behind and daemon.caught_up
        assert sorted(job_id for job_id, _, _ in side.started) == burst
    finally:
        side.close()


def test_a_flood_of_submits_never_keeps_the_loop_from_planning(tmp_path: Path) -> None:
    """Submits before every pass, more than `read_alone_rows` each time and more than a
    pass reads (rows_per_read) in two passes' worth: the loop still plans at least
    every other pass, and once the flood stops it catches up and has planned them all."""
    side = Side(tmp_path, incremental=True, rows_per_read=4)
    try:
        store, daemon = side.store, side.daemon
        daemon.scheduling.read_alone_rows = 2
        busy_nodes(side)  # nothing starts: a pass that plans writes the reasons
        small = JobSpec(name="small", command=("true",), gpus=1, time_limit=60)
        planned = []
        for n in range(30):
            store.submit([small] * 3, 1000 + n, f"user{n}", T0)
            daemon.schedule(T0)
            planned.append(not daemon.scheduling.unread)
        assert all(any(planned[n : n + 2]) for n in range(len(planned) - 1)), planned
        for _ in range(10):
            daemon.schedule(T0)
            if daemon.caught_up:
                break
        assert daemon.caught_up
        waiting = [job for job in store.jobs() if job.state is JobState.PENDING]
        assert len(waiting) == 90 and all(job.reason for job in waiting)
    finally:
        side.close()


def test_an_owed_reason_of_a_job_planned_again_from_its_row_is_dropped(
    tmp_path: Path,
) -> None:
    """A job still owed a reason whose row changes (a priority update) is planned again
    from its row: where the new plan gives the reason the row shows, the older owed one
    is not written."""
    side = Side(tmp_path, incremental=True)
    try:
        store, daemon = side.store, side.daemon
        busy_nodes(side)
        big = JobSpec(name="big", command=("true",), gpus=GPUS, time_limit=60)
        ids = store.submit([big] * 3, 1000, "alice", T0)
        side.schedule(T0)
        shown = {job_id: store.require(job_id).reason for job_id in ids}
        assert shown[ids[2]] == "Priority"
        daemon.scheduling.reasons_per_pass = 1
        side.down = set(NODES)  # every reason changes: one written, two owed
        daemon.schedule(T0)
        assert not daemon.caught_up and store.require(ids[2]).reason == "Priority"
        side.down = set()
        last = store.require(ids[2])
        store.update_spec(
            last.id, last.spec, replace(last.spec, priority=-1), {JobState.PENDING}, "u", T0
        )
        side.schedule(T0)
        assert {job_id: store.require(job_id).reason for job_id in ids} == shown
    finally:
        side.close()


def test_the_loops_window_keeps_what_a_job_asks_of_gpu_types_and_nodes(tmp_path: Path) -> None:
    """The planner reads the window's planning specs: a GPU type or a constraint left
    out of them was planned as any GPU on any node (issue 30)."""
    store = Store(Paths(tmp_path).store)
    try:
        spec = JobSpec(name="t", command=("true",), gpus=1, gpu_type="a100", constraint="nvlink|ib")
        store.submit([spec], 1000, "alice", T0)
        window = RunnableWindow(WINDOW, None)
        store.update_window(window)
        (read,) = window.jobs()
        assert (read.spec.gpu_type, read.spec.constraint) == ("a100", "nvlink|ib")
        (whole,) = store.runnable_jobs(per_user=WINDOW)
        assert planning_job(whole).spec == read.spec
    finally:
        store.close()
