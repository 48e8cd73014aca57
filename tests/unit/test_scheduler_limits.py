"""The planner under per-user limits: a user at max_running_jobs or max_gpus waits with
Slurm's reason, and holds back nobody else."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from test_scheduler import NOW, _scenario, job, node

from gbatch.core.limits import Use, UserLimits
from gbatch.core.model import Job
from gbatch.core.plan import NodeView
from gbatch.head.scheduler import plan

RUNNING_2 = UserLimits(max_running_jobs=2)
GPUS_2 = UserLimits(max_gpus=2)


def test_a_user_at_max_running_jobs_waits_with_the_slurm_reason() -> None:
    jobs = [job(1, "alice", 0), job(2, "alice", 0)]
    result = plan(jobs, [node("a")], {}, NOW, {"alice": RUNNING_2}, {"alice": Use(2, 0)})
    assert result.assignments == ()
    assert result.reasons == {1: "QOSMaxJobsPerUserLimit", 2: "QOSMaxJobsPerUserLimit"}


def test_jobs_this_plan_starts_count_towards_the_limit() -> None:
    jobs = [job(i, "alice", 1) for i in range(1, 6)]
    result = plan(jobs, [node("a")], {}, NOW, {"alice": RUNNING_2}, {})
    assert [a.job_id for a in result.assignments] == [1, 2]
    assert result.reasons == dict.fromkeys((3, 4, 5), "QOSMaxJobsPerUserLimit")


def test_a_limited_users_jobs_do_not_hold_back_another_users() -> None:
    # alice's jobs come first in the queue (bob has used more), and every one is held
    # back by her limit: bob's still start, on the GPUs hers would have taken.
    jobs = [job(1, "alice", 4), job(2, "alice", 4), job(3, "bob", 4), job(4, "bob", 4)]
    usage = {"bob": 1e6}
    limits = {"alice": UserLimits(max_running_jobs=1)}
    result = plan(jobs, [node("a", 8)], usage, NOW, limits, {"alice": Use(1, 0)})
    assert {a.job_id for a in result.assignments} == {3, 4}
    assert result.reasons == {1: "QOSMaxJobsPerUserLimit", 2: "QOSMaxJobsPerUserLimit"}


def test_a_job_over_max_gpus_waits_while_a_smaller_one_of_the_same_user_starts() -> None:
    jobs = [job(1, "alice", 2), job(2, "alice", 1), job(3, "alice", 0)]
    result = plan(jobs, [node("a")], {}, NOW, {"alice": GPUS_2}, {"alice": Use(1, 1)})
    assert {a.job_id for a in result.assignments} == {2, 3}
    assert result.reasons == {1: "QOSMaxGRESPerUser"}


def test_gpus_handed_out_by_this_plan_count_towards_max_gpus() -> None:
    jobs = [job(1, "alice", 1), job(2, "alice", 1), job(3, "alice", 1)]
    result = plan(jobs, [node("a")], {}, NOW, {"alice": GPUS_2})
    assert [a.job_id for a in result.assignments] == [1, 2]
    assert result.reasons == {3: "QOSMaxGRESPerUser"}


def test_zero_gpu_jobs_ignore_max_gpus_but_count_as_running_jobs() -> None:
    limits = {"alice": UserLimits(max_running_jobs=3, max_gpus=0)}
    jobs = [job(i, "alice", 0) for i in range(1, 5)]
    result = plan(jobs, [node("a")], {}, NOW, limits, {"alice": Use(1, 0)})
    assert [a.job_id for a in result.assignments] == [1, 2]
    assert result.reasons == {3: "QOSMaxJobsPerUserLimit", 4: "QOSMaxJobsPerUserLimit"}


def test_users_without_limits_and_held_jobs_are_as_before() -> None:
    jobs = [job(1, "alice", 1, held=True), job(2, "bob", 1), job(3, "bob", 1)]
    result = plan(jobs, [node("a")], {}, NOW, {"alice": UserLimits(max_running_jobs=0)})
    assert {a.job_id for a in result.assignments} == {2, 3}
    assert result.reasons == {1: "JobHeldUser"}


def test_a_limited_job_takes_no_reservation() -> None:
    # Node a: 4 GPUs free now, 4 more at NOW + 100. alice's 8-GPU job would reserve the
    # node and keep bob's long 4-GPU job off it; held back by her limit, it does not.
    nodes = [node("a", 8, free=(0, 1, 2, 3), releases=((NOW + 100, 4),))]
    jobs = [job(1, "alice", 8), job(2, "bob", 4, time_limit=None)]
    unlimited = plan(jobs, nodes, {}, NOW)
    assert unlimited.assignments == ()
    assert unlimited.reasons == {1: "Resources", 2: "Priority"}
    limited = plan(jobs, nodes, {}, NOW, {"alice": UserLimits(max_gpus=4)})
    assert [a.job_id for a in limited.assignments] == [2]
    assert limited.reasons == {1: "QOSMaxGRESPerUser"}


def test_a_job_no_node_could_ever_fit_says_so_before_the_limit() -> None:
    result = plan([job(1, "alice", 16)], [node("a", 8)], {}, NOW, {"alice": GPUS_2})
    assert result.reasons == {1: "BadConstraints"}


@settings(max_examples=300)
@given(
    _scenario(),
    st.dictionaries(
        st.sampled_from(["alice", "bob", "carol"]),
        st.builds(
            UserLimits,
            max_running_jobs=st.none() | st.integers(0, 4),
            max_gpus=st.none() | st.integers(0, 10),
        ),
    ),
    st.dictionaries(
        st.sampled_from(["alice", "bob", "carol"]),
        st.builds(Use, st.integers(0, 3), st.integers(0, 6)),
    ),
)
def test_no_plan_takes_a_user_past_a_limit(
    scenario: tuple[list[Job], list[NodeView]],
    limits: dict[str, UserLimits],
    use: dict[str, Use],
) -> None:
    jobs, nodes = scenario
    result = plan(jobs, nodes, {}, NOW, limits, use)
    by_id = {j.id: j for j in jobs}
    assert {a.job_id for a in result.assignments} | set(result.reasons) == set(by_id)
    runs = Counter(by_id[a.job_id].user for a in result.assignments)
    gpus: Counter[str] = Counter()
    for a in result.assignments:
        gpus[by_id[a.job_id].user] += len(a.gpus)
    for user, cap in limits.items():
        had = use.get(user, Use())
        if cap.max_running_jobs is not None and runs[user]:
            assert had.running_jobs + runs[user] <= cap.max_running_jobs
        if cap.max_gpus is not None and gpus[user]:
            assert had.gpus + gpus[user] <= cap.max_gpus
    for job_id, reason in result.reasons.items():
        if reason.startswith("QOS"):
            assert by_id[job_id].user in limits
