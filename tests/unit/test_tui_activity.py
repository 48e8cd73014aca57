"""The TUI's GPU pictures at terminal resolution (gbatch/tui/activity.py) and how the
nodes view's link reads them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gbatch.protocol import requests
from gbatch.protocol.client import RequestFailed
from gbatch.tui.activity import EMPTY, LEVELS, Held, lane, sparkline, user_style, users_text
from gbatch.tui.data import DaemonLink

NOW = 1_767_225_600.0


def test_a_sparkline_cell_is_its_samples_mean_and_blank_without_one() -> None:
    samples = [(NOW - 600 + 30 * i, 0.0) for i in range(10)]  # the first half: 0 %
    samples += [(NOW - 300 + 30 * i, 100.0) for i in range(9)]  # then 100 %, one cell empty
    samples += [(NOW - 15, None)]  # not told: no sample
    line = sparkline(samples, NOW, span=600, width=20)
    assert line == LEVELS[0] * 10 + LEVELS[-1] * 9 + " "
    assert sparkline([(NOW - 10, 50.0), (NOW - 5, 0.0)], NOW, 600, 20)[-1] == LEVELS[2]


def test_a_lane_cell_belongs_to_the_run_that_held_most_of_it() -> None:
    runs = [
        Held(NOW - 6 * 3600, NOW - 3 * 3600, 7, "alice"),
        Held(NOW - 3 * 3600 + 60, None, 8, ""),  # another user's, still on
    ]
    cells = lane(runs, NOW, span=6 * 3600, width=6)
    assert cells == [("█", "alice")] * 3 + [("█", "")] * 3
    assert lane([], NOW, 3600, 4) == [(EMPTY, "")] * 4
    assert users_text(runs, NOW) == "other,alice"
    assert user_style("") == "dim" and user_style("alice") == user_style("alice")


def test_the_nodes_view_still_lists_the_gpus_from_a_daemon_without_the_history(
    monkeypatch: Any,
) -> None:
    link = DaemonLink(Path("/nonexistent/gbatchd.sock"))

    def call(request: requests.Request) -> dict[str, Any]:
        if isinstance(request, requests.ListNodes):
            return {"nodes": [], "partitions": [], "now": NOW}
        raise RequestFailed("invalid", f"unknown request {request.op!r}")

    monkeypatch.setattr(link, "_call", call)
    snapshot = link.nodes()
    assert snapshot.nodes == () and snapshot.activity is None
