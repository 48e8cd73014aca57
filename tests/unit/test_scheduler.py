from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.plan import NodeView, Plan
from gbatch.head.scheduler import plan, queue_order

NOW = 1_000_000.0


def job(
    job_id: int,
    user: str = "alice",
    gpus: int = 1,
    *,
    submit: float | None = None,
    priority: int = 0,
    nice: int = 0,
    time_limit: int | None = 3600,
    held: bool = False,
    image: str | None = None,
) -> Job:
    """A pending job; submitted in id order unless `submit` says otherwise."""
    return Job(
        id=job_id,
        uid=1000,
        user=user,
        spec=JobSpec(
            name=f"j{job_id}",
            command=("true",),
            gpus=gpus,
            time_limit=time_limit,
            priority=priority,
            nice=nice,
            image=image,
        ),
        state=JobState.PENDING,
        submit_time=NOW - 10_000 + job_id if submit is None else submit,
        held=held,
    )


def node(
    name: str,
    total: int = 8,
    free: tuple[int, ...] | None = None,
    *,
    releases: tuple[tuple[float, int], ...] = (),
    available: bool = True,
    runs_containers: bool = True,
) -> NodeView:
    return NodeView(
        name=name,
        gpus_total=total,
        free_gpus=tuple(range(total)) if free is None else free,
        available=available,
        releases=releases,
        runs_containers=runs_containers,
    )


def test_image_jobs_skip_nodes_whose_engine_does_not_answer_bare_jobs_do_not() -> None:
    nodes = [node("a", 2, runs_containers=False), node("b", 4)]
    result = plan([job(1, gpus=2, image="img"), job(2, gpus=2)], nodes, {}, NOW)
    placed = {a.job_id: a.node for a in result.assignments}
    # Best fit would put job 1 on a; its engine is down, so b.
    assert placed == {1: "b", 2: "a"}


def test_image_jobs_wait_as_node_down_while_no_engine_answers() -> None:
    nodes = [node("a", 2, runs_containers=False)]
    result = plan([job(1, gpus=1, image="img"), job(2, gpus=0, image="img")], nodes, {}, NOW)
    assert result.assignments == ()
    assert result.reasons == {1: "NodeDown", 2: "NodeDown"}


def placed(result: Plan) -> dict[int, tuple[str, tuple[int, ...]]]:
    return {a.job_id: (a.node, a.gpus) for a in result.assignments}


def started_ids(result: Plan) -> list[int]:
    return [a.job_id for a in result.assignments]


# Order


def test_light_user_goes_before_a_user_who_flooded_the_queue_and_has_usage() -> None:
    flood = [job(i, "bob", submit=NOW - 5000 + i) for i in range(1, 21)]
    late = job(99, "alice", submit=NOW - 1)
    result = plan([*flood, late], [node("n1", 1)], {"bob": 1e6}, NOW)
    assert started_ids(result) == [99]
    assert {result.reasons[i] for i in range(1, 21)} == {"Resources", "Priority"}


def test_jobs_of_one_user_start_first_in_first_out() -> None:
    jobs = [job(3, submit=NOW - 10), job(1, submit=NOW - 30), job(2, submit=NOW - 20)]
    assert [j.id for j in queue_order(jobs, {})] == [1, 2, 3]
    assert started_ids(plan(jobs, [node("n1", 1)], {}, NOW)) == [1]


def test_same_submit_time_falls_back_to_job_id() -> None:
    jobs = [job(7, submit=NOW), job(5, submit=NOW), job(6, submit=NOW)]
    assert [j.id for j in queue_order(jobs, {})] == [5, 6, 7]


def test_higher_priority_goes_first_within_equal_fair_share() -> None:
    jobs = [job(1), job(2, priority=10)]
    assert started_ids(plan(jobs, [node("n1", 1)], {}, NOW)) == [2]


def test_nice_lowers_a_jobs_place_in_the_queue() -> None:
    jobs = [job(1, nice=5), job(2)]
    assert [j.id for j in queue_order(jobs, {})] == [2, 1]


def test_fair_share_outranks_priority() -> None:
    jobs = [job(1, "bob", priority=100), job(2, "alice")]
    assert [j.id for j in queue_order(jobs, {"bob": 10.0})] == [2, 1]


# Placement


