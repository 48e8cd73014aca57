"""Preemption in the planner (gbatch/head/scheduler.py preemptions): which running jobs
stop for which waiting job, and the rules: never for a job that is not otherwise
runnable or would not start after them, the fewest victims (least GPU-time lost, youngest
first), never one exempt or already told to go."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from gbatch.core.model import Job, JobSpec, JobState, NodeView
from gbatch.core.qos import parse_qos
from gbatch.head.scheduler import (
    PREEMPTION,
    PRIORITY,
    RESOURCES,
    PreemptRules,
    Running,
    plan,
    preemptions,
)

NOW = 1_700_000_000.0
RULES = PreemptRules(
    {"gpu": (1, "off", 120), "scavenger": (0, "requeue", 30)},
    parse_qos({"high": {"preempt": ["low"], "users": "ALL"}, "low": {"users": "ALL"}}),
)


def pending(job_id: int, gpus: int, partition: str = "gpu", **kw: object) -> Job:
    spec = JobSpec(name="j", command=("true",), gpus=gpus, partition=partition)
    held = bool(kw.pop("held", False))
    spec = spec.replace(**kw)
    return Job(job_id, 1000, "alice", spec, JobState.PENDING, NOW + job_id, held=held)


def node(name: str = "n0", free: tuple[int, ...] = (), total: int = 4) -> NodeView:
    return NodeView(name, total, free, partitions=frozenset({"gpu", "scavenger"}))


def scav(job_id: int, gpus: int, started_ago: float, where: str = "n0", **kw: object) -> Running:
    return Running(job_id, where, gpus, NOW - started_ago, "scavenger", None, **kw)  # type: ignore[arg-type]


def test_a_normal_job_preempts_the_fewest_scavengers_least_lost_youngest_first() -> None:
    running = [scav(101, 1, 600), scav(102, 1, 60), scav(103, 2, 60), scav(104, 1, 30)]
    job = pending(1, 2)
    made = plan([job], [node()], {}, NOW, running=running, rules=RULES)
    # One victim of 2 GPUs beats two of 1; among sets of one, 103 is the only one.
    assert made.preemptions == {103: 1}
    assert made.reasons == {1: PREEMPTION}
    # Two GPUs free already: one victim of one GPU is enough; the youngest (least lost).
    made = plan([pending(1, 3)], [node(free=(0, 1))], {}, NOW, running=running, rules=RULES)
    assert made.preemptions == {104: 1}


def test_no_preemption_for_a_job_that_cannot_preempt_or_would_not_start() -> None:
    running = [scav(101, 2, 60), scav(102, 2, 60, exempt_until=NOW + 10)]
    # A scavenger job waits: it may preempt no one.
    made = plan([pending(1, 1, "scavenger")], [node()], {}, NOW, running=running, rules=RULES)
    assert made.preemptions == {} and made.reasons == {1: RESOURCES}
    # 4 GPUs: 102 is exempt, so the job would not start after 101 alone: no victim.
    made = plan([pending(1, 4)], [node()], {}, NOW, running=running, rules=RULES)
    assert made.preemptions == {}
    # Held, or asking more than the node has: never.
    made = plan([pending(1, 2, held=True)], [node()], {}, NOW, running=running, rules=RULES)
    assert made.preemptions == {}
    made = plan([pending(1, 8)], [node()], {}, NOW, running=running, rules=RULES)
    assert made.preemptions == {}


def test_victims_already_told_count_as_coming_free() -> None:
    running = [scav(101, 2, 60, preempting=True), scav(102, 2, 60)]
    made = plan([pending(1, 2), pending(2, 2)], [node()], {}, NOW, running=running, rules=RULES)
    # Job 1 (older) waits for 101's GPUs; job 2 takes 102.
    assert made.preemptions == {102: 2}
    assert made.reasons == {1: PREEMPTION, 2: PREEMPTION}
    made = plan([pending(1, 2)], [node()], {}, NOW, running=running, rules=RULES)
    assert made.preemptions == {} and made.reasons == {1: PREEMPTION}


def test_a_qos_preempts_the_qos_it_names() -> None:
    low = Running(101, "n0", 4, NOW - 60, "gpu", "low")
    other = Running(102, "n1", 4, NOW - 60, "gpu", None)
    nodes = [node("n0"), node("n1")]
    made = plan([pending(1, 4, qos="high")], nodes, {}, NOW, running=[low, other], rules=RULES)
    assert made.preemptions == {101: 1}
    made = plan([pending(1, 4)], nodes, {}, NOW, running=[low, other], rules=RULES)
    assert made.preemptions == {}
    assert RULES.how(pending(1, 4, qos="high"), low) == ("requeue", 120)
    assert RULES.how(pending(1, 4), scav(3, 1, 0)) == ("requeue", 30)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_victims_only_for_a_runnable_preemptor_and_never_more_than_needed(
    data: st.DataObject,
) -> None:
    draw = data.draw
    nodes = [
        node(f"n{i}", tuple(range(draw(st.integers(0, 2)))), total=4)
        for i in range(draw(st.integers(1, 3)))
    ]
    running = [
        Running(
            100 + k,
            draw(st.sampled_from([n.name for n in nodes])),
            draw(st.integers(1, 3)),
            NOW - draw(st.integers(0, 5)) * 100,
            draw(st.sampled_from(("gpu", "scavenger"))),
            draw(st.sampled_from((None, "low"))),
            preempting=draw(st.booleans()) and draw(st.booleans()),
            exempt_until=NOW + draw(st.sampled_from((-1, 50))),
        )
        for k in range(draw(st.integers(0, 6)))
    ]
    queue = [
        pending(
            i,
            draw(st.integers(1, 5)),
            draw(st.sampled_from(("gpu", "scavenger"))),
            qos=draw(st.sampled_from((None, "high"))),
            held=draw(st.booleans()) and draw(st.booleans()),
        )
        for i in range(1, draw(st.integers(1, 4)) + 1)
    ]
    reasons = {
        job.id: draw(st.sampled_from((RESOURCES, PRIORITY, "QOSMaxGRESPerUser", "BeginTime")))
        for job in queue
    }
    found = preemptions(queue, reasons, (), nodes, running, NOW, RULES)
    by_id = {job.id: job for job in queue}
    by_run = {each.job_id: each for each in running}
    for victim, preemptor in found.victims.items():
        job = by_id[preemptor]
        run = by_run[victim]
        # Only for a job otherwise runnable, that may preempt this one.
        assert not job.held and reasons[job.id] in (RESOURCES, PRIORITY)
        assert RULES.how(job, run) is not None
        assert not run.preempting and run.exempt_until <= NOW
        assert preemptor in found.waiting
    for preemptor in set(found.victims.values()):
        job = by_id[preemptor]
        chosen = [by_run[v] for v, p in found.victims.items() if p == preemptor]
        (where,) = {each.node for each in chosen}
        view = next(n for n in nodes if n.name == where)
        coming = sum(e.gpus for e in running if e.node == where and e.preempting)
        have = len(view.free_gpus) + coming
        # Enough once they go (other preemptors on that node may need theirs too)...
        assert have + sum(e.gpus for e in chosen) >= job.spec.gpus
        # ...and no smaller set of the ones it could take would do on their own.
        eligible = [
            e
            for e in running
            if e.node == where
            and not e.preempting
            and e.exempt_until <= NOW
            and RULES.how(job, e) is not None
        ]
        for smaller in itertools.combinations(eligible, len(chosen) - 1):
            if have + sum(e.gpus for e in smaller) >= job.spec.gpus:
                # Only possible when an earlier preemptor took from the node first.
                assert len(set(found.victims.values())) > 1 or len(found.waiting) > 1
