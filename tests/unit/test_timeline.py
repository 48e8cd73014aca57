"""The GPU timeline: the pending queue's steps, reservations' windows in a range, the
head's reply (private_data's "other user" bars) and the page's SVG layout."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from fixedlab import ran, requeue

from gbatch.api import timeline
from gbatch.core.model import JobSpec, JobState
from gbatch.core.reservations import Reservation, windows_between
from gbatch.core.timeline import MAX_POINTS, pending_steps, reservation_windows
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.store import Store
from gbatch.site.config import Config, Paths

T0 = 1_767_225_600.0
H = 3600.0
ALICE = Caller(uid=5001, user="alice", pid=11)
BOB = Caller(uid=5002, user="bob", pid=22)
XSS = "<script>alert(1)</script>"


def test_pending_steps_count_who_waits_at_the_start_and_each_change() -> None:
    spans = [
        (T0 - H, T0 + H),  # waiting as the range begins, leaves inside it
        (T0 + 2 * H, None),  # comes inside it, still waits
        (T0 - 2 * H, T0 - H),  # gone before the range: never counted
        (T0 + 2 * H, T0 + 3 * H),
        (T0 + 5 * H, None),  # after the range
    ]
    assert pending_steps(spans, T0, T0 + 4 * H) == [
        (T0, 1),
        (T0 + H, 0),
        (T0 + 2 * H, 2),
        (T0 + 3 * H, 1),
    ]


def test_pending_steps_past_the_bound_keep_each_slices_peak() -> None:
    spans = [(T0 + i, T0 + i + 0.5) for i in range(5000)]  # one at a time, 10,000 changes
    spans.append((T0 + 100.2, T0 + 100.4))  # two at once, for a moment
    steps = pending_steps(spans, T0, T0 + 5000)
    assert len(steps) == MAX_POINTS
    assert max(count for _, count in steps) == 2
    assert {count for _, count in steps} == {1, 2}


def test_windows_between_repeats_a_daily_window_inside_the_range_only() -> None:
    once = Reservation(name="m", start=T0 + H, end=T0 + 2 * H, nodes=("n1",))
    assert windows_between(once, T0, T0 + H) == []
    assert windows_between(once, T0, T0 + 1.5 * H) == [(T0 + H, T0 + 2 * H)]
    daily = Reservation(name="d", start=T0, end=T0 + H, nodes=("n1",), flags=("DAILY",))
    assert windows_between(daily, T0 + 30 * H, T0 + 73 * H) == [
        (T0 + 48 * H, T0 + 49 * H),
        (T0 + 72 * H, T0 + 73 * H),
    ]
    gpus = Reservation(name="g", start=T0, end=T0 + H, gpus=(("n2", (1, 3)),), flags=("MAINT",))
    assert reservation_windows([gpus], T0, T0 + H) == [("g", "n2", (1, 3), T0, T0 + H, True)]


@pytest.fixture
def private(tmp_path: Path) -> Iterator[Daemon]:
    paths = Paths(tmp_path)
    store = Store(paths.store)
    made = Daemon(paths, Config(simulate_gpus=2, private_data=True, admins=("carol",)), store)
    made.clock = lambda: T0 + 10 * H  # type: ignore[method-assign]
    yield made
    made.committer.close()
    store.close()


def test_under_private_data_another_users_run_is_an_other_user_bar(private: Daemon) -> None:
    mine = ran(private.store, ALICE, "mine", (0,), T0 + 2 * H)
    ran(private.store, BOB, "secret-project", (1,), T0 + 3 * H)
    request = {"op": "timeline", "start": T0, "end": T0 + 10 * H}
    runs = {r["placements"][0][1][0]: r for r in handle(private, ALICE, request)["runs"]}
    assert (runs[0]["id"], runs[0]["name"], runs[0]["user"]) == (mine, "mine", "alice")
    assert (runs[1]["id"], runs[1]["name"], runs[1]["user"]) == (0, "", "")
    assert runs[1]["start"] == T0 + 3 * H and runs[1]["end"] is None  # still its bar
    carol = Caller(uid=5003, user="carol", pid=33)
    admins = handle(private, carol, request)["runs"]
    assert sorted(r["name"] for r in admins) == ["mine", "secret-project"]
    reply = handle(private, ALICE, request)
    assert [name for name, _ in reply["lanes"]] == ["local"]  # its GPUs once it reports
    waits = [[T0, 0], [T0 + 2 * H - 60, 1], [T0 + 2 * H, 0], [T0 + 3 * H - 60, 1], [T0 + 3 * H, 0]]
    assert reply["pending"] == waits  # a count of everyone's: no one's job in it
    bad = handle(private, ALICE, {"op": "timeline", "start": T0, "end": T0 + 35 * 86400})
    assert bad["kind"] == "invalid" and "34 days" in bad["error"]


def test_the_layout_puts_each_run_on_its_gpus_lanes_at_its_times() -> None:
    reply = {
        "start": T0,
        "end": T0 + 24 * H,
        "now": T0 + 24 * H,
        "lanes": [["gpu10", [[0, None], [1, None]]], ["gpu2", [[0, None], [4, 0]]]],
        "runs": [
            {
                "id": 7,
                "name": XSS,
                "user": "alice",
                "state": "COMPLETED",
                "start": T0 + 6 * H,
                "end": T0 + 12 * H,
                "placements": [["gpu10", [1]], ["gpu2", [0]]],
                "idle": [["gpu10", 1, T0 + 6 * H, T0 + 9 * H]],
            },
            {
                "id": 0,
                "name": "",
                "user": "",
                "state": "RUNNING",
                "start": T0 + 18 * H,
                "end": None,
                "placements": [["gpu10", [0]]],
            },
        ],
        "pending": [[T0, 2], [T0 + 12 * H, 0]],
        "windows": [["maint", "gpu2", [], T0 + 20 * H, T0 + 30 * H, True]],
    }
    picture = timeline.layout(reply)
    assert [g["node"] for g in picture["groups"]] == ["gpu2", "gpu10"]  # natural order
    lane = {(lane["node"], lane["gpu"]): lane["y"] for lane in picture["lanes"]}
    bars = {(b["node"], b["gpu"]): b for b in picture["bars"]}
    assert lane[("gpu2", 4)] == lane[("gpu2", 0)] + timeline.LANE_H  # the slice under its card
    left, width = timeline.LABEL_W, timeline.PLOT_W
    for where in (("gpu10", 1), ("gpu2", 0)):
        assert bars[where]["y"] == lane[where] + 1
        assert bars[where]["x"] == left + width / 4 and bars[where]["w"] == width / 4
        assert bars[where]["href"] == "/ui/jobs/7" and bars[where]["text"].startswith("7 <scr")
    (idle,) = picture["idle"]  # a strip along the bottom of its bar, for its 3 hours
    assert idle["x"] == left + width / 4 and idle["w"] == round(width / 8, 1)
    assert lane[("gpu10", 1)] < idle["y"] < lane[("gpu10", 1)] + timeline.LANE_H
    labels = {(lane["node"], lane["gpu"]): lane["text"] for lane in picture["lanes"]}
    assert labels[("gpu2", 4)] == "MIG 4 of 0" and labels[("gpu2", 0)] == "GPU 0"
    other = bars[("gpu10", 0)]
    assert other["href"] == "" and other["text"] == timeline.OTHER_USER
    assert other["fill"] == timeline.OTHER_FILL and other["x"] + other["w"] == left + width
    window, _ = picture["windows"]  # one per lane of the node (its card and slice)
    # clipped to the range's end
    assert window["maint"] and window["x"] + window["w"] == left + width
    assert picture["pending"]["peak"] == 2 and picture["pending"]["now"] == 0
    assert timeline.user_fill("alice") == timeline.user_fill("alice") != timeline.user_fill("bob")


def test_the_page_escapes_a_runs_labels_and_carries_no_script_or_style_attribute() -> None:
    from gbatch.api.web import Web

    reply = {
        "start": T0,
        "end": T0 + H,
        "now": T0 + H,
        "lanes": [[XSS, [[0, None]]]],
        "runs": [
            {
                "id": 7,
                "name": XSS,
                "user": f'a"{XSS}',
                "state": "RUNNING",
                "start": T0,
                "end": None,
                "placements": [[XSS, [0]]],
            }
        ],
        "pending": [[T0, 0]],
        "windows": [[XSS, XSS, [], T0, T0 + H, False]],
    }
    page = (
        Web(api=None)
        .templates.get_template("timeline.html")
        .render(
            picture=timeline.layout(reply),
            ranges=list(timeline.RANGES),
            picked="1h",
            other_user=timeline.OTHER_USER,
            csrf="",
            signed_in=True,
        )
    )
    assert XSS not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page and " style=" not in page
    assert re.search(r"\son\w+=", page) is None  # no event handler attribute


def test_idle_stretches_are_long_runs_of_low_readings_ended_by_a_busy_or_silent_gpu() -> None:
    from gbatch.core.timeline import idle_stretches

    minutes = [(T0 + 60 * m, 0 if m < 40 or 50 <= m < 60 else 90) for m in range(70)]
    minutes[20] = (minutes[20][0], None)  # not told: busy, as the policy counts it
    assert idle_stretches(minutes, 5.0, 15 * 60, 60) == [
        (T0, T0 + 20 * 60),
        (T0 + 21 * 60, T0 + 40 * 60),  # and not 50-60: 10 minutes, under the 15
    ]
    gap = [(T0, 0), (T0 + 60, 0), (T0 + 20 * 60, 0)]  # silent 19 minutes between
    assert idle_stretches(gap, 5.0, 90, 60) == [(T0, T0 + 120)]


def test_the_timeline_marks_a_runs_gpu_idle_while_held_from_the_history(
    private: Daemon,
) -> None:
    from gbatch.head.gpuhistory import GpuHistory

    class Gpu(NamedTuple):
        index: int
        memory_used_mib: int
        utilization_pct: int | None

    mine = ran(private.store, ALICE, "mine", (0,), T0 + 2 * H)
    history: GpuHistory = private.gpu_history
    for s in range(int(2 * H), int(3 * H)):  # idle for its first hour, then busy
        history.record("local", [Gpu(0, 100, 0 if s < 3 * H - 600 else 99)], T0 + s)
    reply = handle(private, ALICE, {"op": "timeline", "start": T0, "end": T0 + 10 * H})
    (run,) = reply["runs"]
    assert run["id"] == mine
    (stretch,) = run["idle"]  # the default policy: under 5 % for 30 minutes
    assert stretch[:3] == ["local", 0, T0 + 2 * H]
    assert stretch[3] == T0 + 3 * H - 600


def test_runs_sharing_a_card_at_once_get_a_sub_lane_each() -> None:
    def run(job: int, start: float, end: float) -> dict[str, object]:
        return {
            "id": job,
            "name": f"j{job}",
            "user": "alice",
            "state": "COMPLETED",
            "start": start,
            "end": end,
            "placements": [["n1", [0]]],
        }

    reply = {
        "start": T0,
        "end": T0 + 24 * H,
        "now": T0 + 24 * H,
        "lanes": [["n1", [[0, None], [1, None]]]],
        "runs": [
            run(1, T0, T0 + 10 * H),
            run(2, T0 + 5 * H, T0 + 8 * H),
            run(3, T0 + 12 * H, T0 + 13 * H),
        ],
        "pending": [[T0, 0]],
        "windows": [["w", "n1", [0], T0, T0 + H, False]],
    }
    picture = timeline.layout(reply)
    ys = {b["job"]: b["y"] for b in picture["bars"]}
    assert ys[2] == ys[1] + timeline.LANE_H  # overlaps 1: the next row
    assert ys[3] == ys[1]  # after both: the first row again
    lane = {(lane["node"], lane["gpu"]): lane["y"] for lane in picture["lanes"]}
    assert lane[("n1", 1)] == lane[("n1", 0)] + 2 * timeline.LANE_H
    assert picture["windows"][0]["h"] == 2 * timeline.LANE_H  # shades both rows


def test_fifty_nodes_of_eight_gpus_a_lane_each_and_the_page_stays_small() -> None:
    """The issue's scale: 400 lanes, a day of runs (5 a GPU), drawn as one SVG."""
    from gbatch.api.web import Web

    nodes = [f"gpu{n:02d}" for n in range(50)]
    runs = [
        {
            "id": 1000 + i,
            "name": f"train-{i}",
            "user": f"user{i % 12}",
            "state": "COMPLETED",
            "start": T0 + (i % 5) * 4 * H,
            "end": T0 + (i % 5) * 4 * H + 3 * H,
            "placements": [[nodes[i // 40], [(i // 5) % 8]]],
        }
        for i in range(2000)
    ]
    reply = {
        "start": T0,
        "end": T0 + 24 * H,
        "now": T0 + 24 * H,
        "lanes": [[n, [[g, None] for g in range(8)]] for n in nodes],
        "runs": runs,
        "pending": [[T0, 3]],
        "windows": [],
    }
    picture = timeline.layout(reply)
    assert len(picture["lanes"]) == 400 and len(picture["bars"]) == 2000
    assert len({b["y"] for b in picture["bars"]}) == 400  # no run shares a row: one each
    assert picture["height"] < 400 * timeline.LANE_H + 50 * timeline.NODE_GAP + 200
    page = (
        Web(api=None)
        .templates.get_template("timeline.html")
        .render(
            picture=picture,
            ranges=list(timeline.RANGES),
            picked="24h",
            other_user="",
            csrf="",
            signed_in=True,
        )
    )
    assert len(page) < 2_000_000  # about 600 bytes a bar


def test_the_ranges_reads_search_indexes_not_every_job_ever_run(tmp_path: Path) -> None:
    """sreport's and the timeline's reads over a store of 20,000 finished jobs: the VM
    steps they take stay those of an index search (a scan of the table took ~100x)."""
    store = Store(tmp_path / "gbatch.db")
    try:
        spec = json.dumps(JobSpec(name="n", command=("true",)).to_dict())
        rows = [
            (1000, "u", "n", spec, "COMPLETED", T0 + i, T0 + i, T0 + i + 100) for i in range(20_000)
        ]
        with store._lock:
            store._db.execute("BEGIN")
            store._db.executemany(
                "INSERT INTO jobs (uid, user, name, spec, state, submit_time, start_time,"
                " end_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            store._db.execute("COMMIT")
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        store._db.set_progress_handler(count, 100)
        ran = store.jobs_run_between(T0 + 19_950, T0 + 20_000)
        spans = store.pending_spans(T0 + 19_950, T0 + 20_000)
        assert len(ran) == 149 and len(spans) == 49
        assert steps[0] < 200  # a scan: over 4,000
    finally:
        store.close()


def test_every_run_of_a_requeued_job_is_on_the_timeline_on_its_own_gpus(
    private: Daemon,
) -> None:
    job = ran(private.store, ALICE, "twice", (0,), T0 + 1 * H)
    requeue(private.store, job, T0 + 2 * H)
    private.store.set_state(
        job, JobState.CONFIGURING, "", T0 + 3 * H, node="local", gpus=(1,), attempt=2
    )
    private.store.set_state(job, JobState.RUNNING, "", T0 + 3 * H, start_time=T0 + 3 * H)
    reply = handle(private, ALICE, {"op": "timeline", "start": T0, "end": T0 + 10 * H})
    runs = [
        (r["id"], r["attempt"], r["state"], r["start"], r["end"], r["placements"])
        for r in reply["runs"]
    ]
    assert runs == [
        (job, 1, "REQUEUED", T0 + 1 * H, T0 + 2 * H, [["local", [0]]]),
        (job, 2, "RUNNING", T0 + 3 * H, None, [["local", [1]]]),
    ]
    assert reply["runs"][0]["reason"] == "node lost; requeued"
    # Another user's earlier run is an "other user" bar too, its reason hidden.
    bob = Caller(uid=5002, user="bob", pid=22)
    hidden = handle(private, bob, {"op": "timeline", "start": T0, "end": T0 + 10 * H})["runs"]
    assert [(r["id"], r["name"], r["reason"]) for r in hidden] == [(0, "", ""), (0, "", "")]
    # A range that holds only the first run: only it.
    first = handle(private, ALICE, {"op": "timeline", "start": T0, "end": T0 + 2.5 * H})["runs"]
    assert [(r["attempt"], r["state"]) for r in first] == [(1, "REQUEUED")]
    picture = timeline.layout(reply)
    bars = sorted((b["attempt"], b["gpu"], b["x"]) for b in picture["bars"])
    assert [(a, g) for a, g, _ in bars] == [(1, 0), (2, 1)] and bars[0][2] < bars[1][2]
    title = next(b["title"] for b in picture["bars"] if b["attempt"] == 1)
    assert "requeued (node lost; requeued)" in title


def test_a_start_never_confirmed_leaves_no_earlier_run(private: Daemon) -> None:
    job = ran(private.store, ALICE, "retry", (0,), T0 + 1 * H)
    requeue(private.store, job, T0 + 2 * H)
    # Dispatched again on GPU 1, cancelled-to-requeue before its start was confirmed: its
    # row still holds the first run's start_time, which is no run of GPU 1's.
    private.store.set_state(
        job, JobState.CONFIGURING, "", T0 + 3 * H, node="local", gpus=(1,), attempt=2
    )
    private.store.set_state(job, JobState.COMPLETING, "", T0 + 3 * H, stop_state=JobState.PENDING)
    requeue(private.store, job, T0 + 3.1 * H, "requeued on request")
    runs = private.store.earlier_runs_between(T0, T0 + 10 * H)
    assert [(r.attempt, r.placements) for r in runs] == [(1, (("local", (0,)),))]