def test_one_gpu_job_packs_onto_the_node_with_one_free_gpu() -> None:
    nodes = [node("a", 8), node("b", 8, free=(5,))]
    assert placed(plan([job(1)], nodes, {}, NOW)) == {1: ("b", (5,))}


def test_eight_gpu_block_stays_whole_for_a_later_eight_gpu_job() -> None:
    nodes = [node("a", 8), node("b", 8, free=(5,))]
    result = plan([job(1), job(2, gpus=8)], nodes, {}, NOW)
    assert placed(result) == {1: ("b", (5,)), 2: ("a", tuple(range(8)))}


def test_best_fit_tie_goes_to_the_node_name_first_in_order() -> None:
    nodes = [node("c", 4), node("a", 4), node("b", 4)]
    assert placed(plan([job(1, gpus=2)], nodes, {}, NOW)) == {1: ("a", (0, 1))}


def test_job_gets_the_lowest_free_gpu_ids_of_its_node() -> None:
    nodes = [node("a", 8, free=(7, 2, 5, 3))]
    assert placed(plan([job(1, gpus=2)], nodes, {}, NOW)) == {1: ("a", (2, 3))}


def test_multi_gpu_job_never_spans_nodes() -> None:
    nodes = [node("a", 4, free=(0, 1)), node("b", 4, free=(2, 3))]
    result = plan([job(1, gpus=4, time_limit=None)], nodes, {}, NOW)
    assert result.assignments == ()
    assert result.reasons == {1: "Resources"}


def test_no_gpu_is_handed_out_twice_within_one_plan() -> None:
    nodes = [node("a", 4), node("b", 2)]
    jobs = [job(i, gpus=g) for i, g in enumerate([1, 2, 1, 1, 2, 1, 1], start=1)]
    result = plan(jobs, nodes, {}, NOW)
    handed = [(a.node, g) for a in result.assignments for g in a.gpus]
    assert len(handed) == len(set(handed)) == 6


def test_zero_gpu_job_goes_to_the_first_available_node_even_when_gpus_are_full() -> None:
    nodes = [node("b", 8), node("a", 8, free=()), node("0down", 8, available=False)]
    assert placed(plan([job(1, gpus=0)], nodes, {}, NOW)) == {1: ("a", ())}


def test_zero_gpu_jobs_take_no_gpus_from_gpu_jobs() -> None:
    nodes = [node("a", 1)]
    result = plan([job(1, gpus=0), job(2, gpus=0), job(3, gpus=1)], nodes, {}, NOW)
    assert placed(result) == {1: ("a", ()), 2: ("a", ()), 3: ("a", (0,))}


# Reasons


def test_held_job_is_skipped_with_reason_and_does_not_block_others() -> None:
    result = plan([job(1, held=True), job(2)], [node("a", 1)], {}, NOW)
    assert placed(result) == {2: ("a", (0,))}
    assert result.reasons == {1: "JobHeldUser"}


def test_job_larger_than_every_node_has_bad_constraints() -> None:
    nodes = [node("a", 8), node("b", 4, available=False)]
    result = plan([job(1, gpus=9)], nodes, {}, NOW)
    assert result.reasons == {1: "BadConstraints"}


def test_job_larger_than_every_available_node_counts_down_nodes_as_its_constraint() -> None:
    nodes = [node("big", 16, available=False), node("small", 8)]
    result = plan([job(1, gpus=12), job(2, gpus=1)], nodes, {}, NOW)
    assert result.reasons == {1: "NodeDown"}
    assert placed(result) == {2: ("small", (0,))}


def test_every_job_waits_with_node_down_when_no_node_is_available() -> None:
    nodes = [node("a", available=False), node("b", available=False)]
    result = plan([job(1), job(2, gpus=0), job(3, held=True)], nodes, {}, NOW)
    assert result.assignments == ()
    assert result.reasons == {1: "NodeDown", 2: "NodeDown", 3: "JobHeldUser"}


def test_every_job_waits_with_node_down_when_there_are_no_nodes() -> None:
    result = plan([job(1), job(2, gpus=0)], [], {}, NOW)
    assert result.reasons == {1: "NodeDown", 2: "NodeDown"}


