"""The planner with shares of a GPU by memory (issue 30): shared jobs go only onto
shareable GPUs with room for their budget (best fit), never beside a job of whole GPUs,
a GPU holding shares is never handed out whole, and a share never delays the reservation
of a blocked job."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.plan import NodeView
from gbatch.head.scheduler import plan

NOW = 1_000_000.0
CARD = 81920  # an 80 GB card, MiB
HEADROOM = 0  # the default (gbatch/core/shares.py)
CAPACITY = CARD - HEADROOM
G = 1024


def job(
    job_id: int,
    gpu_mem: int | None = 20 * G,
    *,
    gpus: int = 1,
    gpu_type: str | None = None,
    time_limit: int | None = 3600,
    user: str = "alice",
    image: str | None = None,
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
            gpu_mem_mb=gpu_mem,
            time_limit=time_limit,
            image=image,
        ),
        state=JobState.PENDING,
        submit_time=NOW - 10_000 + job_id,
    )


@dataclass(frozen=True)
class Card:
    """One GPU of a test node: what holds it, and whether it is shareable."""

    state: str = "free"  # free | exclusive | shared | foreign
    shareable: bool = True
    end: float = math.inf  # when its job (exclusive) or its last share (shared) ends
    used: int = 0  # MiB: the budgets of its shares (shared), or foreign memory
    type: str = ""


def node(name: str, cards: tuple[Card, ...], *, available: bool = True) -> NodeView:
    """A node as Fleet.node_view gives it: free GPUs, releases per job or shared card,
    and the room of its shareable GPUs (shares.room over CAPACITY)."""
    free = tuple(i for i, c in enumerate(cards) if c.state == "free")
    held = [(i, c) for i, c in enumerate(cards) if c.state in ("exclusive", "shared")]
    room = []
    for i, c in enumerate(cards):
        if not c.shareable or c.state == "exclusive":
            continue
        left = CAPACITY - c.used
        if left > 0:
            room.append((i, left, c.end if c.state == "shared" else -math.inf))
    gpu_types = tuple((i, c.type) for i, c in enumerate(cards) if c.type)
    return NodeView(
        name=name,
        gpus_total=len(cards),
        free_gpus=free,
        available=available,
        releases=tuple((c.end, 1) for _, c in held),
        gpu_types=gpu_types,
        features=frozenset(c.type for c in cards if c.type),
        typed_releases=tuple((c.end, c.type, 1) for _, c in held if c.type),
        shareable=tuple((i, CAPACITY) for i, c in enumerate(cards) if c.shareable),
        share_room=tuple(room),
    )


def shares_of(result_gpus: dict[int, tuple[str, tuple[int, ...]]]) -> dict[int, tuple[int, ...]]:
    return {job_id: gpus for job_id, (_, gpus) in result_gpus.items()}


def placed(jobs: list[Job], nodes: list[NodeView]) -> dict[int, tuple[str, tuple[int, ...]]]:
    return {a.job_id: (a.node, a.gpus) for a in plan(jobs, nodes, {}, NOW).assignments}


def test_four_20g_shares_fit_one_80g_card_and_a_fifth_waits_resources() -> None:
    nodes = [node("n", (Card(),))]
    jobs = [job(i) for i in range(1, 6)]
    result = plan(jobs, nodes, {}, NOW)
    assert [(a.job_id, a.node, a.gpus) for a in result.assignments] == [
        (i, "n", (0,)) for i in range(1, 5)
    ]
    assert result.reasons == {5: "Resources"}


def test_a_card_with_foreign_memory_takes_fewer_shares() -> None:
    nodes = [node("n", (Card("foreign", used=30 * G),))]
    result = plan([job(i) for i in range(1, 5)], nodes, {}, NOW)
    assert [a.job_id for a in result.assignments] == [1, 2]
    assert result.reasons == {3: "Resources", 4: "Resources"}


def test_shares_never_go_onto_a_card_that_is_not_shareable_or_held_whole() -> None:
    nodes = [node("n", (Card(shareable=False), Card("exclusive", end=NOW + 60)))]
    result = plan([job(1)], nodes, {}, NOW)
    assert result.assignments == ()
    assert result.reasons == {1: "Resources"}


def test_a_whole_gpu_job_never_lands_on_a_card_holding_shares() -> None:
    # Card 0 holds a share; card 1 is free. Shares and the whole job keep apart.
    nodes = [node("n", (Card("shared", used=20 * G, end=NOW + 60), Card()))]
    got = placed([job(1, None), job(2, None)], nodes)
    assert got == {1: ("n", (1,))}


def test_a_share_taking_a_whole_free_card_keeps_it_from_whole_gpu_jobs() -> None:
    nodes = [node("n", (Card(),))]
    result = plan([job(1), job(2, None)], nodes, {}, NOW)
    assert [(a.job_id, a.gpus) for a in result.assignments] == [(1, (0,))]
    assert result.reasons[2] == "Resources"


def test_best_fit_takes_the_card_with_the_least_room_that_fits_so_whole_cards_stay_whole() -> None:
    nodes = [
        node("a", (Card(),)),
        node("b", (Card("shared", used=40 * G, end=NOW + 60), Card("shared", used=70 * G))),
    ]
    # b:1 has 9G left (too little), b:0 has 39G: best fit; a's whole card stays whole.
    assert placed([job(1)], nodes) == {1: ("b", (0,))}
    # Ties go to the node first by name, then the lowest GPU.
    twins = [node("b", (Card(), Card())), node("a", (Card(), Card()))]
    assert placed([job(1)], twins) == {1: ("a", (0,))}


def test_a_typed_share_goes_only_onto_a_card_of_its_type() -> None:
    nodes = [node("n", (Card(type="rtx4090"), Card(type="a100")))]
    assert placed([job(1, gpu_type="a100")], nodes) == {1: ("n", (1,))}


def test_a_share_larger_than_every_card_is_bad_constraints_and_without_shareable_ones_too() -> None:
    nodes = [node("n", (Card(),)), node("m", (Card(shareable=False),))]
    result = plan([job(1, 81 * G), job(2, 10 * G, gpu_type="h100")], nodes, {}, NOW)
    assert result.reasons == {1: "BadConstraints", 2: "BadConstraints"}
    assert plan([job(1)], [node("m", (Card(shareable=False),))], {}, NOW).reasons == {
        1: "BadConstraints"
    }


def test_a_share_whose_cards_are_all_down_waits_node_down() -> None:
    nodes = [node("n", (Card(),), available=False), node("m", (Card(shareable=False),))]
    assert plan([job(1)], nodes, {}, NOW).reasons == {1: "NodeDown"}


def test_a_share_never_delays_the_reservation_of_a_blocked_whole_gpu_job() -> None:
    # Job 1 wants both GPUs: card 0 is free, card 1 ends at NOW + 100: it reserves the
    # node from then. A long share may not take card 0; a short one may.
    cards = (Card(), Card("exclusive", end=NOW + 100))
    result = plan([job(1, None, gpus=2), job(2, time_limit=None)], [node("n", cards)], {}, NOW)
    assert result.starts == {1: NOW + 100}
    assert result.assignments == ()
    assert result.reasons == {1: "Resources", 2: "Resources"}
    short = plan([job(1, None, gpus=2), job(2, time_limit=50)], [node("n", cards)], {}, NOW)
    assert [a.job_id for a in short.assignments] == [2]
    # A share on a card whose shares end after the start anyway costs it nothing.
    later = (Card(), Card(), Card("shared", used=20 * G, end=NOW + 500))
    ok = plan(
        [job(1, None, gpus=2), job(2, None, gpus=1), job(3, time_limit=None)],
        [node("n", (later[2], Card("exclusive", end=NOW + 100), Card("exclusive", end=NOW + 100)))],
        {},
        NOW,
    )
    assert [a.job_id for a in ok.assignments] == [3]


def test_a_share_extending_a_shared_cards_release_costs_the_reservation() -> None:
    # Card 0's share ends at NOW + 100, when job 1 (2 GPUs) may start with card 1. A
    # share there without a time limit would keep card 0 past that: it waits.
    cards = (Card("shared", used=20 * G, end=NOW + 100), Card("exclusive", end=NOW + 100))
    result = plan([job(1, None, gpus=2), job(2, time_limit=None)], [node("n", cards)], {}, NOW)
    assert result.starts == {1: NOW + 100}
    assert result.reasons[2] == "Resources"


# -- invariants over any fleet and queue ---------------------------------------------

STATES = ("free", "free", "exclusive", "shared", "foreign")
ENDS = (NOW + 10, NOW + 500, math.inf)


@st.composite
def scenario(draw: st.DrawFn) -> tuple[list[Job], list[NodeView], dict[tuple[str, int], Card]]:
    nodes, cards_by = [], {}
    for n in range(draw(st.integers(0, 3))):
        sharing = draw(st.booleans()) or draw(st.booleans())
        cards = []
        for i in range(draw(st.integers(0, 4))):
            shareable = (sharing and draw(st.booleans())) or (sharing and i == 0)
            state = draw(st.sampled_from(STATES))
            if state == "shared" and not shareable:
                state = "exclusive"
            used = {
                "shared": draw(st.sampled_from((10 * G, 20 * G, 60 * G, CAPACITY))),
                "foreign": draw(st.sampled_from((2 * G, 30 * G, CARD))),
            }.get(state, 0)
            card = Card(
                state,
                shareable,
                draw(st.sampled_from(ENDS)),
                used,
                draw(st.sampled_from(("", "a100", "a100", "rtx4090"))),
            )
            cards.append(card)
            cards_by[(f"n{n}", i)] = card
        nodes.append(
            node(f"n{n}", tuple(cards), available=draw(st.booleans()) or draw(st.booleans()))
        )
    jobs = []
    for i in range(draw(st.integers(0, 20))):
        share = draw(st.sampled_from((None, None, 10 * G, 20 * G, 40 * G, 90 * G)))
        jobs.append(
            job(
                i,
                share,
                gpus=1 if share is not None else draw(st.integers(0, 3)),
                gpu_type=draw(st.sampled_from((None, None, "a100", "rtx4090"))),
                time_limit=draw(st.sampled_from((None, 5, 100, 1000))),
                user=draw(st.sampled_from(("alice", "bob"))),
            )
        )
    jobs = [j if j.spec.gpus else _untyped(j) for j in jobs]
    return jobs, nodes, cards_by


def _untyped(j: Job) -> Job:
    return Job(j.id, j.uid, j.user, j.spec.replace(gpu_type=None), j.state, j.submit_time)


@settings(max_examples=500, deadline=None)
@given(scenario())
def test_no_card_is_overcommitted_and_shares_never_sit_beside_a_whole_gpu_job(
    case: tuple[list[Job], list[NodeView], dict[tuple[str, int], Card]],
) -> None:
    jobs, nodes, cards = case
    result = plan(jobs, nodes, {}, NOW)
    by_id = {j.id: j for j in jobs}
    budgets: dict[tuple[str, int], int] = {}
    whole: set[tuple[str, int]] = set()
    for a in result.assignments:
        spec = by_id[a.job_id].spec
        if spec.gpu_mem_mb is None:
            whole |= {(a.node, g) for g in a.gpus}
            continue
        ((gpu,),) = (a.gpus,)
        card = cards[(a.node, gpu)]
        assert card.shareable and card.state != "exclusive"
        assert spec.gpu_type is None or card.type == spec.gpu_type
        budgets[(a.node, gpu)] = budgets.get((a.node, gpu), 0) + spec.gpu_mem_mb
    for key, total in budgets.items():
        card = cards[key]
        # Budgets (old and new) plus foreign memory stay under the total less headroom.
        assert total + card.used <= CARD - HEADROOM
        assert key not in whole
    for key in whole:
        assert cards[key].state == "free"


@settings(max_examples=500, deadline=None)
@given(scenario())
def test_backfill_and_shares_never_delay_the_reservation(
    case: tuple[list[Job], list[NodeView], dict[tuple[str, int], Card]],
) -> None:
    """At the reserved job's start T, some node it may use still has its GPUs: free ones
    that no job of this plan holds past T, and those whose jobs or shares end by T and
    that no share of this plan keeps past T."""
    jobs, nodes, cards = case
    result = plan(jobs, nodes, {}, NOW)
    if not result.starts:
        return
    ((reserved_id, start),) = result.starts.items()
    by_id = {j.id: j for j in jobs}
    spec = by_id[reserved_id].spec
    held_past: set[tuple[str, int]] = set()
    for a in result.assignments:
        limit = by_id[a.job_id].time_limit
        if limit is None or NOW + limit > start:
            held_past |= {(a.node, g) for g in a.gpus}

    def there(view: NodeView) -> int:
        count = 0
        for i in range(view.gpus_total):
            card = cards[(view.name, i)]
            if spec.gpu_type is not None and card.type != spec.gpu_type:
                continue
            comes_free = card.state == "free" or (
                card.state in ("exclusive", "shared") and card.end <= start
            )
            count += comes_free and (view.name, i) not in held_past
        return count

    assert any(there(v) >= spec.gpus for v in nodes if v.available)
