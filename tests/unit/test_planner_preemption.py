"""Preemption in the planner (gbatch/head/scheduler.py preemptions): which running jobs
stop for which waiting job, and the rules: never for a job that is not otherwise
runnable or would not start after them, the fewest victims (least GPU-time lost, youngest
first), never one exempt or already told to go."""

from __future__ import annotations

import itertools
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.plan import NodeView
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


# -- beyond one node of whole GPUs (jobs across nodes, shares, types, --exclusive) --------


def placed(
    job_id: int, where: dict[str, tuple[int, ...]], started_ago: float, **kw: object
) -> Running:
    """A scavenger running on `where` (node -> its GPU ids)."""
    first = next(iter(where))
    return Running(
        job_id,
        first,
        len(where[first]),
        NOW - started_ago,
        str(kw.pop("partition", "scavenger")),
        None,
        placed=tuple(where.items()),
        **kw,  # type: ignore[arg-type]
    )


def typed_node(name: str, free: tuple[int, ...] = ()) -> NodeView:
    types = ((0, "a100"), (1, "a100"), (2, "v100"), (3, "v100"))
    return NodeView(name, 4, free, partitions=frozenset({"gpu", "scavenger"}), gpu_types=types)


def found(queue: list[Job], nodes: list[NodeView], running: list[Running]) -> dict[int, int]:
    reasons = {job.id: RESOURCES for job in queue}
    return dict(preemptions(queue, reasons, (), nodes, running, NOW, RULES).victims)


def test_a_job_across_nodes_takes_the_fewest_victims_across_its_nodes() -> None:
    running = [
        placed(101, {"n0": (0, 1)}, 600),
        placed(102, {"n0": (2, 3)}, 60),
        placed(103, {"n1": (0, 1)}, 900),
        placed(104, {"n1": (2, 3)}, 30),
        placed(106, {"n2": (0, 1, 2, 3)}, 10, partition="gpu"),  # not to be preempted
    ]
    nodes = [node("n0"), node("n1"), node("n2")]
    job = pending(1, 2, nodes=2)
    # One victim on each of n0 and n1, the least GPU-time lost on each.
    assert found([job], nodes, running) == {102: 1, 104: 1}
    made = plan([job], nodes, {}, NOW, running=running, rules=RULES)
    assert made.preemptions == {102: 1, 104: 1} and made.reasons == {1: PREEMPTION}
    # -w n2: its node holds no job it may preempt: nothing.
    assert found([pending(1, 2, nodes=2, nodelist=("n2",))], nodes, running) == {}


def test_a_victim_across_nodes_frees_all_its_nodes_at_once() -> None:
    wide = placed(201, {"n0": (0, 1, 2, 3), "n1": (0, 1, 2, 3)}, 600)
    small = [placed(202, {"n2": (0, 1)}, 30), placed(203, {"n2": (2, 3)}, 30)]
    nodes = [node("n0"), node("n1"), node("n2")]
    # Across two nodes of 4: one victim (the wide one) beats two on n2 plus another node.
    assert found([pending(1, 4, nodes=2)], nodes, [wide, *small]) == {201: 1}
    # One node of 4: n0 (one victim, the wide one) or n2 (two): the fewest.
    assert found([pending(1, 4)], nodes, [wide, *small]) == {201: 1}
    # The other node it frees is there for a second job, which waits for it; a third
    # takes n2's two.
    three = [pending(1, 4), pending(2, 4), pending(3, 4)]
    reasons = {job.id: RESOURCES for job in three}
    made = preemptions(three, reasons, (), nodes, [wide, *small], NOW, RULES)
    assert made.victims == {201: 1, 202: 3, 203: 3}
    assert made.waiting == {1, 2, 3}


def test_a_shared_gpu_comes_free_only_once_every_share_on_it_goes() -> None:
    nodes = [node("n0")]
    shares = [
        placed(301, {"n0": (0,)}, 60, share=True),
        placed(302, {"n0": (0,)}, 30, share=True),
        placed(303, {"n0": (1, 2, 3)}, 60, partition="gpu"),  # not to be preempted
    ]
    assert found([pending(1, 1)], nodes, shares) == {301: 1, 302: 1}
    kept = [shares[0], replace(shares[1], partition="gpu"), shares[2]]
    assert found([pending(1, 1)], nodes, kept) == {}


def test_a_typed_job_takes_victims_on_gpus_of_its_type() -> None:
    nodes = [typed_node("n0")]
    running = [placed(401, {"n0": (0, 1)}, 600), placed(402, {"n0": (2, 3)}, 30)]
    assert found([pending(1, 2, gpu_type="a100")], nodes, running) == {401: 1}
    assert found([pending(1, 2, gpu_type="v100")], nodes, running) == {402: 1}
    assert found([pending(1, 2)], nodes, running) == {402: 1}  # any type: the least lost
    assert found([pending(1, 3, gpu_type="a100")], nodes, running) == {}


