"""When a silent node is suspect or down, and when its runs count as stopped."""

from __future__ import annotations

from typing import Any

import pytest

from gbatch.head.liveness import FENCE_MARGIN_SECONDS, node_liveness


def liveness(silent: float, **overrides: Any) -> Any:
    values: dict[str, Any] = {
        "last_heard": 1000.0,
        "watching_since": 0.0,
        "reporting": True,
        "now": 1000.0 + silent,
        "report_interval": 1.0,
        "down_after": 60.0,
        "lease": 30.0,
        "fences_runs": True,
    }
    values.update(overrides)
    return node_liveness(**values)


def test_a_node_that_reports_is_up() -> None:
    assert liveness(0.5).state == "up"
    assert not liveness(0.5).runs_stopped


def test_a_few_missed_reports_make_a_node_suspect_not_down() -> None:
    assert liveness(4.9).state == "up"
    suspect = liveness(5.0)
    assert (suspect.state, suspect.runs_stopped) == ("suspect", False)


def test_a_lost_connection_is_suspect_at_once() -> None:
    assert liveness(0.1, reporting=False).state == "suspect"


def test_silent_for_the_grace_period_is_down() -> None:
    assert liveness(59.9).state == "suspect"
    assert liveness(60.0).state == "down"


def test_runs_of_a_down_node_count_as_stopped_only_after_the_lease_and_margin() -> None:
    # down_after shorter than the lease: down, but its runs may still be alive.
    early = liveness(31.0, down_after=10.0)
    assert (early.state, early.runs_stopped) == ("down", False)
    assert liveness(30.0 + FENCE_MARGIN_SECONDS, down_after=10.0).runs_stopped


def test_a_node_that_does_not_fence_never_has_its_runs_counted_as_stopped() -> None:
    assert not liveness(10_000.0, fences_runs=False).runs_stopped


def test_a_node_never_heard_counts_its_silence_from_when_the_head_began_watching() -> None:
    # A restarted head: the previous one may have renewed the lease just before dying.
    never = liveness(0.0, last_heard=None, watching_since=990.0, now=1000.0, reporting=False)
    # Down (nothing says it ever came up), but its runs may live for the lease yet.
    assert (never.state, never.silent_seconds, never.runs_stopped) == ("down", 10.0, False)
    stopped = liveness(0.0, last_heard=None, watching_since=990.0, now=1025.0, reporting=False)
    assert stopped.runs_stopped


@pytest.mark.parametrize(("silent", "text"), [(12.4, "no report for 12 s")])
def test_describe_says_how_long_and_why(silent: float, text: str) -> None:
    assert liveness(silent).describe("") == text
    assert liveness(silent).describe("connection refused") == f"{text}: connection refused"
