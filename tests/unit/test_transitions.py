"""The job state machine, checked over every ordered pair of states.

The expected edges are written out here from Slurm's semantics, independently of
`gbatch.core.model._ALLOWED`, so a slip in either one shows up as a failing pair.
"""

from __future__ import annotations

import itertools

import pytest

from gbatch.core.model import FINAL_STATES, IllegalTransition, JobState, check_transition

PD = JobState.PENDING
CF = JobState.CONFIGURING
R = JobState.RUNNING
CG = JobState.COMPLETING
CD = JobState.COMPLETED
F = JobState.FAILED
CA = JobState.CANCELLED
TO = JobState.TIMEOUT
NF = JobState.NODE_FAIL
OOM = JobState.OUT_OF_MEMORY
PR = JobState.PREEMPTED

ENDINGS = frozenset({CD, F, CA, TO, NF, OOM, PR})

# current state -> the states it may move to.
EXPECTED_EDGES: dict[JobState, frozenset[JobState]] = {
    # A queued job is either dispatched, cancelled, or fails before it starts
    # (for instance its spec can no longer be satisfied).
    PD: frozenset({CF, CA, F}),
    # Allocation committed: the run starts, the dispatch is undone (requeue), a stop is
    # signalled, or it ends straight away (launch failure, cancel, node lost...).
    CF: frozenset({R, PD, CG}) | ENDINGS,
    # Running: stop signalled, requeued (node lost with retries left), or ends.
    R: frozenset({CG, PD}) | ENDINGS,
    # Stop signalled: ends, or is requeued.
    CG: frozenset({PD}) | ENDINGS,
    # A final state is left only by an explicit requeue.
    CD: frozenset({PD}),
    F: frozenset({PD}),
    CA: frozenset({PD}),
    TO: frozenset({PD}),
    NF: frozenset({PD}),
    OOM: frozenset({PD}),
    PR: frozenset({PD}),
}

ALL_PAIRS = list(itertools.product(JobState, JobState))


def _pair_id(pair: tuple[JobState, JobState]) -> str:
    return f"{pair[0].code}->{pair[1].code}"


def test_expectation_table_covers_every_state() -> None:
    assert set(EXPECTED_EDGES) == set(JobState)


def test_final_states_are_exactly_slurms_endings() -> None:
    assert frozenset(FINAL_STATES) == ENDINGS
    assert {s for s in JobState if s.is_final} == ENDINGS


@pytest.mark.parametrize("pair", ALL_PAIRS, ids=[_pair_id(p) for p in ALL_PAIRS])
def test_transition_is_allowed_exactly_when_it_is_an_expected_edge(
    pair: tuple[JobState, JobState],
) -> None:
    current, new = pair
    if new in EXPECTED_EDGES[current]:
        check_transition(current, new)  # must not raise
    else:
        with pytest.raises(IllegalTransition) as caught:
            check_transition(current, new)
        assert caught.value.current is current
        assert caught.value.new is new
        assert current.value in str(caught.value)
        assert new.value in str(caught.value)


@pytest.mark.parametrize("state", list(JobState), ids=lambda s: s.code)
def test_no_state_transitions_to_itself(state: JobState) -> None:
    with pytest.raises(IllegalTransition):
        check_transition(state, state)


FINALS_IN_ORDER = sorted(ENDINGS, key=lambda s: s.value)


@pytest.mark.parametrize("final", FINALS_IN_ORDER, ids=[s.code for s in FINALS_IN_ORDER])
def test_final_state_leaves_only_through_requeue(final: JobState) -> None:
    check_transition(final, PD)
    for other in set(JobState) - {PD}:
        with pytest.raises(IllegalTransition):
            check_transition(final, other)


def test_pending_job_cannot_skip_straight_to_running() -> None:
    with pytest.raises(IllegalTransition):
        check_transition(PD, R)


EXPECTED_CODES = {
    PD: "PD",
    CF: "CF",
    R: "R",
    CG: "CG",
    CD: "CD",
    F: "F",
    CA: "CA",
    TO: "TO",
    NF: "NF",
    OOM: "OOM",
    PR: "PR",
}


@pytest.mark.parametrize("state", list(JobState), ids=lambda s: s.value)
def test_code_is_slurms_compact_state_code(state: JobState) -> None:
    assert state.code == EXPECTED_CODES[state]


def test_codes_are_distinct() -> None:
    assert len({s.code for s in JobState}) == len(JobState)


@pytest.mark.parametrize("state", list(JobState), ids=lambda s: s.value)
def test_parse_accepts_name_and_code_in_any_case(state: JobState) -> None:
    for text in (
        state.value,
        state.value.lower(),
        state.value.title(),
        state.code,
        state.code.lower(),
        f"  {state.code.lower()}\n",
    ):
        assert JobState.parse(text) is state, text


@pytest.mark.parametrize(
    "garbage", ["", "   ", "RUN", "P", "PENDINGX", "COMPLETE", "node fail", "0", "R,PD"]
)
def test_parse_rejects_text_that_is_no_state_name_or_code(garbage: str) -> None:
    with pytest.raises(ValueError):
        JobState.parse(garbage)
