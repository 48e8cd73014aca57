"""The incremental Planner gives what a full plan() gives, pass after pass, whatever
changed in between: submits, ends, cancels, holds, priorities, nodes, usage, limits;
with jobs of whole GPUs, of GPU types, of shares of one GPU and across nodes (-N, -w, -x,
--exclusive)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gbatch.core.limits import Use, UserLimits
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.plan import NodeView
from gbatch.core.qos import parse_qos
from gbatch.head import scheduler
from gbatch.head.scheduler import (
    PREEMPTION,
    PRIORITY,
    RESOURCES,
    Planner,
    Running,
    Window,
    plan,
    plan_reserved,
)

NOW = 1_700_000_000.0
USERS = ("alice", "bob", "carol")
GPUS = 4  # per node


def make_job(job_id: int, draw: st.DrawFn, simple: bool = False) -> Job:
    """A pending job; `simple`: of whole GPUs of any type on one node (those preemption
    takes), with more GPUs asked and QOS that preempt."""
    spec = JobSpec(
        name=f"j{job_id}",
        command=("true",),
        gpus=draw(st.sampled_from((0, 1, 1, 2, 3, 4, 5))),
        time_limit=draw(st.sampled_from((None, 60, 240, 3600))),
        priority=draw(st.sampled_from((0, 0, 10))),
        partition=draw(st.sampled_from((None, "a", "b"))),
        image=draw(st.sampled_from((None, None, "img"))),
        cpus=draw(st.sampled_from((None, None, 2, 16))),
        constraint=draw(st.sampled_from((None, None, None, "nvlink", "a100|ib"))),
        reservation=draw(st.sampled_from((None, None, None, None, "r1", "r2"))),
        qos=draw(st.sampled_from((None, None, "high", "scavenger"))),
    )
    if simple:
        spec = replace(spec, gpus=draw(st.integers(1, 4)), constraint=None)
        # Preemption takes jobs across nodes, typed and --exclusive ones too (q-pre2).
        spec = replace(
            spec,
            nodes=draw(st.sampled_from((1, 1, 1, 2))),
            gpu_type=draw(st.sampled_from((None, None, None, "a100"))),
            exclusive=draw(st.integers(0, 5)) == 0,
        )
    if spec.gpus and not simple:  # a type asks for GPUs of it
        spec = replace(spec, gpu_type=draw(st.sampled_from(ASKED)))
    if not simple and draw(st.booleans()):  # a share of one GPU (issue 30)
        share = draw(st.sampled_from((10 * 1024, 20 * 1024, 40 * 1024, 100 * 1024)))
        spec = replace(spec, gpus=1, gpu_mem_mb=share)
    if not simple and draw(st.booleans()):  # placed by node (issue 32): -N, -w, -x, ...
        names = st.sampled_from(tuple(f"n{i}" for i in range(5)))
        spec = replace(
            spec,
            nodes=draw(st.sampled_from((1, 1, 2, 3))),
            nodelist=tuple(sorted(draw(st.sets(names, max_size=2)))),
            exclude=tuple(sorted(draw(st.sets(names, max_size=1)))),
            exclusive=draw(st.booleans()) and draw(st.booleans()),
        )
    return Job(
        id=job_id,
        uid=1000,
        user=draw(st.sampled_from(USERS)),
        spec=spec,
        state=JobState.PENDING,
        submit_time=NOW - draw(st.integers(0, 5)),
        held=draw(st.booleans()) and draw(st.booleans()),
    )


LAYOUTS = ((), ("a100",) * GPUS, ("rtx3090", "rtx4090", "", "rtx4090"), ("a100", "", "", ""))
# A card in MIG mode after the GPUS whole ones (index GPUS, never handed out), and its
# slices' types (indices GPUS + 1 on): NodeView.gpu_types and free_slices alone hold them.
SLICES = ((), (), ("a100_1g.10gb",) * 3, ("a100_3g.40gb", "a100_1g.10gb", "h100_1g.10gb"))
ASKED = (None, None, "a100", "rtx4090", "1g.10gb", "a100_1g.10gb", "a100_3g.40gb")
ENDS = (NOW + 30, NOW + 600, NOW + 7200, float("inf"))


def draw_windows(draw: st.DrawFn) -> list[Window]:
    """Reservations (issue 33): none, or r1 (node n0 whole) and r2 (two GPUs of n1), each
    on now, to come or over."""
    times = ((NOW - 100, NOW + 500), (NOW + 300, NOW + 4000), (NOW - 900, NOW - 10))
    windows = []
    if draw(st.booleans()):
        start, end = draw(st.sampled_from(times))
        windows.append(Window("r1", start, end, maint=draw(st.booleans()), nodes=frozenset({"n0"})))
    if draw(st.booleans()):
        start, end = draw(st.sampled_from(times))
        windows.append(Window("r2", start, end, gpus=(("n1", (0, 1)),)))
    return windows


CARD_MIB = 81920


def make_node(
    index: int,
    draw: st.DrawFn,
    types: tuple[str, ...] | None = None,
    shareable: tuple[int, ...] | None = None,
    slices: tuple[str, ...] | None = None,
) -> NodeView:
    """A node of GPUS GPUs; `types` (one per GPU, "" for none) and `shareable` (the GPUs
    that take shares) drawn when None. A busy GPU held by shares (a shareable one, by
    chance) has room left for more, as Fleet.node_view gives it, and MIG
    slices of `slices`' types (drawn when None)."""
    if types is None:
        types = draw(st.sampled_from(LAYOUTS))
    if slices is None:
        slices = draw(st.sampled_from(SLICES))
    if shareable is None:
        shareable = tuple(sorted(draw(st.sets(st.integers(0, GPUS - 1)))))
    free = draw(st.sets(st.integers(0, GPUS - 1)))
    busy = [g for g in range(GPUS) if g not in free]
    ends = [draw(st.sampled_from(ENDS)) for _ in busy]
    releases = tuple((end, 1) for end in ends)
    room = []
    for g in shareable:
        if g in free:
            room.append((g, CARD_MIB, -float("inf")))
        elif draw(st.booleans()):  # held by shares, not by a job of whole GPUs
            left = draw(st.sampled_from((1024, 20 * 1024, 60 * 1024)))
            room.append((g, left, ends[busy.index(g)]))
    counted = draw(st.booleans())
    gpu_types = tuple((g, t) for g, t in enumerate(types) if t)
    sliced = range(GPUS + 1, GPUS + 1 + len(slices))
    gpu_types += tuple(zip(sliced, slices, strict=True))
    free_slices = tuple(sorted(draw(st.sets(st.sampled_from(tuple(sliced)))))) if slices else ()
    slice_ends = [(draw(st.sampled_from(ENDS)), g) for g in sliced if g not in free_slices]
    return NodeView(
        name=f"n{index}",
        gpus_total=GPUS,
        free_gpus=tuple(sorted(free)),
        available=draw(st.booleans()) or draw(st.booleans()),
        runs_containers=draw(st.booleans()) or draw(st.booleans()),
        releases=releases,
        partitions=frozenset(draw(st.sets(st.sampled_from(("a", "b"))))),
        cpus_total=8 if counted else None,
        free_cpus=draw(st.integers(0, 8)),
        gpu_types=gpu_types,
        features=frozenset(draw(st.sets(st.sampled_from(("nvlink", "ib")))))
        | set(dict(gpu_types).values()),
        typed_releases=tuple(
            (end, types[g], 1) for end, g in zip(ends, busy, strict=True) if types and types[g]
        )
        + tuple((end, slices[g - GPUS - 1], 1) for end, g in slice_ends),
        free_slices=free_slices,
        shareable=tuple((g, CARD_MIB) for g in shareable),
        share_room=tuple(room),
        busy=bool(busy) or draw(st.booleans()),
        whole=draw(st.booleans()) and draw(st.booleans()),
    )


