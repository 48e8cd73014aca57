from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gbatch.core.timefmt import (
    MAX_TIME_LIMIT_S,
    TimeLimitError,
    format_duration,
    format_elapsed_fixed,
    format_timestamp,
    parse_time_limit,
)

ACCEPTED = "Use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, or UNLIMITED"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5", 5 * 60),
        ("90", 90 * 60),
        ("5:07", 5 * 60 + 7),
        ("90:00", 90 * 60),
        ("1:02:03", 3723),
        ("25:00:00", 25 * 3600),
        ("1-02", 86400 + 2 * 3600),
        ("1-02:03", 86400 + 2 * 3600 + 3 * 60),
        ("1-02:03:04", 86400 + 2 * 3600 + 3 * 60 + 4),
        ("1-00:00:00", 86400),
        ("0:30", 30),
        (" 10 ", 600),
    ],
)
def test_every_slurm_form_parses_to_seconds(text: str, seconds: int) -> None:
    assert parse_time_limit(text) == seconds


def test_an_int_is_minutes_as_in_slurm() -> None:
    assert parse_time_limit(90) == 90 * 60


@pytest.mark.parametrize("text", ["UNLIMITED", "unlimited", "Infinite", "INFINITE"])
def test_unlimited_words_in_any_case_mean_no_limit(text: str) -> None:
    assert parse_time_limit(text) is None


@pytest.mark.parametrize(
    "value",
    ["1:2:3:4", "", "abc", "1h", "-5", "1.5", "1-2-3", "1-", ":30", "1:", "٣", "9" * 5000],
)
def test_garbage_is_refused_with_the_accepted_forms(value: str) -> None:
    with pytest.raises(TimeLimitError) as caught:
        parse_time_limit(value)
    assert caught.value.field == "time_limit"
    assert ACCEPTED in caught.value.message


def test_the_documented_example_message_is_exact() -> None:
    with pytest.raises(ValueError) as caught:
        parse_time_limit("1:2:3:4")
    assert str(caught.value) == f'time_limit: "1:2:3:4" is not a time limit. {ACCEPTED}'


@pytest.mark.parametrize("value", ["0", "0:00", "0-00:00:00", 0, -5])
def test_zero_or_negative_is_refused_pointing_to_unlimited(value: str | int) -> None:
    with pytest.raises(TimeLimitError) as caught:
        parse_time_limit(value)
    assert "longer than zero" in caught.value.message
    assert "UNLIMITED for no limit" in caught.value.message


@pytest.mark.parametrize(
    ("text", "unit"),
    [("10:75", "seconds"), ("1:75:00", "minutes"), ("1-30", "hours"), ("1-02:60", "minutes")],
)
def test_fields_after_the_first_must_stay_in_range(text: str, unit: str) -> None:
    with pytest.raises(TimeLimitError) as caught:
        parse_time_limit(text)
    assert f"{unit} must be under" in caught.value.message
    assert ACCEPTED in caught.value.message


def test_limits_over_a_year_are_refused_as_likely_typos() -> None:
    with pytest.raises(TimeLimitError) as caught:
        parse_time_limit("400-00")
    assert "Shorten it, or use UNLIMITED" in caught.value.message


def test_a_year_exactly_is_accepted() -> None:
    assert parse_time_limit("365-00:00:00") == MAX_TIME_LIMIT_S


@pytest.mark.parametrize("value", [True, 1.5, None, [1]])
def test_non_text_non_int_values_are_refused(value: object) -> None:
    with pytest.raises(TimeLimitError) as caught:
        parse_time_limit(value)  # type: ignore[arg-type]
    assert ACCEPTED in caught.value.message


def test_the_field_name_is_the_one_the_caller_gives() -> None:
    with pytest.raises(TimeLimitError) as caught:
        parse_time_limit("soon", field="-t/--time")
    assert caught.value.field == "-t/--time"
    assert str(caught.value).startswith('-t/--time: "soon" is not a time limit.')


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0:00"),
        (7, "0:07"),
        (307, "5:07"),
        (3723, "1:02:03"),
        (93784, "1-02:03:04"),
        (86400 * 12, "12-00:00:00"),
        (59.99, "0:59"),
        (-3, "0:00"),
        (None, "UNLIMITED"),
        (float("inf"), "UNLIMITED"),
        (float("nan"), "INVALID"),
    ],
)
def test_format_duration_matches_slurm_time_column(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "00:00:00"),
        (307, "00:05:07"),
        (3723, "01:02:03"),
        (93784, "1-02:03:04"),
        (-1, "00:00:00"),
        (float("nan"), "INVALID"),
    ],
)
def test_format_elapsed_fixed_matches_sacct_elapsed(seconds: float, text: str) -> None:
    assert format_elapsed_fixed(seconds) == text


@pytest.mark.parametrize("seconds", [60, 61, 3599, 3600, 3723, 86400, 93784, MAX_TIME_LIMIT_S])
def test_formatted_durations_parse_back_to_the_same_seconds(seconds: int) -> None:
    assert parse_time_limit(format_duration(seconds)) == seconds
    assert parse_time_limit(format_elapsed_fixed(seconds)) == seconds


@given(st.integers(min_value=1, max_value=MAX_TIME_LIMIT_S))
def test_any_limit_round_trips_through_both_formats(seconds: int) -> None:
    # Plain "M:SS" reads back as MM:SS and "H:MM:SS" as HH:MM:SS, so every form is exact.
    assert parse_time_limit(format_duration(seconds)) == seconds
    assert parse_time_limit(format_elapsed_fixed(seconds)) == seconds


@pytest.fixture
def utc() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TZ", "UTC")
        time.tzset()
        yield
    time.tzset()


@pytest.mark.usefixtures("utc")
def test_format_timestamp_is_slurm_iso_style_in_local_time() -> None:
    assert format_timestamp(1796209445.7) == "2026-12-02T11:04:05"


@pytest.mark.parametrize("epoch", [None, float("nan"), float("inf"), 1e300])
def test_format_timestamp_of_nothing_is_unknown(epoch: float | None) -> None:
    assert format_timestamp(epoch) == "Unknown"