def test_top_blocked_job_waits_for_resources_and_the_rest_for_priority() -> None:
    nodes = [node("a", 2, free=(), releases=((NOW + 100, 2),))]
    result = plan([job(1), job(2), job(3)], nodes, {}, NOW)
    assert result.reasons == {1: "Resources", 2: "Priority", 3: "Priority"}


def test_jobs_wait_for_resources_when_no_running_job_will_ever_end() -> None:
    nodes = [node("a", 2, free=(), releases=((math.inf, 2),))]
    result = plan([job(1), job(2)], nodes, {}, NOW)
    assert result.reasons == {1: "Resources", 2: "Resources"}


def test_plan_gives_a_reason_to_exactly_the_jobs_it_does_not_start() -> None:
    nodes = [node("a", 4, free=(0, 1), releases=((NOW + 50, 2),))]
    jobs = [job(1, gpus=2), job(2, gpus=4), job(3, held=True), job(4, gpus=5), job(5)]
    result = plan(jobs, nodes, {}, NOW)
    assert placed(result) == {1: ("a", (0, 1))}
    assert result.reasons == {2: "Resources", 3: "JobHeldUser", 4: "BadConstraints", 5: "Priority"}


# Reservation and backfill


def _reserved_node() -> NodeView:
    # 8 GPUs, 4 free now, the other 4 freed at NOW + 1000: an 8-GPU job reserves it.
    return node("a", 8, free=(4, 5, 6, 7), releases=((NOW + 1000, 4),))


def test_short_job_backfills_before_the_reservation() -> None:
    result = plan([job(1, gpus=8), job(2, gpus=2, time_limit=600)], [_reserved_node()], {}, NOW)
    assert placed(result) == {2: ("a", (4, 5))}
    assert result.reasons == {1: "Resources"}


def test_job_ending_exactly_at_the_reservation_may_backfill() -> None:
    result = plan([job(1, gpus=8), job(2, gpus=2, time_limit=1000)], [_reserved_node()], {}, NOW)
    assert started_ids(result) == [2]


def test_long_job_does_not_backfill_onto_the_reserved_node() -> None:
    result = plan([job(1, gpus=8), job(2, gpus=2, time_limit=1001)], [_reserved_node()], {}, NOW)
    assert result.assignments == ()
    assert result.reasons == {1: "Resources", 2: "Priority"}


def test_job_without_time_limit_does_not_backfill_onto_the_reserved_node() -> None:
    result = plan([job(1, gpus=8), job(2, time_limit=None)], [_reserved_node()], {}, NOW)
    assert result.reasons == {1: "Resources", 2: "Priority"}


def test_long_job_still_starts_on_another_node_while_one_is_reserved() -> None:
    nodes = [_reserved_node(), node("b", 8, free=(0, 1, 2, 3), releases=((math.inf, 4),))]
    result = plan([job(1, gpus=8), job(2, gpus=2, time_limit=None)], nodes, {}, NOW)
    assert placed(result) == {2: ("b", (0, 1))}


def test_reservation_goes_to_the_node_that_frees_up_first() -> None:
    nodes = [
        node("a", 8, free=(0,), releases=((NOW + 500, 7),)),
        node("b", 8, free=(0,), releases=((NOW + 200, 7),)),
    ]
    # The reservation sits on b, so the first job without a limit takes a's GPU and
    # the second may not take b's.
    jobs = [job(1, gpus=8), job(2, time_limit=None), job(3, time_limit=None)]
    result = plan(jobs, nodes, {}, NOW)
    assert placed(result) == {2: ("a", (0,))}
    assert result.reasons == {1: "Resources", 3: "Priority"}


def test_long_job_may_use_gpus_the_reservation_does_not_need() -> None:
    # At NOW + 1000 the node has 8 GPUs; the 6-GPU reservation leaves 2 to spare.
    reserved = node("a", 8, free=(0, 1, 2), releases=((NOW + 1000, 5),))
    jobs = [job(1, gpus=6), job(2, gpus=2, time_limit=None), job(3, time_limit=None)]
    result = plan(jobs, [reserved], {}, NOW)
    assert placed(result) == {2: ("a", (0, 1))}
    assert result.reasons == {1: "Resources", 3: "Priority"}