@st.composite
def nodes_now(draw: st.DrawFn, statics: list[NodeView]) -> list[NodeView]:
    """The same nodes, with what is free on them drawn again (runs start and end)."""
    result = []
    for index, static in enumerate(statics):
        types = tuple(dict(static.gpu_types).get(g, "") for g in range(GPUS))
        slices = tuple(kind for g, kind in static.gpu_types if g > GPUS)
        shareable = tuple(g for g, _ in static.shareable)
        fresh = make_node(index, draw, types if static.gpu_types else (), shareable, slices)
        result.append(
            replace(
                static,
                free_gpus=fresh.free_gpus,
                releases=fresh.releases,
                free_cpus=fresh.free_cpus,
                typed_releases=fresh.typed_releases,
                free_slices=fresh.free_slices,
                share_room=fresh.share_room,
                busy=fresh.busy,
                whole=fresh.whole,
            )
        )
    return result


# Jobs of QOS high may preempt those of scavenger (requeued); jobs of partition b (tier
# 2) those of partition a (tier 1, requeue).
RULES = scheduler.PreemptRules(
    {"a": (1, "requeue", 60), "b": (2, "off", 60)},
    parse_qos({"high": {"preempt": ["scavenger"], "users": "ALL"}, "scavenger": {"users": "ALL"}}),
)
_RUNNING_IDS = iter(range(10_000_000, 20_000_000))