def test_exclusive_jobs_preempt_every_job_of_a_node_and_are_preempted_whole() -> None:
    nodes = [node("n0", free=(2, 3)), node("n1", free=(1, 2, 3))]
    running = [
        placed(501, {"n0": (0, 1)}, 30),
        placed(502, {"n0": ()}, 30),  # no GPU, but on the node
        placed(503, {"n1": (0,)}, 30, partition="gpu"),  # not to be preempted
    ]
    assert found([pending(1, 0, exclusive=True)], nodes, running) == {501: 1, 502: 1}
    whole = placed(504, {"n0": (0, 1, 2, 3)}, 60, whole=True)
    assert found([pending(1, 1)], [node("n0")], [whole]) == {504: 1}


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_victims_across_nodes_and_shares_are_enough_and_fewest(data: st.DataObject) -> None:
    """One waiting job (of one node or two) over nodes whose GPUs are free, held whole by
    jobs of one node or two, or shared: its victims, if any, let it start (by an
    independent count), and no smaller set of the jobs it may preempt would."""
    draw = data.draw
    names = [f"n{i}" for i in range(draw(st.integers(1, 3)))]
    free: dict[str, list[int]] = {name: [] for name in names}
    holds: dict[int, dict[str, list[int]]] = {}
    shared: set[int] = set()
    last: int | None = None
    for name in names:
        for gpu in range(4):
            action = draw(st.sampled_from(("free", "new", "new", "extend", "extend", "share")))
            if action == "free":
                free[name].append(gpu)
            elif action == "extend" and last is not None and last not in shared:
                holds[last].setdefault(name, []).append(gpu)
            elif action == "share":
                for _ in range(2):
                    job_id = 100 + len(holds)
                    holds[job_id] = {name: [gpu]}
                    shared.add(job_id)
            else:
                last = 100 + len(holds)
                holds[last] = {name: [gpu]}
    nodes = [node(name, tuple(free[name])) for name in names]
    running = [
        Running(
            job_id,
            next(iter(where)),
            len(next(iter(where.values()))),
            NOW - draw(st.integers(0, 5)) * 100,
            draw(st.sampled_from(("gpu", "scavenger", "scavenger", "scavenger"))),
            None,
            preempting=draw(st.integers(0, 7)) == 0,
            exempt_until=NOW + draw(st.sampled_from((-1, -1, -1, 50))),
            placed=tuple((n, tuple(ids)) for n, ids in where.items()),
            share=job_id in shared,
        )
        for job_id, where in holds.items()
    ]
    job = pending(
        1,
        draw(st.integers(1, 4)),
        nodes=draw(st.integers(1, 2)),
        held=draw(st.integers(0, 7)) == 0,
    )
    reason = draw(st.sampled_from((RESOURCES, RESOURCES, RESOURCES, PRIORITY, "BeginTime")))
    made = preemptions([job], {1: reason}, (), nodes, running, NOW, RULES)

    def fits(gone: set[int]) -> bool:
        holders: dict[tuple[str, int], set[int]] = {}
        for each in running:
            for name, ids in each.placed:
                for gpu in ids:
                    holders.setdefault((name, gpu), set()).add(each.job_id)
        room = {name: len(free[name]) for name in names}
        for (name, _), jobs in holders.items():
            room[name] += jobs <= gone
        return sum(room[name] >= job.spec.gpus for name in names) >= job.spec.nodes

    told = {each.job_id for each in running if each.preempting}
    if not made.victims:
        return
    assert not job.held and reason in (RESOURCES, PRIORITY)
    assert set(made.victims.values()) == {1} and made.waiting == {1}
    chosen = set(made.victims)
    assert fits(told | chosen) and not fits(told)
    eligible = [
        each.job_id
        for each in running
        if not each.preempting and each.exempt_until <= NOW and RULES.how(job, each) is not None
    ]
    assert chosen <= set(eligible)
    for smaller in itertools.combinations(eligible, len(chosen) - 1):
        assert not fits(told | set(smaller))


def test_gpus_coming_free_from_a_run_just_ended_are_waited_for_not_preempted_for() -> None:
    """A victim just requeued leaves its GPUs settling (not free until a clean report):
    its preemptor waits for them (a Running of no job, id below 0) and takes no one else."""
    settling = Running(-1, "n0", 2, 0.0, None, None, True, placed=(("n0", (0, 1)),))
    other = placed(601, {"n0": (2, 3)}, 30)
    reasons = {1: RESOURCES}
    made = preemptions([pending(1, 2)], reasons, (), [node("n0")], [settling, other], NOW, RULES)
    assert made.victims == {} and made.waiting == {1}
    made = preemptions([pending(1, 2)], reasons, (), [node("n0")], [other], NOW, RULES)
    assert made.victims == {601: 1}
