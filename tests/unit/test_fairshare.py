from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gbatch.head.fairshare import accrue, decay, factors

DAY = 86_400.0
WEEK = 7 * DAY


def test_usage_halves_after_one_half_life() -> None:
    assert decay(100.0, WEEK, WEEK) == pytest.approx(50.0)


def test_usage_quarters_after_two_half_lives() -> None:
    assert decay(100.0, 2 * WEEK, WEEK) == pytest.approx(25.0)


def test_decay_over_part_of_a_half_life_follows_the_exponential() -> None:
    assert decay(100.0, DAY, WEEK) == pytest.approx(100.0 * 2 ** (-1 / 7))


def test_decay_compounds_like_one_long_decay() -> None:
    stepwise = decay(decay(80.0, 3 * DAY, WEEK), 4 * DAY, WEEK)
    assert stepwise == pytest.approx(decay(80.0, WEEK, WEEK))


@pytest.mark.parametrize("elapsed", [0.0, -1.0, -WEEK])
def test_no_or_negative_elapsed_time_leaves_usage_unchanged(elapsed: float) -> None:
    assert decay(100.0, elapsed, WEEK) == 100.0


@pytest.mark.parametrize("half_life", [0.0, -WEEK])
def test_non_positive_half_life_is_refused(half_life: float) -> None:
    with pytest.raises(ValueError, match="half_life"):
        decay(1.0, 1.0, half_life)


def test_accrue_decays_the_stored_total_then_adds_the_run() -> None:
    assert accrue(100.0, 0.0, 10.0, WEEK, WEEK) == pytest.approx(60.0)


def test_accrue_at_the_stored_instant_just_adds() -> None:
    assert accrue(100.0, 50.0, 8 * 3600.0, 50.0, WEEK) == pytest.approx(100.0 + 8 * 3600.0)


def test_accrue_refuses_negative_gpu_seconds() -> None:
    with pytest.raises(ValueError, match="gpu_seconds"):
        accrue(0.0, 0.0, -1.0, 0.0, WEEK)


def test_users_without_usage_all_get_factor_one() -> None:
    assert factors({}, ["alice", "bob"]) == {"alice": 1.0, "bob": 1.0}


def test_no_users_and_no_usage_gives_no_factors() -> None:
    assert factors({}, []) == {}


def test_user_who_used_exactly_their_share_gets_one_half() -> None:
    result = factors({"alice": 50.0, "bob": 50.0}, ["alice", "bob"])
    assert result == pytest.approx({"alice": 0.5, "bob": 0.5})


def test_user_with_all_usage_of_two_gets_one_quarter() -> None:
    # U = 1, S = 1/2: F = 2^-2
    result = factors({"bob": 100.0}, ["alice", "bob"])
    assert result == pytest.approx({"alice": 1.0, "bob": 0.25})


def test_user_with_usage_but_no_pending_jobs_counts_towards_shares() -> None:
    result = factors({"carol": 300.0, "bob": 100.0}, ["alice", "bob"])
    # n = 3: alice (pending), bob (pending, usage), carol (usage)
    assert set(result) == {"alice", "bob", "carol"}
    assert result["alice"] == 1.0
    assert result["bob"] == pytest.approx(2 ** (-0.25 * 3))
    assert result["carol"] == pytest.approx(2 ** (-0.75 * 3))


def test_user_with_zero_usage_and_no_pending_jobs_is_not_considered() -> None:
    assert set(factors({"idle": 0.0, "bob": 5.0}, ["bob"])) == {"bob"}


def test_heavier_user_gets_the_lower_factor() -> None:
    result = factors({"alice": 10.0, "bob": 1000.0}, ["alice", "bob"])
    assert result["alice"] > result["bob"]


def test_factor_stays_positive_when_one_user_of_thousands_has_all_usage() -> None:
    users = [f"u{i}" for i in range(5000)]
    result = factors({"u0": 1e9}, users)
    assert 0.0 < result["u0"] < result["u1"] == 1.0


@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "d", "e"]),
        st.floats(min_value=-10.0, max_value=1e12, allow_nan=False),
    ),
    st.lists(st.sampled_from(["a", "b", "c", "x"]), max_size=6),
)
def test_every_factor_is_in_the_half_open_unit_interval(
    usage: dict[str, float], users: list[str]
) -> None:
    for value in factors(usage, users).values():
        assert 0.0 < value <= 1.0
        assert not math.isnan(value)