def test_jobs_started_by_this_plan_count_towards_the_reservation_time() -> None:
    # Job 1 takes one GPU until NOW + 100; job 2 needs both and so reserves for then.
    jobs = [job(1, time_limit=100), job(2, gpus=2), job(3, time_limit=200), job(4, time_limit=50)]
    result = plan(jobs, [node("a", 2)], {}, NOW)
    assert placed(result) == {1: ("a", (0,)), 4: ("a", (1,))}
    assert result.reasons == {2: "Resources", 3: "Priority"}


def test_without_a_possible_reservation_later_jobs_start_freely() -> None:
    nodes = [node("a", 8, free=(0, 1, 2, 3), releases=((math.inf, 4),))]
    result = plan([job(1, gpus=8), job(2, gpus=4, time_limit=None)], nodes, {}, NOW)
    assert placed(result) == {2: ("a", (0, 1, 2, 3))}
    assert result.reasons == {1: "Resources"}


def test_smaller_blocked_job_reserves_when_the_top_one_never_can() -> None:
    nodes = [node("a", 8, free=(0,), releases=((math.inf, 4), (NOW + 100, 3)))]
    # Job 1 (8 GPUs) can never fit; job 2 (4 GPUs) can at NOW + 100 and reserves,
    # so job 3 (1 GPU, long) may not take the last free GPU.
    jobs = [job(1, gpus=8), job(2, gpus=4), job(3, time_limit=None)]
    result = plan(jobs, nodes, {}, NOW)
    assert result.assignments == ()
    assert result.reasons == {1: "Resources", 2: "Resources", 3: "Priority"}


# Invariants


@st.composite
def _scenario(draw: st.DrawFn) -> tuple[list[Job], list[NodeView]]:
    nodes = []
    for n in range(draw(st.integers(0, 5))):
        total = draw(st.integers(0, 8))
        free = draw(st.sets(st.integers(0, total - 1))) if total else set()
        busy = total - len(free)
        releases = ((draw(st.sampled_from([NOW + 10, NOW + 500, math.inf])), busy),) if busy else ()
        nodes.append(
            node(f"n{n}", total, tuple(free), releases=releases, available=draw(st.booleans()))
        )
    jobs = [
        job(
            i,
            draw(st.sampled_from(["alice", "bob", "carol"])),
            draw(st.integers(0, 9)),
            priority=draw(st.integers(0, 2)),
            time_limit=draw(st.sampled_from([None, 5, 100, 1000])),
            held=draw(st.booleans()),
        )
        for i in range(draw(st.integers(0, 25)))
    ]
    return jobs, nodes


@settings(max_examples=300)
@given(_scenario(), st.dictionaries(st.sampled_from(["alice", "bob"]), st.floats(0, 1e6)))
def test_plan_invariants_hold_for_any_queue_and_fleet(
    scenario: tuple[list[Job], list[NodeView]], usage: dict[str, float]
) -> None:
    jobs, nodes = scenario
    result = plan(jobs, nodes, usage, NOW)
    by_id = {j.id: j for j in jobs}
    by_name = {n.name: n for n in nodes}
    started = [a.job_id for a in result.assignments]
    # Every job is either started once or given a reason, never both.
    assert len(started) == len(set(started))
    assert set(started).isdisjoint(result.reasons)
    assert set(started) | set(result.reasons) == set(by_id)
    handed = []
    for a in result.assignments:
        chosen, target = by_id[a.job_id], by_name[a.node]
        assert not chosen.held
        assert target.available
        assert len(a.gpus) == chosen.spec.gpus
        assert set(a.gpus) <= set(target.free_gpus)
        handed += [(a.node, g) for g in a.gpus]
    assert len(handed) == len(set(handed))
    for job_id, reason in result.reasons.items():
        assert reason in {"JobHeldUser", "Resources", "Priority", "NodeDown", "BadConstraints"}
        assert (reason == "JobHeldUser") == by_id[job_id].held


def test_the_reserved_job_alone_gets_an_expected_start() -> None:
    result = plan([job(1, gpus=8), job(2, gpus=8)], [_reserved_node()], {}, NOW)
    assert result.starts == {1: NOW + 1000}  # job 2 waits behind it: no estimate


def test_no_reservation_means_no_expected_start() -> None:
    nodes = [node("a", 8, free=(0,), releases=((math.inf, 7),))]
    assert plan([job(1, gpus=8)], nodes, {}, NOW).starts == {}
