"""The usage chart (/ui/usage): sreport's GPU-seconds per step, the head's reply
(private_data's "other user" row) and the page's stacked SVG bars."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from gbatch.api import usage
from gbatch.core.model import JobSpec, JobState
from gbatch.head.accounting import usage_by, usage_series
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.store import Store
from gbatch.site.config import Config, Paths

T0 = 1_767_225_600.0
H = 3600.0
ALICE = Caller(uid=5001, user="alice", pid=11)
BOB = Caller(uid=5002, user="bob", pid=22)
CAROL = Caller(uid=5003, user="carol", pid=33)
XSS = "<script>alert(1)</script>"


@pytest.fixture
def private(tmp_path: Path) -> Iterator[Daemon]:
    paths = Paths(tmp_path)
    store = Store(paths.store)
    made = Daemon(paths, Config(simulate_gpus=2, private_data=True, admins=("carol",)), store)
    made.clock = lambda: T0 + 48 * H  # type: ignore[method-assign]
    yield made
    made.committer.close()
    store.close()


def ran(
    daemon: Daemon, caller: Caller, gpus: tuple[int, ...], start: float, end: float | None
) -> int:
    (job_id,) = daemon.store.submit(
        [JobSpec(name="j", command=("true",), gpus=len(gpus))],
        uid=caller.uid,
        user=caller.user,
        now=start - 60,
    )
    daemon.store.set_state(
        job_id, JobState.CONFIGURING, "", start, node="local", gpus=gpus, attempt=1
    )
    daemon.store.set_state(job_id, JobState.RUNNING, "", start, start_time=start)
    if end is not None:
        daemon.store.set_state(job_id, JobState.COMPLETED, "", end, end_time=end, exit_code=0)
    return job_id


def test_a_runs_gpu_seconds_split_across_steps_sum_to_sreports(private: Daemon) -> None:
    ran(private, ALICE, (0, 1), T0 + 20 * H, T0 + 30 * H)  # 4 h on day 0, 6 h on day 1
    ran(private, BOB, (0,), T0 + 40 * H, None)  # still on: to now (T0 + 48 h)
    jobs = private.store.jobs_run_between(T0, T0 + 48 * H)
    edges = [T0, T0 + 24 * H, T0 + 48 * H]
    series = usage_series(jobs, edges, T0 + 48 * H, lambda j: j.user)
    assert series == {"alice": [8 * H, 12 * H], "bob": [0.0, 8 * H]}
    whole = usage_by(jobs, T0, T0 + 48 * H, T0 + 48 * H, lambda j: j.user)
    assert {r.name: r.gpu_seconds for r in whole} == {k: sum(v) for k, v in series.items()}


def test_under_private_data_other_users_are_one_row_and_their_factors_hidden(
    private: Daemon,
) -> None:
    ran(private, ALICE, (0,), T0 + 1 * H, T0 + 3 * H)
    ran(private, BOB, (1,), T0 + 2 * H, T0 + 6 * H)
    request = {"op": "usage_series", "edges": [T0, T0 + 24 * H, T0 + 48 * H]}
    reply = handle(private, ALICE, request)
    assert reply["users"] == [["", [4 * H, 0.0]], ["alice", [2 * H, 0.0]]]
    assert [user for user, _ in reply["shares"]] == ["alice"] and reply["hidden"]
    assert reply["partitions"] == [["", [6 * H, 0.0]]]  # no partitions configured
    admins = handle(private, CAROL, request)
    assert admins["users"] == [["bob", [4 * H, 0.0]], ["alice", [2 * H, 0.0]]]
    assert [user for user, _ in admins["shares"]] == ["alice", "bob"]
    assert not admins["hidden"]


@pytest.mark.parametrize(
    ("edges", "says"),
    [
        ([T0], "give 2 to 401"),
        ([T0 + H, T0], "ascending"),
        ([T0, T0 + 401 * 86400], "400 days"),
    ],
)
def test_bad_edges_are_refused_naming_the_field(
    private: Daemon, edges: list[float], says: str
) -> None:
    reply = handle(private, ALICE, {"op": "usage_series", "edges": edges})
    assert reply["kind"] == "invalid" and "usage_series.edges" in reply["error"]
    assert says in reply["error"]


def test_edges_are_local_midnights_and_mondays_up_to_now() -> None:
    now = datetime(2026, 3, 12, 15, 30).timestamp()  # a Thursday
    days = usage.edges("14d", now)
    assert len(days) == 15 and days[-1] == int(now)
    assert datetime.fromtimestamp(days[0]) == datetime(2026, 2, 27)
    assert datetime.fromtimestamp(days[-2]) == datetime(2026, 3, 12)
    weeks = usage.edges("12w", now)
    assert len(weeks) == 13 and datetime.fromtimestamp(weeks[-2]) == datetime(2026, 3, 9)
    assert all(datetime.fromtimestamp(w).weekday() == 0 for w in weeks[:-1])


def test_the_stacks_heights_are_each_steps_sum_and_the_legend_its_totals() -> None:
    edges = [T0, T0 + 24 * H, T0 + 48 * H]
    rows = [["alice", [8 * H, 2 * H]], ["", [2 * H, 0.0]]]
    c = usage.chart(rows, edges, "user", "day")
    first = [b for b in c["bars"] if b["step"] == 0]
    assert [b["name"] for b in first] == ["alice", ""]  # the largest at the bottom
    assert first[0]["y"] == pytest.approx(first[1]["y"] + first[1]["h"])
    assert sum(b["h"] for b in first) == pytest.approx(usage.PLOT_H * 10 / 10)  # axis top 10 h
    assert [(r["label"], r["gpu_hours"]) for r in c["legend"]] == [
        ("alice", "10.00"),
        ("other user", "2.00"),
    ]
    assert c["total_hours"] == "12.00"


def test_the_page_escapes_names_and_carries_no_script_or_style_attribute() -> None:
    from gbatch.api.web import Web

    reply = {
        "edges": [T0, T0 + 24 * H],
        "now": T0 + 24 * H,
        "users": [[XSS, [H]]],
        "partitions": [[f'a"{XSS}', [H]]],
        "shares": [[XSS, 0.5], ["waiting<b>", 1.0]],
        "hidden": False,
    }
    page = (
        Web(api=None)
        .templates.get_template("usage.html")
        .render(
            picture=usage.layout(reply, "day"),
            periods=list(usage.PERIODS),
            picked="30d",
            csrf="",
            signed_in=True,
        )
    )
    assert XSS not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "waiting<b>" not in page
    assert "<script" not in page and " style=" not in page
    assert re.search(r"\son\w+=", page) is None  # no event handler attribute
    assert 'href="/ui/usage"' in page  # the nav's link


def test_each_step_is_what_sreport_says_of_that_step_alone(private: Daemon) -> None:
    ran(private, ALICE, (0,), T0 - 5 * H, T0 + 1 * H)  # began before the first step
    ran(private, BOB, (1,), T0 + 0.5 * H, None)  # on past the last step
    ran(private, CAROL, (0,), T0 + 30 * H, T0 + 30.5 * H)  # inside one step
    edges = [T0 + k * 8 * H for k in range(5)]  # four steps of 8 h, to T0 + 32 h
    jobs = private.store.jobs_run_between(edges[0], edges[-1])
    series = usage_series(jobs, edges, T0 + 48 * H, lambda j: j.user)
    for i in range(4):
        alone = usage_by(jobs, edges[i], edges[i + 1], T0 + 48 * H, lambda j: j.user)
        assert {r.name: r.gpu_seconds for r in alone} == {
            name: steps[i] for name, steps in series.items() if steps[i] > 0
        }
    assert series["alice"] == [H, 0.0, 0.0, 0.0] and series["bob"][3] == 8 * H


def _requeued_then_ran(daemon: Daemon, caller: Caller, again: float | None) -> int:
    """A 1-GPU job that ran 1 h on GPU 0 (T0+1h..T0+2h), was requeued (node lost), and,
    with `again`, ran again on GPU 1 from then till T0 + 5 h."""
    job = ran(daemon, caller, (0,), T0 + 1 * H, None)
    daemon.store.set_state(job, JobState.PENDING, "node lost; requeued", T0 + 2 * H, node=None)
    if again is not None:
        daemon.store.set_state(
            job, JobState.CONFIGURING, "", again, node="local", gpus=(1,), attempt=2
        )
        daemon.store.set_state(job, JobState.RUNNING, "", again, start_time=again)
        daemon.store.set_state(
            job, JobState.COMPLETED, "", T0 + 5 * H, end_time=T0 + 5 * H, exit_code=0
        )
    return job


def test_sreport_counts_every_run_of_a_requeued_job_and_the_job_once(private: Daemon) -> None:
    _requeued_then_ran(private, ALICE, T0 + 3 * H)  # 1 h, then 2 h: 3 GPU-hours, one job
    _requeued_then_ran(private, BOB, None)  # 1 h, and pending again: 1 GPU-hour, one job
    request = {"op": "usage_report", "start": T0, "end": T0 + 10 * H, "all_users": True}
    rows = handle(private, CAROL, request)["rows"]
    assert [(r["name"], r["gpu_seconds"], r["jobs"]) for r in rows] == [
        ("alice", 3 * H, 1),
        ("bob", 1 * H, 1),
    ]
    # A period with the earlier run alone; and a user's own row.
    first = {"op": "usage_report", "start": T0, "end": T0 + 2.5 * H}
    assert [
        (r["name"], r["gpu_seconds"], r["jobs"]) for r in handle(private, ALICE, first)["rows"]
    ] == [("alice", 1 * H, 1)]
    by_partition = {**request, "all_users": False, "by_partition": True}
    assert [
        (r["gpu_seconds"], r["jobs"]) for r in handle(private, ALICE, by_partition)["rows"]
    ] == [(4 * H, 2)]


def test_the_usage_chart_draws_a_requeued_jobs_earlier_run(private: Daemon) -> None:
    _requeued_then_ran(private, ALICE, T0 + 3 * H)
    reply = handle(private, ALICE, {"op": "usage_series", "edges": [T0, T0 + 2.5 * H, T0 + 10 * H]})
    assert reply["users"] == [["alice", [1 * H, 2 * H]]]