@st.composite
def running_on(draw: st.DrawFn, nodes: list[NodeView]) -> list[Running]:
    """Jobs on `nodes` as preemption sees them: some told to go already, some exempt;
    some with their GPU ids, across two nodes, holding shares or their nodes whole."""
    out = []
    for node in nodes:
        for _ in range(draw(st.integers(0, 3))):
            count = draw(st.integers(1, 2))
            where: tuple[tuple[str, tuple[int, ...]], ...] = ()
            if draw(st.booleans()):
                first = draw(st.integers(0, GPUS - count))
                where = ((node.name, tuple(range(first, first + count))),)
                other = draw(st.sampled_from(nodes))
                if other is not node and draw(st.booleans()):
                    where += ((other.name, (draw(st.integers(0, GPUS - 1)),)),)
            out.append(
                Running(
                    next(_RUNNING_IDS),
                    node.name,
                    count,
                    NOW - draw(st.integers(0, 3)) * 600,
                    draw(st.sampled_from((None, "a", "b"))),
                    draw(st.sampled_from((None, "high", "scavenger"))),
                    preempting=draw(st.booleans()) and draw(st.booleans()),
                    exempt_until=NOW + draw(st.sampled_from((-1, -1, 1000))),
                    placed=where,
                    share=bool(where) and draw(st.integers(0, 3)) == 0,
                    whole=bool(where) and draw(st.integers(0, 5)) == 0,
                )
            )
    return out


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_incremental_passes_equal_a_full_plan_over_random_changes(data: st.DataObject) -> None:
    _passes_equal_a_full_plan(data, simple=False)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_incremental_preemptions_equal_a_full_plans(data: st.DataObject) -> None:
    """Jobs preemption takes (whole GPUs, of one node or two, typed, --exclusive), its
    victims and reasons."""
    _passes_equal_a_full_plan(data, simple=True)


