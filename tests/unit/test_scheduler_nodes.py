"""The planner places jobs by node (issue 32): across nodes (-N), on named nodes (-w),
away from others (-x), on whole nodes (--exclusive); all its nodes at once or none, with
a reservation across them that a stream of small jobs cannot push back."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gbatch.core.limits import Use, UserLimits
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.plan import Assignment, NodeView, Plan
from gbatch.head.scheduler import plan

NOW = 1_000_000.0


def job(
    job_id: int,
    gpus: int = 1,
    nodes: int = 1,
    *,
    time_limit: int | None = 3600,
    nodelist: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
    exclusive: bool = False,
    partition: str | None = None,
    user: str = "alice",
    gpu_mem_mb: int | None = None,
    image: str | None = None,
) -> Job:
    """A pending job, submitted in id order."""
    return Job(
        id=job_id,
        uid=1000,
        user=user,
        spec=JobSpec(
            name=f"j{job_id}",
            command=("true",),
            gpus=gpus,
            nodes=nodes,
            time_limit=time_limit,
            nodelist=nodelist,
            exclude=exclude,
            exclusive=exclusive,
            partition=partition,
            gpu_mem_mb=gpu_mem_mb,
            image=image,
        ),
        state=JobState.PENDING,
        submit_time=NOW - 10_000 + job_id,
    )


def node(
    name: str,
    total: int = 4,
    free: tuple[int, ...] | None = None,
    *,
    releases: tuple[tuple[float, int], ...] = (),
    available: bool = True,
    partitions: tuple[str, ...] = (),
    busy: bool = False,
    whole: bool = False,
) -> NodeView:
    return NodeView(
        name=name,
        gpus_total=total,
        free_gpus=tuple(range(total)) if free is None else free,
        available=available,
        releases=releases,
        partitions=frozenset(partitions),
        busy=busy,
        whole=whole,
    )


def assigned(result: Plan) -> dict[int, Assignment]:
    return {a.job_id: a for a in result.assignments}


# All nodes at once, or none


def test_a_job_across_nodes_waits_rather_than_holding_part_of_its_nodes() -> None:
    """Two nodes with 1 GPU free each and one with 2: a -N 2 --gpus-per-node 2 job
    waits, and holds nothing meanwhile: a 1-GPU job that ends before it starts."""
    nodes = [
        node("a", 2, (1,), releases=((NOW + 100, 1),)),
        node("b", 2, (1,), releases=((NOW + 200, 1),)),
        node("c", 2),
    ]
    result = plan([job(1, 2, 2), job(2, 1, time_limit=50)], nodes, {}, NOW)
    assert 1 not in assigned(result)
    assert result.reasons[1] == "Resources"
    assert result.starts == {1: NOW + 100}  # a and c, when a's job ends
    # Job 2 ends before then: it may take a reserved GPU (a's, the best fit).
    assert assigned(result)[2] == Assignment(2, "a", (1,))


def test_a_job_across_nodes_gets_its_gpus_on_each_of_its_nodes_best_fit() -> None:
    nodes = [node("a", 8), node("b", 4, (0, 1, 2)), node("c", 4, (2, 3)), node("d", 4, (3,))]
    result = plan([job(1, 2, 2)], nodes, {}, NOW)
    # The fewest GPUs left (c, then b: d has too few, a too many), the first by name first.
    assert assigned(result)[1] == Assignment(1, "b", (0, 1), peers=(("c", (2, 3)),))


def test_gpus_handed_to_a_job_across_nodes_leave_the_free_set_on_every_node() -> None:
    nodes = [node("a", 2), node("b", 2)]
    result = plan([job(1, 1, 2), job(2, 2), job(3, 1), job(4, 1)], nodes, {}, NOW)
    got = assigned(result)
    assert got[1] == Assignment(1, "a", (0,), peers=(("b", (0,)),))
    assert 2 not in got
    assert got[3] == Assignment(3, "a", (1,)) and got[4] == Assignment(4, "b", (1,))


def test_a_job_across_nodes_of_no_gpus_takes_distinct_nodes() -> None:
    result = plan([job(1, 0, 3)], [node("c"), node("a"), node("b"), node("d")], {}, NOW)
    assert assigned(result)[1] == Assignment(1, "a", (), peers=(("b", ()), ("c", ())))


def test_each_node_of_a_job_across_nodes_must_hold_its_cpus() -> None:
    nodes = [replace(node(n), cpus_total=8, free_cpus=free) for n, free in (("a", 2), ("b", 8))]
    spec = replace(job(1, 1, 2).spec, cpus=4)
    waiting = plan([replace(job(1), spec=spec)], nodes, {}, NOW)
    assert waiting.assignments == () and waiting.reasons == {1: "Resources"}
    nodes[0] = replace(nodes[0], free_cpus=4)
    started = plan([replace(job(1), spec=spec)], nodes, {}, NOW)
    assert [a.node for a in started.assignments] == ["a"]


# -w and -x


def test_nodelist_nodes_come_first_and_the_rest_by_best_fit() -> None:
    nodes = [node("a"), node("b"), node("c", 4, (3,)), node("d", 4, (2, 3))]
    result = plan([job(1, 1, 2, nodelist=("a",))], nodes, {}, NOW)
    assert assigned(result)[1] == Assignment(1, "a", (0,), peers=(("c", (3,)),))


def test_a_job_on_one_node_goes_where_nodelist_says_not_to_the_best_fit() -> None:
    nodes = [node("a"), node("b", 4, (3,))]
    result = plan([job(1, nodelist=("a",)), job(2, exclude=("b",)), job(3)], nodes, {}, NOW)
    got = assigned(result)
    assert (got[1].node, got[2].node, got[3].node) == ("a", "a", "b")


def test_a_nodelist_node_busy_keeps_the_job_waiting() -> None:
    nodes = [node("a", 4, (), releases=((NOW + 60, 4),)), node("b")]
    result = plan([job(1, 2, nodelist=("a",))], nodes, {}, NOW)
    assert result.assignments == ()
    assert result.reasons == {1: "Resources"} and result.starts == {1: NOW + 60}


def test_an_excluded_node_is_never_used() -> None:
    nodes = [node("a"), node("b"), node("c", 4, (0,))]
    result = plan([job(1, 1, 2, exclude=("c", "a"))], nodes, {}, NOW)
    assert result.reasons == {1: "BadConstraints"}  # only b is left: one node of two
    result = plan([job(1, 1, 2, exclude=("c",))], nodes, {}, NOW)
    assert {assigned(result)[1].node, *dict(assigned(result)[1].peers)} == {"a", "b"}


# --exclusive


def test_an_exclusive_job_takes_whole_idle_nodes_and_nothing_starts_beside_it() -> None:
    nodes = [node("a", 4, (1, 2, 3)), node("b", 4, busy=True), node("c", 2), node("d", 4)]
    jobs = [job(1, 1, exclusive=True), job(2, 0), job(3, 2), job(4, 1)]
    got = assigned(plan(jobs, nodes, {}, NOW))
    # a has a GPU taken and b runs a job of no GPUs: c, the smallest idle node, whole.
    assert got[1] == Assignment(1, "c", (0, 1))
    assert got[2].node == "a"  # a 0-GPU job goes to the first node by name, not c
    assert got[3].node == got[4].node == "a"  # best fit; none beside job 1 on c


def test_an_exclusive_job_does_not_take_a_node_a_job_of_this_pass_took() -> None:
    nodes = [node("a", 2)]
    result = plan([job(1, 0), job(2, 1, exclusive=True)], nodes, {}, NOW)
    assert list(assigned(result)) == [1]
    assert result.reasons[2] == "Resources"


def test_nothing_starts_on_a_node_an_exclusive_job_holds() -> None:
    nodes = [node("a", 4, (3,), whole=True, busy=True), node("b", 4, (0,))]
    result = plan([job(1, 0), job(2, 1), job(3, 1)], nodes, {}, NOW)
    got = assigned(result)
    assert got[1].node == "b" and got[2].node == "b" and 3 not in got


def test_an_exclusive_job_across_nodes_holds_every_gpu_of_each() -> None:
    result = plan([job(1, 1, 2, exclusive=True)], [node("a", 2), node("b", 2)], {}, NOW)
    assert assigned(result)[1] == Assignment(1, "a", (0, 1), peers=(("b", (0, 1)),))


# Reasons


def test_more_nodes_than_the_partition_has_is_bad_constraints_fewer_up_node_down() -> None:
    nodes = [
        node("a", partitions=("gpu",)),
        node("b", partitions=("gpu",), available=False),
        node("c", partitions=("cpu",)),
    ]
    jobs = [
        job(1, 1, 3, partition="gpu"),
        job(2, 1, 2, partition="gpu"),
        job(3, 1, 1, partition="gpu", nodelist=("c",)),
        job(4, 1, 1, partition="gpu", nodelist=("a", "b")),
        job(5, 1, 1, partition="gpu", nodelist=("b",)),
        job(6, 8, 2, partition="gpu"),
    ]
    result = plan(jobs, nodes, {}, NOW)
    assert result.reasons == {
        1: "BadConstraints",  # 3 nodes, of a partition of 2
        2: "NodeDown",  # 2 nodes, one down
        3: "BadConstraints",  # -w names a node outside its partition
        4: "BadConstraints",  # -w names more nodes than -N
        5: "NodeDown",  # its -w node is down
        6: "BadConstraints",  # no node has 8 GPUs
    }


def test_a_users_gpu_limit_counts_every_gpu_of_every_node() -> None:
    limits = {"alice": UserLimits(max_gpus=4)}
    nodes = [node("a"), node("b"), node("c")]
    result = plan([job(1, 2, 3), job(2, 2, 2)], nodes, {}, NOW, limits, {"alice": Use(0, 0)})
    assert result.reasons == {1: "QOSMaxGRESPerUser"}
    assert [a.job_id for a in result.assignments] == [2]
    again = plan([job(3, 1, 2)], nodes, {}, NOW, limits, {"alice": Use(1, 3)})
    assert again.reasons == {3: "QOSMaxGRESPerUser"}


def test_a_share_across_nodes_is_bad_constraints() -> None:
    nodes = [replace(node("a"), shareable=((0, 80_000),), share_room=((0, 80_000, -math.inf),))]
    result = plan([job(1, 1, 2, gpu_mem_mb=10_000)], nodes, {}, NOW)
    assert result.reasons == {1: "BadConstraints"}


# Backfill around a reservation across nodes


def test_a_reservation_across_nodes_protects_each_of_its_nodes() -> None:
    """a is free now, b frees at +100, c at +200: a -N 2 job reserves a and b from +100.
    A 1-GPU job may start on a or b only if it ends by then; on c, whenever."""
    nodes = [
        node("a"),
        node("b", 4, (), releases=((NOW + 100, 4),)),
        node("c", 4, (3,), releases=((NOW + 200, 3),)),
    ]
    jobs = [
        job(1, 4, 2),
        job(2, 1, time_limit=3600),
        job(3, 1, time_limit=3600),
        job(4, 1, time_limit=60),
    ]
    result = plan(jobs, nodes, {}, NOW)
    assert result.starts == {1: NOW + 100}
    got = assigned(result)
    assert got[2].node == "c"  # the only node it cannot delay the reservation on
    assert result.reasons[3] == "Priority"
    assert got[4].node == "a"  # ends before +100


def test_a_job_across_nodes_starts_within_what_a_reservation_spares() -> None:
    """A one-node job reserves b; a -N 2 job behind it may take b only within its spare."""
    nodes = [node("a", 4, (0, 1)), node("b", 6, (0, 1, 2), releases=((NOW + 100, 3),))]
    jobs = [job(1, 5), job(2, 2, 2), job(3, 1, 2, time_limit=None)]
    result = plan(jobs, nodes, {}, NOW)
    assert result.starts == {1: NOW + 100}
    # b has 6 free at +100, 1 to spare: job 2 would take 2 of it there, job 3 takes 1.
    assert result.reasons[2] == "Priority"
    assert assigned(result)[3] == Assignment(3, "a", (0,), peers=(("b", (0,)),))


def test_a_share_may_not_take_a_gpu_a_reservation_across_nodes_counts() -> None:
    shared = ((0, 80_000),)
    nodes = [
        replace(node("a", 1), shareable=shared, share_room=((0, 80_000, -math.inf),)),
        node("b", 1, (), releases=((NOW + 100, 1),)),
    ]
    jobs = [job(1, 1, 2), job(2, 1, gpu_mem_mb=10_000), job(3, 1, gpu_mem_mb=10_000, time_limit=50)]
    result = plan(jobs, nodes, {}, NOW)
    assert result.starts == {1: NOW + 100}
    assert result.reasons[2] == "Resources"
    assert assigned(result)[3].node == "a"


# Properties


@st.composite
def fleets(draw: st.DrawFn) -> list[NodeView]:
    result = []
    for index in range(draw(st.integers(1, 4))):
        total = draw(st.integers(0, 4))
        free = tuple(sorted(draw(st.sets(st.integers(0, max(total - 1, 0)), max_size=total))))
        free = tuple(g for g in free if g < total)
        busy = total - len(free)
        ends = [draw(st.sampled_from((NOW + 50, NOW + 500, math.inf))) for _ in range(busy)]
        result.append(
            NodeView(
                name=f"n{index}",
                gpus_total=total,
                free_gpus=free,
                available=draw(st.booleans()) or draw(st.booleans()),
                releases=tuple((end, 1) for end in ends),
                partitions=frozenset(draw(st.sets(st.sampled_from(("p", "q")), min_size=1))),
                busy=busy > 0 or draw(st.booleans()),
            )
        )
    return result


@st.composite
def queues(draw: st.DrawFn) -> list[Job]:
    jobs = []
    for job_id in range(1, draw(st.integers(1, 10)) + 1):
        names = st.sampled_from(("n0", "n1", "n2", "n3", "n9"))
        jobs.append(
            job(
                job_id,
                draw(st.integers(0, 4)),
                draw(st.sampled_from((1, 1, 2, 3))),
                time_limit=draw(st.sampled_from((None, 30, 300))),
                nodelist=tuple(sorted(draw(st.sets(names, max_size=2))))
                if draw(st.booleans())
                else (),
                exclude=tuple(sorted(draw(st.sets(names, max_size=2))))
                if draw(st.booleans())
                else (),
                exclusive=draw(st.booleans()) and draw(st.booleans()),
                partition=draw(st.sampled_from((None, "p", "q"))),
            )
        )
    return jobs


@settings(max_examples=300, deadline=None)
@given(fleets(), queues())
def test_no_node_is_overcommitted_and_each_job_gets_its_nodes_whole(
    nodes: list[NodeView], jobs: list[Job]
) -> None:
    result = plan(jobs, nodes, {}, NOW)
    by_name = {n.name: n for n in nodes}
    taken: dict[str, list[int]] = {}
    held_by: dict[str, list[Job]] = {}
    specs = {j.id: j for j in jobs}
    for a in result.assignments:
        pending = specs[a.job_id]
        spec = pending.spec
        names = [a.node, *(name for name, _ in a.peers)]
        assert len(set(names)) == len(names) == spec.nodes
        for name, gpus in ((a.node, a.gpus), *a.peers):
            view = by_name[name]
            assert view.available
            assert name not in spec.exclude
            assert spec.partition is None or spec.partition in view.partitions
            if spec.exclusive:
                assert not view.busy and gpus == view.free_gpus == tuple(range(view.gpus_total))
            else:
                assert len(gpus) == spec.gpus
            assert set(gpus) <= set(view.free_gpus)
            taken.setdefault(name, []).extend(gpus)
            held_by.setdefault(name, []).append(pending)
        assert set(spec.nodelist) <= set(names)
    for gpus in taken.values():
        assert len(gpus) == len(set(gpus))  # no GPU handed out twice
    for held in held_by.values():  # an exclusive job alone on its node
        assert len(held) == 1 or not any(j.spec.exclusive for j in held)


def node_views(
    sizes: list[int], running: list[tuple[str, int, float]], now: float
) -> list[NodeView]:
    """The nodes as the fleet sees them at `now`: (node, GPUs, end) of what runs there."""
    views = []
    for index, size in enumerate(sizes):
        name = f"n{index}"
        mine = [(gpus, end) for where, gpus, end in running if where == name]
        used = sum(gpus for gpus, _ in mine)
        views.append(
            NodeView(
                name,
                size,
                tuple(range(used, size)),
                releases=tuple((end, gpus) for gpus, end in mine if gpus),
                busy=bool(mine),
            )
        )
    return views


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_reserved_job_across_nodes_starts_no_later_than_its_reservation(
    data: st.DataObject,
) -> None:
    """A pending -N job at the top of the queue, a stream of small jobs with time limits
    behind it: plan after plan, as jobs end and arrive, it starts no later than the
    start its first reservation promised, and each later plan promises no later."""
    draw = data.draw
    sizes = draw(st.lists(st.integers(1, 4), min_size=2, max_size=4))
    count = draw(st.integers(2, len(sizes)))
    per_node = draw(st.integers(1, min(sorted(sizes)[-count:])))
    # What runs as it starts: every node busy, each job with its time limit's end.
    running: list[tuple[str, int, float]] = []
    for index, size in enumerate(sizes):
        for _ in range(draw(st.integers(1, size))):
            running.append((f"n{index}", 1, NOW + draw(st.integers(1, 600))))
    sized = [sum(g for w, g, _ in running if w == f"n{i}") for i in range(len(sizes))]
    if all(size - used >= per_node for size, used in zip(sizes, sized, strict=True)):
        return  # it would start at once
    big = job(1, per_node, count, time_limit=3600)
    queue: dict[int, Job] = {1: big}
    next_id = 2
    now = NOW
    promised = math.inf
    for _ in range(40):
        for _ in range(draw(st.integers(0, 3))):  # arrivals: small jobs, short or long
            queue[next_id] = job(
                next_id, draw(st.integers(1, 2)), time_limit=draw(st.sampled_from((30, 120, 900)))
            )
            next_id += 1
        result = plan(list(queue.values()), node_views(sizes, running, now), {}, now)
        for a in result.assignments:
            started = queue.pop(a.job_id)
            end = now + (started.time_limit or 0)
            for name, gpus in ((a.node, a.gpus), *a.peers):
                running.append((name, len(gpus), end))
        if 1 not in queue:
            assert now <= promised
            return
        if 1 in result.starts:
            assert result.starts[1] <= promised
            promised = result.starts[1]
        # The clock moves to the next end (jobs run their whole time limits), or on.
        ends = [end for _, _, end in running if end > now]
        now = min(ends) if ends else now + 10
        running = [r for r in running if r[2] > now]
    assert promised == math.inf or now < promised  # not there yet, nor late


def test_the_fleet_tells_the_planner_a_node_runs_a_job_or_is_held_whole() -> None:
    """NodeView.busy: a job of no GPUs runs there (a job across nodes counts on each of
    its nodes); NodeView.whole: an --exclusive job holds it."""
    from test_free_gpus import _fleet

    from gbatch.core.model import Gpu

    gpus = [Gpu(i, f"GPU-{i}", "NVIDIA A100-SXM4-80GB", 81920, 0) for i in range(2)]
    fleet, host = _fleet(gpus, [])
    idle = fleet.node_view(host, [], {})
    assert (idle.busy, idle.whole) == (False, False)
    cpu_only = replace(job(1, 0), state=JobState.RUNNING, node="gpu01")
    view = fleet.node_view(host, [cpu_only], {})
    assert (view.busy, view.whole) == (True, False)
    spec = replace(job(2, 2, 2).spec, exclusive=True)
    peer = replace(
        job(2),
        spec=spec,
        state=JobState.RUNNING,
        node="gpu00",
        gpus=(0, 1),
        peers=(("gpu01", (0, 1)),),
    )
    view = fleet.node_view(host, [peer], {})
    assert (view.busy, view.whole, view.free_gpus) == (True, True, ())


def test_an_exclusive_job_counts_every_gpu_of_its_nodes_against_the_limit() -> None:
    limits = {"alice": UserLimits(max_gpus=4)}
    result = plan([job(1, 1, exclusive=True)], [node("a", 8)], {}, NOW, limits, {})
    assert result.reasons == {1: "QOSMaxGRESPerUser"}
    fits = plan([job(1, 1, exclusive=True)], [node("a", 4)], {}, NOW, limits, {})
    assert assigned(fits)[1] == Assignment(1, "a", (0, 1, 2, 3))
