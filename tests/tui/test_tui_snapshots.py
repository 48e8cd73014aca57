"""Snapshot tests of every view at 80x24 and 160x48, over the fixed lab of fakelab.

pytest-textual-snapshot compares an SVG of the screen with the file checked in under
__snapshots__/. After a change meant to alter the look, look at the new pictures and
rewrite them with `pytest tests/tui/test_tui_snapshots.py --snapshot-update`; a
mismatch writes snapshot_report.html (expected and actual side by side).

Nothing races: the fake link answers the same data on every call, the refresh timer
is an hour, the clock is fixed, timestamps print in UTC, and each scene waits for its
data to be on screen before the picture is taken.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import scenes
from fakelab import LOGGED_JOB, ME, FakeLink, lab_app, utc_time_zone

from gbatch.tui.data import QueueView
from gbatch.tui.rows import QueueFilter

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]
SnapCompare = Callable[..., bool]


@pytest.fixture(autouse=True)
def fixed_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("NO_COLOR", raising=False)  # textual reads it: no colour at all
    with utc_time_zone():
        yield


def matches(snap_compare: SnapCompare, size: tuple[int, int], scene: scenes.Scene) -> bool:
    return snap_compare(lab_app(), terminal_size=size, run_before=scene)


@pytest.mark.parametrize("size", SIZES)
def test_queue_of_all_users(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    assert matches(snap_compare, size, scenes.all_users_queue)


@pytest.mark.parametrize("size", SIZES)
def test_queue_of_mine_is_the_first_view(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    assert matches(snap_compare, size, scenes.my_queue)


@pytest.mark.parametrize("size", SIZES)
def test_finished_jobs_view(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    assert matches(snap_compare, size, scenes.finished_jobs)


@pytest.mark.parametrize("size", SIZES)
def test_job_view_with_its_log(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    assert matches(snap_compare, size, scenes.job_view)


@pytest.mark.parametrize("size", SIZES)
def test_nodes_view(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    assert matches(snap_compare, size, scenes.nodes_view)


@pytest.mark.parametrize("size", SIZES)
def test_help_over_the_queue(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    assert matches(snap_compare, size, scenes.help_over_queue)


@pytest.mark.parametrize("size", SIZES)
def test_cancel_asks_first(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    assert matches(snap_compare, size, scenes.cancel_question)


def test_the_fake_link_answers_the_same_on_every_read() -> None:
    """What keeps the pictures still while the screens' timers run."""
    link = FakeLink()
    for view in (QueueView(QueueFilter(ME)), QueueView(QueueFilter(ME, mine=False), finished=True)):
        assert link.queue_page(view) == link.queue_page(view)
    assert link.nodes() == link.nodes()
    assert link.job(LOGGED_JOB) == link.job(LOGGED_JOB)
    first = link.log(LOGGED_JOB, 0)
    assert first.data.count("\n") > 40
    assert link.log(LOGGED_JOB, first.offset).data == ""