def _passes_equal_a_full_plan(data: st.DataObject, *, simple: bool) -> None:
    draw = data.draw
    planner = Planner()
    queue: dict[int, Job] = {}
    next_id = 1
    statics = [make_node(i, draw) for i in range(draw(st.integers(0, 3)))]
    next_node = len(statics)
    usage: dict[str, float] = {}
    limits: dict[str, UserLimits] = {}
    use: dict[str, Use] = {}
    windows: list[Window] = []
    for _ in range(draw(st.integers(1, 8))):
        for _ in range(draw(st.integers(0, 6))):
            change = draw(
                st.sampled_from(
                    (
                        "submit",
                        "submit",
                        "end",
                        "hold",
                        "priority",
                        "node",
                        "usage",
                        "limits",
                        "windows",
                    )
                )
            )
            if change == "submit" or (change in ("end", "hold", "priority") and not queue):
                for _ in range(draw(st.integers(1, 6))):
                    queue[next_id] = make_job(next_id, draw, simple)
                    planner.put(queue[next_id])
                    next_id += 1
            elif change == "end":  # ended, cancelled: it leaves the queue
                gone = draw(st.sampled_from(sorted(queue)))
                del queue[gone]
                planner.discard(gone)
            elif change == "hold":
                job = queue[draw(st.sampled_from(sorted(queue)))]
                queue[job.id] = replace(job, held=not job.held)
                planner.put(queue[job.id])
            elif change == "priority":
                job = queue[draw(st.sampled_from(sorted(queue)))]
                spec = replace(job.spec, priority=draw(st.integers(-5, 20)))
                queue[job.id] = replace(job, spec=spec)
                planner.put(queue[job.id])
            elif change == "node":  # one joins, leaves, or goes down, up, elsewhere
                what = draw(st.sampled_from(("join", "leave", "redraw", "retype")))
                if what == "retype" and statics:  # its GPUs' models, its features
                    index = draw(st.integers(0, len(statics) - 1))
                    fresh = make_node(0, draw)
                    statics[index] = replace(
                        statics[index],
                        gpu_types=fresh.gpu_types,
                        features=fresh.features,
                        shareable=fresh.shareable,
                    )
                elif what == "join" or not statics:
                    statics.append(make_node(next_node, draw))
                    next_node += 1
                elif what == "leave":
                    statics.pop(draw(st.integers(0, len(statics) - 1)))
                else:
                    index = draw(st.integers(0, len(statics) - 1))
                    name = statics[index].name
                    statics[index] = replace(make_node(0, draw), name=name)
            elif change == "windows":
                windows = draw_windows(draw)
            elif change == "usage":
                usage = {u: draw(st.sampled_from((0.0, 10.0, 1e4))) for u in USERS}
            else:
                limits = {
                    u: UserLimits(max_running_jobs=draw(st.integers(0, 3)), max_gpus=4)
                    for u in USERS
                    if draw(st.booleans())
                }
                use = {u: Use(draw(st.integers(0, 2)), draw(st.integers(0, 4))) for u in limits}
        nodes = draw(nodes_now(statics))
        now = NOW + draw(st.integers(0, 100))
        running = draw(running_on(nodes))
        full = plan_reserved(
            list(queue.values()),
            nodes,
            usage,
            now,
            limits,
            use,
            windows,
            running=running,
            rules=RULES,
        )
        passed = planner.preempt(
            planner.plan(nodes, usage, now, limits, use, windows),
            nodes,
            running,
            now,
            RULES,
            windows,
        )
        assert passed.assignments == full.assignments
        assert passed.starts == full.starts
        assert passed.preemptions == full.preemptions
        shown = {**planner.reasons, **dict.fromkeys(planner._preempting, PREEMPTION)}
        assert shown == full.reasons
        # Started jobs leave the queue, but a failed start puts one back.
        for assignment in full.assignments:
            if draw(st.booleans()) or draw(st.booleans()):
                del queue[assignment.job_id]
                planner.discard(assignment.job_id)


