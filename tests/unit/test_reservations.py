"""Reservations (issue 33): scontrol's words read, refused with one line naming the
field, and the planner keeping a window's GPUs for its jobs (hypothesis)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_planner_incremental import (
    NOW,
    RULES,
    draw_windows,
    make_job,
    make_node,
    running_on,
)

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.plan import NodeView
from gbatch.core.reservations import (
    MAINT_REASON,
    RESERVATION_REASON,
    Reservation,
    ReservationError,
    build,
    format_show,
    overlaps,
    parse_words,
)
from gbatch.head.daemon import Daemon
from gbatch.head.scheduler import PREEMPTION, Running, Window, plan_reserved


def test_create_words_read_as_slurm_writes_them() -> None:
    request = parse_words(
        [
            "ReservationName=demo",
            "StartTime=now+2minutes",
            "Duration=2:00:00",
            "Users=alice,bob",
            "Nodes=gpu[01-02]",
            "Flags=MAINT,ignore_jobs",
        ],
        NOW,
    )
    made = build(request, NOW)
    assert made.name == "demo"
    assert made.start == NOW + 120 and made.end == NOW + 120 + 7200
    assert made.users == ("alice", "bob") and made.nodes == ("gpu01", "gpu02")
    assert made.flags == ("MAINT", "IGNORE_JOBS") and made.maint
    assert Reservation.from_dict(made.to_dict()) == made
    shown = format_show(made, NOW)
    assert shown.startswith("ReservationName=demo StartTime=")
    assert "Nodes=gpu[01-02] NodeCnt=2" in shown and "Flags=MAINT,IGNORE_JOBS" in shown
    assert "State=INACTIVE" in shown


def test_gpus_with_a_type_and_an_update_of_the_flags() -> None:
    made = build(
        parse_words(
            [
                "ReservationName=r",
                "StartTime=now",
                "EndTime=now+1hour",
                "Users=a",
                "GPUs=2",
                "GpuType=a100",
            ],
            NOW,
        ),
        NOW,
    )
    assert made.gpu_count == 2 and made.gpu_type == "a100" and not made.gpus
    changed = build(parse_words(["ReservationName=r", "Flags+=DAILY"], NOW), NOW, made)
    assert changed.flags == ("DAILY",) and changed.gpu_count == 2
    assert changed.window(NOW + 86400 + 10) == (NOW + 86400, NOW + 86400 + 3600)


@pytest.mark.parametrize(
    ("words", "field"),
    [
        (["StartTime=now"], "ReservationName"),
        (["ReservationName=x", "Duration=1:00:00", "Users=a", "Nodes=n1"], "StartTime"),
        (["ReservationName=x", "StartTime=now", "Users=a", "Nodes=n1"], "Duration"),
        (["ReservationName=x", "StartTime=now", "Duration=10", "Users=a"], "Nodes"),
        (["ReservationName=x", "StartTime=now", "Duration=10", "Nodes=n1"], "Users"),
        (
            ["ReservationName=x", "StartTime=soon", "Duration=10", "Users=a", "Nodes=n1"],
            "StartTime",
        ),
        (
            ["ReservationName=x", "StartTime=now", "Duration=ever", "Users=a", "Nodes=n1"],
            "Duration",
        ),
        (["ReservationName=x", "StartTime=now", "Duration=10", "Users=a", "GPUs=0"], "GPUs"),
        (
            [
                "ReservationName=x",
                "StartTime=now",
                "Duration=10",
                "Users=a",
                "Nodes=n1",
                "Flags=FOREVER",
            ],
            "Flags",
        ),
        (
            [
                "ReservationName=x",
                "StartTime=now",
                "Duration=10",
                "Users=a",
                "Nodes=n1",
                "Colour=red",
            ],
            "Colour=red",
        ),
        (
            ["ReservationName=x", "StartTime=now", "Duration=10", "Users=a", "Nodes=n1", "GPUs=1"],
            "Nodes",
        ),
        (
            [
                "ReservationName=x",
                "StartTime=now",
                "Duration=2-00:00:00",
                "Users=a",
                "Nodes=n1",
                "Flags=DAILY",
            ],
            "Duration",
        ),
    ],
)
def test_bad_words_are_one_line_naming_the_field(words: list[str], field: str) -> None:
    with pytest.raises(ReservationError) as caught:
        build(parse_words(words, NOW), NOW)
    message = str(caught.value)
    assert message.startswith(f"{field}:") and "\n" not in message


def test_windows_overlap_only_on_a_shared_gpu_at_a_shared_time() -> None:
    a = Reservation("a", NOW, NOW + 100, nodes=("n1",))
    b = Reservation("b", NOW + 50, NOW + 200, gpus=(("n1", (0,)),), gpu_count=1)
    c = Reservation("c", NOW + 100, NOW + 200, nodes=("n1",))
    d = Reservation("d", NOW, NOW + 100, gpus=(("n2", (0,)),), gpu_count=1)
    assert overlaps(a, b, NOW + 1e6) and not overlaps(a, c, NOW + 1e6)
    assert not overlaps(a, d, NOW + 1e6)


def _job(job_id: int, gpus: int, limit: int | None, reservation: str | None = None) -> Job:
    spec = JobSpec(
        name="j", command=("true",), gpus=gpus, time_limit=limit, reservation=reservation
    )
    return Job(job_id, 1000, "alice", spec, JobState.PENDING, NOW)


def test_a_maintenance_window_ahead_lets_a_short_job_run_and_keeps_a_long_one() -> None:
    node = NodeView("n0", 2, (0, 1))
    window = Window("maint", NOW + 120, NOW + 3600, maint=True, nodes=frozenset({"n0"}))
    result = plan_reserved(
        [_job(1, 1, 600), _job(2, 1, 60), _job(3, 1, None)], [node], {}, NOW, windows=[window]
    )
    assert [a.job_id for a in result.assignments] == [2]
    assert result.reasons == {1: MAINT_REASON, 3: MAINT_REASON}


def test_a_share_backfills_before_a_window_on_a_gpu_whose_shares_end_first() -> None:
    """A GPU of a window to come that holds shares ending before it (share_room with their
    end): a share job that ends by the window's start joins them. The window's view kept
    the room but dropped the release it moves (ValueError in the planner)."""
    node = NodeView(
        "n1",
        2,
        (),
        releases=((NOW + 30, 1), (NOW + 900, 1)),
        shareable=((0, 81920), (1, 81920)),
        share_room=((0, 20480, NOW + 30),),
    )
    window = Window("demo", NOW + 300, NOW + 4000, gpus=(("n1", (0,)),))
    job = _job(1, 1, 60)
    job = replace(job, spec=replace(job.spec, gpu_mem_mb=10240))
    result = plan_reserved([job], [node], {}, NOW, windows=[window])
    assert [(a.job_id, a.node, a.gpus) for a in result.assignments] == [(1, "n1", (0,))]


def test_a_window_on_now_is_its_jobs_alone() -> None:
    nodes = [NodeView("n0", 2, (0, 1)), NodeView("n1", 2, (0, 1))]
    window = Window("demo", NOW - 10, NOW + 3600, gpus=(("n0", (1,)),))
    result = plan_reserved(
        [_job(1, 1, 60, "demo"), _job(2, 1, 60, "demo"), _job(3, 3, 60), _job(4, 1, 60, "gone")],
        nodes,
        {},
        NOW,
        windows=[window],
    )
    placed = {a.job_id: (a.node, a.gpus) for a in result.assignments}
    assert placed == {1: ("n0", (1,))}
    assert result.reasons[4] == RESERVATION_REASON
    assert 2 in result.reasons and 3 in result.reasons


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_no_gpu_of_a_window_goes_to_an_outsider_while_it_is_on(data: st.DataObject) -> None:
    draw = data.draw
    nodes = [make_node(i, draw) for i in range(draw(st.integers(1, 3)))]
    jobs = [make_job(i, draw) for i in range(1, draw(st.integers(1, 12)))]
    jobs = [
        replace(j, spec=replace(j.spec, reservation=draw(st.sampled_from((None, "r1", "r2")))))
        for j in jobs
    ]
    times = [(NOW - 100, NOW + 500), (NOW + 300, NOW + 4000), (NOW + 30, NOW + 90)]
    windows = []
    if draw(st.booleans()):
        start, end = draw(st.sampled_from(times))
        windows.append(Window("r1", start, end, nodes=frozenset({"n0"})))
    if draw(st.booleans()):
        start, end = draw(st.sampled_from(times))
        windows.append(Window("r2", start, end, gpus=(("n1", (0, 2)),)))
    result = plan_reserved(jobs, nodes, {}, NOW, windows=windows)
    by_id = {job.id: job for job in jobs}
    for each in result.assignments:
        job = by_id[each.job_id]
        end = NOW + job.time_limit if job.time_limit is not None else float("inf")
        held = [(each.node, set(each.gpus)), *((n, set(g)) for n, g in each.peers)]
        for window in windows:
            mine = job.spec.reservation == window.name
            if mine:
                assert window.start <= NOW < window.end
                for node, gpus in held:
                    assert node in window.nodes or gpus <= set(dict(window.gpus).get(node, ()))
            elif window.start < end and window.end > NOW:
                for node, gpus in held:
                    assert node not in window.nodes
                    assert not gpus & set(dict(window.gpus).get(node, ()))
        if job.spec.reservation is not None:
            assert any(w.name == job.spec.reservation for w in windows)


def test_preemption_takes_no_job_on_a_windows_node_and_no_job_of_a_window_preempts() -> None:
    """A preemptor of no reservation never frees GPUs on a node of a window (on now or to
    come: the victim's GPUs there may be the window's); a job of a window preempts none."""
    nodes = [NodeView(f"n{i}", 2, (), partitions=frozenset({"a", "b"})) for i in range(3)]
    # n0's GPU 1 is r1's from NOW + 300; n1 is r2's, on now (made with IGNORE_JOBS).
    windows = [
        Window("r1", NOW + 300, NOW + 900, gpus=(("n0", (1,)),)),
        Window("r2", NOW - 10, NOW + 900, nodes=frozenset({"n1"})),
    ]
    running = [Running(100 + i, f"n{i}", 2, NOW - 60, "a", "scavenger") for i in range(3)]

    def high(job_id: int, reservation: str | None = None) -> Job:
        spec = JobSpec(name="j", command=("true",), gpus=2, qos="high", reservation=reservation)
        return Job(job_id, 1000, "alice", spec, JobState.PENDING, NOW + job_id)

    made = plan_reserved(
        [high(1), high(2), high(3, "r2")],
        nodes,
        {},
        NOW,
        windows=windows,
        running=running,
        rules=RULES,
    )
    # Only n2's job goes (for job 1); job 2 waits (n0 and n1 are windows' nodes), job 3
    # (r2's) waits for its node's GPUs without preempting.
    assert made.preemptions == {102: 1}
    assert made.reasons[1] == PREEMPTION
    assert made.reasons[2] != PREEMPTION and made.reasons[3] != PREEMPTION
    # Without windows, as plan(): the same jobs preempt on every node.
    bare = plan_reserved([high(1), high(2)], nodes, {}, NOW, running=running, rules=RULES)
    assert set(bare.preemptions.values()) == {1, 2}


def test_a_job_across_nodes_that_runs_on_a_windows_node_is_no_victim() -> None:
    """The property test below found a victim across nodes n1 (a window's, on now) and n0
    (open) taken for its GPUs on n0: its preemption frees the window's n1 too."""
    nodes = [NodeView(f"n{i}", 2, (), partitions=frozenset({"a"})) for i in range(2)]
    windows = [Window("r", NOW - 10, NOW + 900, nodes=frozenset({"n1"}))]
    across = Running(
        100, "n1", 2, NOW - 60, "a", "scavenger", placed=(("n1", (0, 1)), ("n0", (0, 1)))
    )
    spec = JobSpec(name="j", command=("true",), gpus=2, qos="high")
    job = Job(1, 1000, "alice", spec, JobState.PENDING, NOW)
    made = plan_reserved([job], nodes, {}, NOW, windows=windows, running=[across], rules=RULES)
    assert made.preemptions == {}
    # Without the window it is a victim, as any job of a lower QOS.
    bare = plan_reserved([job], nodes, {}, NOW, running=[across], rules=RULES)
    assert bare.preemptions == {100: 1}


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_no_preemptor_takes_a_victim_on_a_windows_node(data: st.DataObject) -> None:
    """Over random queues (jobs across nodes too), windows and running jobs: no victim on
    a node of a window on now or to come, no preemptor of a reservation, and no start on
    a window's GPUs by a job of another (or none) while that window is on."""
    draw = data.draw
    nodes = [make_node(i, draw) for i in range(draw(st.integers(1, 3)))]
    nodes = [replace(n, free_gpus=()) if draw(st.booleans()) else n for n in nodes]
    simple = draw(st.booleans())
    jobs = [make_job(i, draw, simple=simple) for i in range(1, draw(st.integers(1, 10)))]
    # Many of QOS high (it preempts scavenger's), runnable anywhere; many victims of QOS
    # scavenger, not exempt: so that plans with victims are common.
    high = {"qos": "high", "partition": None, "image": None}
    jobs = [
        replace(j, spec=replace(j.spec, **high), held=False) if draw(st.booleans()) else j
        for j in jobs
    ]
    windows = draw_windows(draw)
    running = [
        replace(r, qos="scavenger", exempt_until=0.0) if draw(st.booleans()) else r
        for r in draw(running_on(nodes))
    ]
    made = plan_reserved(jobs, nodes, {}, NOW, windows=windows, running=running, rules=RULES)
    live = [w for w in windows if w.end > NOW]
    kept = {name for w in live for name in (*w.nodes, *(n for n, _ in w.gpus))}
    by_run = {each.job_id: each for each in running}
    by_id = {job.id: job for job in jobs}
    for victim, preemptor in made.preemptions.items():
        assert by_run[victim].node not in kept
        assert by_id[preemptor].spec.reservation is None
    for each in made.assignments:
        job = by_id[each.job_id]
        held = [(each.node, set(each.gpus)), *((n, set(g)) for n, g in each.peers)]
        for window in live:
            if job.spec.reservation != window.name and window.start <= NOW:
                for node, gpus in held:
                    assert node not in window.nodes
                    assert not gpus & set(dict(window.gpus).get(node, ()))


@pytest.mark.parametrize(
    ("text", "name", "options"),
    [
        ("command: [echo]\nreservation: demo\n", "job.yaml", ()),
        ("#!/bin/sh\n#SBATCH --reservation=demo\necho\n", "job.sh", ()),
        ("#!/bin/sh\necho\n", "job.sh", ("--reservation", "demo")),
    ],
)
def test_reservation_is_read_from_options_scripts_and_job_files(
    text: str, name: str, options: tuple[str, ...]
) -> None:
    from gbatch.jobspec.submit import request_for_text

    spec = request_for_text(text, name, options).spec
    assert spec["reservation"] == "demo"
    assert JobSpec.from_dict(spec).reservation == "demo"
    assert "reservation" not in JobSpec(name="j", command=("true",)).to_dict()


def test_a_bad_reservation_name_is_refused_naming_the_option() -> None:
    from gbatch.jobspec.errors import BadSubmit
    from gbatch.jobspec.submit import request_for_text

    with pytest.raises(BadSubmit) as caught:
        request_for_text("#!/bin/sh\necho\n", "job.sh", ("--reservation", "a b"))
    assert "--reservation" in str(caught.value)


def test_sinfo_shows_a_node_in_a_maintenance_window_maint() -> None:
    from gbatch.core.model import NodeInfo, NodeState
    from gbatch.render.sinfo import sinfo_state

    node = NodeInfo("n1", NodeState.IDLE, maint=True)
    assert sinfo_state(node, long=False) == "maint"
    assert sinfo_state(replace(node, maint=False), long=False) == "idle"


def test_the_tui_node_view_draws_a_nodes_upcoming_window() -> None:
    from gbatch.core.model import NodeInfo, NodeState
    from gbatch.tui.rows import node_rows

    start = NOW + 3600
    node = NodeInfo("n1", NodeState.IDLE, windows=(("maint", start, start + 7200, True),))
    row = node_rows([node], {})[0]
    assert "resv maint MAINT" in row.cells[-1]
    from gbatch.protocol import codec

    assert codec.node_from_wire(codec.node_to_wire(node)).windows == node.windows


def test_durations_print_as_slurms() -> None:
    from gbatch.core.reservations import duration_text

    assert duration_text(7200) == "02:00:00"
    assert duration_text(600) == "00:10:00"
    assert duration_text(90000) == "1-01:00:00"


def test_over_the_api_no_one_makes_a_reservation_as_an_admin(daemon: Daemon) -> None:
    """A token (even root's, even with scope submit) books only its own GPUs under
    user_reservations: a maintenance window is made on the head."""
    from gbatch.head.handlers import Caller, handle

    words = ["ReservationName=m", "StartTime=now+1days", "Duration=10", "Users=root"]
    words += ["Nodes=local", "Flags=MAINT,IGNORE_JOBS"]
    token = Caller(uid=0, user="root", pid=1, scopes=frozenset({"submit"}), via="token:x")
    reply = handle(daemon, token, {"op": "reservation_change", "action": "create", "words": words})
    assert not reply["ok"] and reply["kind"] == "permission", reply
    root = Caller(uid=0, user="root", pid=1)
    made = handle(daemon, root, {"op": "reservation_change", "action": "create", "words": words})
    assert made["ok"], made
    gone = handle(daemon, token, {"op": "reservation_delete", "name": "m"})
    assert not gone["ok"] and gone["kind"] == "permission"


def test_squeue_v_and_reservation_show_the_jobs_reservation() -> None:
    from gbatch.render.squeue import format_squeue, squeue_format_from_fields

    jobs = [_job(1, 1, 60, "demo"), _job(2, 1, 60)]
    assert format_squeue(jobs, NOW, fmt="%i %v", header=False) == "1 demo\n2 (null)\n"
    assert squeue_format_from_fields("Reservation") == "%20v"


def test_the_web_pages_node_view_draws_a_nodes_windows() -> None:
    """The web page's nodes table: a RESERVATIONS column with each window on the node."""
    import asyncio
    import re
    from typing import Any

    from gbatch.api.web import Web
    from gbatch.core.model import NodeInfo, NodeState
    from gbatch.protocol import codec

    start = NOW + 3600
    node = NodeInfo("n1", NodeState.IDLE, windows=(("maint", start, start + 7200, True),))
    web = Web(api=None)

    async def ask(http: object, request: object) -> dict[str, Any]:
        if type(request).__name__ == "ShowGpuHistory":  # the Nodes page's GPU charts
            return {"series": []}
        return {"nodes": [codec.node_to_wire(node)], "partitions": []}

    def page(http: object, name: str, **values: object) -> str:
        return web.templates.get_template(name).render(csrf="", signed_in=True, **values)

    web.ask = ask  # type: ignore[method-assign]
    web.page = page  # type: ignore[method-assign,assignment]
    html: str = asyncio.run(web.nodes(None))  # type: ignore[arg-type,assignment]
    row = re.findall(r"<td>(.*?)</td>", html[: html.index('<table id="gpus">')])
    assert row[0] == "n1" and row[-1].startswith("maint MAINT ")
