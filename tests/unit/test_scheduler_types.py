"""The planner with GPU types and constraints (issue 30): a typed job counts and gets only
GPUs of its type, an untyped one takes any mix, a constraint filters nodes as a partition
does, and a reservation for a typed job holds against backfill."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gbatch.core.constraints import parse, satisfied
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.plan import NodeView
from gbatch.head.scheduler import plan

NOW = 1_000_000.0


def job(
    job_id: int,
    gpus: int = 1,
    gpu_type: str | None = None,
    *,
    constraint: str | None = None,
    time_limit: int | None = 3600,
    user: str = "alice",
) -> Job:
    return Job(
        id=job_id,
        uid=1000,
        user=user,
        spec=JobSpec(
            name=f"j{job_id}",
            command=("true",),
            gpus=gpus,
            gpu_type=gpu_type,
            constraint=constraint,
            time_limit=time_limit,
        ),
        state=JobState.PENDING,
        submit_time=NOW - 10_000 + job_id,
    )


def node(
    name: str,
    types: tuple[str, ...],
    free: tuple[int, ...] | None = None,
    *,
    features: tuple[str, ...] = (),
    ends: tuple[float, ...] = (),
) -> NodeView:
    """A node whose GPU i is of types[i] ("": none); the GPUs not free are held by 1-GPU
    jobs that end at `ends` (in GPU order; inf without)."""
    free = tuple(range(len(types))) if free is None else free
    busy = [i for i in range(len(types)) if i not in free]
    when = [ends[k] if k < len(ends) else math.inf for k in range(len(busy))]
    gpu_types = tuple((i, t) for i, t in enumerate(types) if t)
    return NodeView(
        name=name,
        gpus_total=len(types),
        free_gpus=free,
        releases=tuple((t, 1) for t in when),
        gpu_types=gpu_types,
        features=frozenset(features) | {t for t in types if t},
        typed_releases=tuple((t, types[g], 1) for t, g in zip(when, busy, strict=True) if types[g]),
    )


WORKSTATION = node("ws", ("rtx3090", "rtx4090"))


def test_a_typed_job_gets_only_gpus_of_its_type() -> None:
    result = plan([job(1, 1, "rtx4090")], [WORKSTATION], {}, NOW)
    assert [(a.node, a.gpus) for a in result.assignments] == [("ws", (1,))]


def test_an_untyped_job_takes_any_mix_of_types() -> None:
    result = plan([job(1, 2)], [WORKSTATION], {}, NOW)
    assert [a.gpus for a in result.assignments] == [(0, 1)]


def test_a_typed_job_waits_while_only_other_types_are_free() -> None:
    busy = node("ws", ("rtx3090", "rtx4090"), free=(0,), ends=(NOW + 60,))
    result = plan([job(1, 1, "rtx4090"), job(2, 1)], [busy], {}, NOW)
    # Job 1 reserves the 4090 (free at NOW+60); job 2 ends after that but takes the 3090.
    assert result.reasons == {1: "Resources"}
    assert result.starts == {1: NOW + 60}
    assert [(a.job_id, a.gpus) for a in result.assignments] == [(2, (0,))]


def test_a_type_no_node_has_or_too_many_of_one_is_bad_constraints() -> None:
    nodes = [WORKSTATION, node("big", ("a100",) * 4)]
    result = plan([job(1, 1, "h100"), job(2, 5, "a100"), job(3, 4, "a100")], nodes, {}, NOW)
    assert result.reasons == {1: "BadConstraints", 2: "BadConstraints"}
    assert [(a.node, a.gpus) for a in result.assignments] == [("big", (0, 1, 2, 3))]


def test_best_fit_counts_free_gpus_of_the_type() -> None:
    """The 3090 node has more free GPUs in all, fewer A100s: the A100 job packs there."""
    mixed = node("mixed", ("a100", "rtx3090", "rtx3090", "rtx3090"))
    pure = node("pure", ("a100", "a100"))
    result = plan([job(1, 1, "a100")], [mixed, pure], {}, NOW)
    assert [(a.node, a.gpus) for a in result.assignments] == [("mixed", (0,))]


def test_a_constraint_filters_nodes_and_gpu_types_count_as_features() -> None:
    nodes = [node("a", ("a100",) * 2), node("b", ("a100",) * 2, features=("nvlink",))]
    result = plan(
        [
            job(1, 1, constraint="nvlink"),
            job(2, 1, constraint="h100|rtx4090"),
            job(3, 0, constraint="a100"),
        ],
        [*nodes, WORKSTATION],
        {},
        NOW,
    )
    assert {a.job_id: a.node for a in result.assignments} == {1: "b", 2: "ws", 3: "a"}
    unmet = plan([job(4, 1, constraint="ib"), job(5, 0, constraint="ib")], nodes, {}, NOW)
    assert unmet.reasons == {4: "BadConstraints", 5: "BadConstraints"}


def test_an_untyped_backfill_job_may_not_take_the_reserved_type_but_may_take_others() -> None:
    """A100 reserved on node `ws2` at NOW+100: a long untyped job may take its 3090 (the
    lowest id), not the last A100 the reservation needs."""
    ws2 = node("ws2", ("rtx3090", "a100", "a100"), free=(0, 1), ends=(NOW + 100,))
    result = plan([job(1, 2, "a100"), job(2, 1, time_limit=None)], [ws2], {}, NOW)
    assert result.reasons == {1: "Resources"}
    assert [(a.job_id, a.gpus) for a in result.assignments] == [(2, (0,))]
    # Two untyped GPUs would take an A100 (ids 0, 1): it waits instead.
    blocked = plan([job(1, 2, "a100"), job(2, 2, time_limit=None)], [ws2], {}, NOW)
    assert blocked.reasons == {1: "Resources", 2: "Priority"}


# -- invariants ------------------------------------------------------------------------

TYPES = ("", "a100", "rtx4090")
FEATURES = ("nvlink", "ib")


@st.composite
def scenario(draw: st.DrawFn) -> tuple[list[Job], list[NodeView]]:
    nodes = []
    for n in range(draw(st.integers(0, 3))):
        types = tuple(draw(st.lists(st.sampled_from(TYPES), max_size=4)))
        free = tuple(sorted(draw(st.sets(st.integers(0, max(len(types) - 1, 0))))) if types else ())
        free = tuple(i for i in free if i < len(types))
        busy = len(types) - len(free)
        ends = tuple(draw(st.sampled_from([NOW + 10, NOW + 500, math.inf])) for _ in range(busy))
        features = tuple(draw(st.sets(st.sampled_from(FEATURES))))
        view = node(f"n{n}", types, free, features=features, ends=ends)
        if not draw(st.booleans()) and draw(st.booleans()):
            view = NodeView(view.name, view.gpus_total, (), available=False, features=view.features)
        nodes.append(view)
    jobs = [
        job(
            i,
            draw(st.integers(0, 3)),
            draw(st.sampled_from((None, None, "a100", "a100", "rtx4090", "h100"))),
            constraint=draw(st.sampled_from((None,) * 4 + ("nvlink", "ib|a100", "nvlink&rtx4090"))),
            time_limit=draw(st.sampled_from([None, 5, 100, 1000])),
            user=draw(st.sampled_from(["alice", "bob"])),
        )
        for i in range(draw(st.integers(0, 20)))
    ]
    jobs = [j if j.spec.gpus or j.spec.gpu_type is None else _untyped(j) for j in jobs]
    return jobs, nodes


def _untyped(j: Job) -> Job:
    return Job(j.id, j.uid, j.user, j.spec.replace(gpu_type=None), j.state, j.submit_time)


def _type_of(view: NodeView, gpu: int) -> str:
    return dict(view.gpu_types).get(gpu, "")


@settings(max_examples=400, deadline=None)
@given(scenario())
def test_typed_jobs_get_only_their_type_and_no_gpu_is_handed_out_twice(
    case: tuple[list[Job], list[NodeView]],
) -> None:
    jobs, nodes = case
    result = plan(jobs, nodes, {}, NOW)
    by_id = {j.id: j for j in jobs}
    by_name = {n.name: n for n in nodes}
    handed: list[tuple[str, int]] = []
    for a in result.assignments:
        spec, target = by_id[a.job_id].spec, by_name[a.node]
        assert len(a.gpus) == spec.gpus
        assert set(a.gpus) <= set(target.free_gpus)
        if spec.gpu_type is not None:
            assert {_type_of(target, g) for g in a.gpus} == {spec.gpu_type}
        if spec.constraint is not None:
            assert satisfied(parse(spec.constraint), target.features)
        handed += [(a.node, g) for g in a.gpus]
    assert len(handed) == len(set(handed))
    assert set(result.reasons) | {a.job_id for a in result.assignments} == set(by_id)


@settings(max_examples=400, deadline=None)
@given(scenario())
def test_backfill_never_takes_what_the_reserved_job_needs_at_its_start(
    case: tuple[list[Job], list[NodeView]],
) -> None:
    """At the reserved job's expected start T, some node it may use still has its GPUs
    (of its type): those free now that no job of this plan holds past T, plus those
    freed by T."""
    jobs, nodes = case
    result = plan(jobs, nodes, {}, NOW)
    if not result.starts:
        return
    ((reserved_id, start),) = result.starts.items()
    spec = {j.id: j for j in jobs}[reserved_id].spec
    held_past: set[tuple[str, int]] = set()
    for a in result.assignments:
        limit = {j.id: j for j in jobs}[a.job_id].time_limit
        if limit is None or NOW + limit > start:
            held_past |= {(a.node, g) for g in a.gpus}

    def counts(view: NodeView, gpu: int) -> bool:
        return spec.gpu_type is None or _type_of(view, gpu) == spec.gpu_type

    def at_start(view: NodeView) -> int:
        free = sum(counts(view, g) and (view.name, g) not in held_past for g in view.free_gpus)
        if spec.gpu_type is None:
            return free + sum(n for t, n in view.releases if t <= start)
        return free + sum(n for t, k, n in view.typed_releases if k == spec.gpu_type and t <= start)

    usable = [
        v
        for v in nodes
        if v.available
        and (spec.constraint is None or satisfied(parse(spec.constraint), v.features))
    ]
    assert any(at_start(v) >= spec.gpus for v in usable)