def test_a_pass_reports_only_the_reasons_that_changed() -> None:
    planner = Planner()
    busy = NodeView("n0", 2, (), releases=((NOW + 60, 2),))
    jobs = [
        Job(i, 1000, "alice", JobSpec(name="j", command=("true",), gpus=2), JobState.PENDING, NOW)
        for i in range(1, 5)
    ]
    for job in jobs:
        planner.put(job)
    first = planner.plan([busy], {}, NOW)
    assert first.reasons == {1: "Resources", 2: PRIORITY, 3: PRIORITY, 4: PRIORITY}
    second = planner.plan([busy], {}, NOW + 1)
    assert second.reasons == {}
    assert planner.reasons == first.reasons
    planner.discard(1)
    third = planner.plan([busy], {}, NOW + 2)
    assert third.reasons == {2: "Resources"}
    assert third.starts == {2: NOW + 60}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_restarted_planner_given_the_rows_reasons_reports_only_those_that_differ(
    data: st.DataObject,
) -> None:
    """A restarted daemon's planner: its queue put over a few reads, each job with the
    reason its row shows (what the last daemon wrote, some stale), looked ahead at
    (presettle) with the nodes of the moment, the same or others, after each read.
    Its first pass gives plan()'s starts and reasons, and reports exactly the reasons
    that differ from the rows'."""
    draw = data.draw
    queue = {job_id: make_job(job_id, draw) for job_id in range(1, draw(st.integers(1, 40)))}
    statics = [make_node(i, draw) for i in range(draw(st.integers(0, 3)))]
    nodes = draw(nodes_now(statics))
    usage = {u: draw(st.sampled_from((0.0, 10.0, 1e4))) for u in USERS}
    limits = {
        u: UserLimits(max_running_jobs=draw(st.integers(0, 3)), max_gpus=4)
        for u in USERS
        if draw(st.booleans()) and draw(st.booleans())
    }
    windows = draw_windows(draw)  # a window on or to come: its reasons too
    full = plan_reserved(list(queue.values()), nodes, usage, NOW, limits, windows=windows)
    shown = {
        job_id: draw(
            st.sampled_from(
                (full.reasons.get(job_id, ""),) * 3 + ("", "Stale", PRIORITY, RESOURCES)
            )
        )
        for job_id in queue
    }
    planner = Planner()
    ids = list(queue)
    while ids:
        count = draw(st.integers(1, 15))
        read, ids = ids[:count], ids[count:]
        for job_id in read:
            planner.put(queue[job_id], shown[job_id])
        # The nodes as they were at that read: free GPUs drawn again, or others.
        if draw(st.booleans()):
            planner.presettle(draw(nodes_now(statics)))
        else:
            planner.presettle([make_node(i, draw) for i in range(draw(st.integers(0, 3)))])
    passed = planner.plan(nodes, usage, NOW, limits, windows=windows)
    assert passed.assignments == full.assignments
    assert passed.starts == full.starts
    assert planner.reasons == full.reasons
    assert passed.reasons == {j: r for j, r in full.reasons.items() if shown[j] != r}


def test_a_stream_put_over_several_reads_is_looked_ahead_at_read_by_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A restarted daemon's planner, one user's jobs put over two reads (a window read
    over passes, a user's split between two), looked ahead at (presettle) after each:
    its first pass gives plan()'s reasons without looking at any of them again."""
    planner = Planner()
    busy = NodeView("n0", 2, (), releases=((NOW + 60, 2),))
    big = JobSpec(name="j", command=("true",), gpus=2)
    jobs = [Job(i, 1000, "alice", big, JobState.PENDING, NOW) for i in range(1, 9)]
    for read in (jobs[:4], jobs[4:]):
        for job in read:
            planner.put(job, "")
        planner.presettle([busy])
    looked: list[int] = []
    settled_reason = scheduler._Pass.settled_reason

    def counted(self: scheduler._Pass, job: Job) -> str:
        looked.append(job.id)
        return settled_reason(self, job)

    monkeypatch.setattr(scheduler._Pass, "settled_reason", counted)
    passed = planner.plan([busy], {}, NOW)
    full = plan(jobs, [busy], {}, NOW)
    assert passed.reasons == full.reasons and len(full.reasons) == len(jobs)
    assert looked == []
