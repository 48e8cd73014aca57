"""A large array on a real store, through the daemon's handlers: its tasks past the
first ARRAY_ROWS wait as one record (the tail) and become rows only as they come up or
are named alone; every command sees the array as a whole all the same."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gbatch.core import arrays
from gbatch.core.arrays import ARRAY_ROWS, THROTTLE_REASON
from gbatch.core.limits import Limits, UserLimits
from gbatch.core.model import JobSpec, JobState
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.store import RunnableWindow, Store, planning_job
from gbatch.protocol import wire
from gbatch.render.formatting import format_job_details, format_sacct, format_squeue
from gbatch.site.config import Config, Paths

ALICE = Caller(uid=5001, user="alice", pid=11)
BOB = Caller(uid=5002, user="bob", pid=12)
SPEC = JobSpec(name="j", command=("train.py",), gpus=1).to_dict()
TASKS = 100_000


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """The unit tier's daemon, with limits that let one array hold 100,000 tasks."""
    paths = Paths(tmp_path)
    store = Store(paths.store)
    limits = Limits(UserLimits(max_pending_jobs=10 * TASKS, max_array_size=TASKS))
    made = Daemon(paths, Config(simulate_gpus=2, limits=limits), store)
    yield made
    made.committer.close()
    store.close()


def submit(daemon: Daemon, caller: Caller = ALICE, **fields: Any) -> list[int]:
    reply = handle(daemon, caller, {"op": "submit", "spec": SPEC, **fields})
    assert reply.get("ok", True), reply
    return list(reply["ids"])


def rows(daemon: Daemon) -> int:
    with sqlite3.connect(daemon.store.path) as db:
        return int(db.execute("SELECT count(*) FROM jobs").fetchone()[0])


def listed(daemon: Daemon, caller: Caller = ALICE, **fields: Any) -> list[wire.Job]:
    reply = handle(daemon, caller, {"op": "jobs", **fields})
    return [wire.job_from_wire(job) for job in reply["jobs"]]


def test_a_100000_task_array_is_a_few_rows_and_lists_as_one_line(daemon: Daemon) -> None:
    ids = submit(daemon, array=f"0-{TASKS - 1}")
    assert ids == list(range(ids[0], ids[0] + TASKS))  # every task's id, reserved
    assert rows(daemon) == ARRAY_ROWS
    jobs = listed(daemon)
    assert len(jobs) == ARRAY_ROWS + 1
    assert format_squeue(jobs, 0, fmt="%i %T").splitlines()[1:] == [f"{ids[0]}_[0-99999] PENDING"]
    assert format_sacct(jobs, 0, fields=["JobID", "State"], parsable=True).splitlines()[1:] == [
        f"{ids[0]}_[0-99999]|PENDING"
    ]
    # squeue -r: each task on its own line, with its own id.
    expanded = format_squeue(jobs, 0, fmt="%i %A", expand_arrays=True).splitlines()[1:]
    assert len(expanded) == TASKS
    assert expanded[-1] == f"{ids[0]}_99999 {ids[-1]}"
    # The next job's id comes after the array's: no id is handed out twice.
    (after,) = submit(daemon)
    assert after == ids[-1] + 1


def test_a_task_in_the_tail_answers_by_its_id_and_by_n_k(daemon: Daemon) -> None:
    ids = submit(daemon, array=f"1-{TASKS}:1")
    array = ids[0]
    task = daemon.store.get(array + 500)
    assert task is not None and task.spec.array_task == 501 and task.state is JobState.PENDING
    reply = handle(daemon, ALICE, {"op": "job", "id": array, "task": 501})
    assert reply["job"]["id"] == array + 500
    (only,) = listed(daemon, jobs=[f"{array}_501"])
    assert (only.id, only.array_more) == (array + 500, ())
    assert rows(daemon) == ARRAY_ROWS  # read where it is: no row made by a query


def test_cancelling_one_task_of_the_tail_leaves_the_others_pending(daemon: Daemon) -> None:
    array = submit(daemon, array=f"0-{TASKS - 1}")[0]
    reply = handle(daemon, ALICE, {"op": "cancel", "jobs": [f"{array}_777"]})
    assert (reply["done"], reply["failed"]) == (1, 0)
    assert daemon.store.require(array + 777).state is JobState.CANCELLED
    assert daemon.store.require(array + 778).state is JobState.PENDING
    lines = format_squeue(listed(daemon, history=True), 0, fmt="%i %T").splitlines()[1:]
    assert lines == [f"{array}_[0-776,778-99999] PENDING", f"{array}_777 CANCELLED"]
    assert daemon.store.pending_counts() == {"alice": TASKS - 1}


def test_cancelling_the_array_cancels_its_tail_in_one_record(daemon: Daemon) -> None:
    array = submit(daemon, array=f"0-{TASKS - 1}")[0]
    other = submit(daemon)[0]
    reply = handle(daemon, ALICE, {"op": "cancel", "jobs": [str(array)]})
    assert (reply["done"], reply["failed"]) == (TASKS, 0)
    assert daemon.store.pending_counts() == {"alice": 1}
    assert daemon.store.require(other).state is JobState.PENDING
    history = listed(daemon, history=True, jobs=[str(array)])
    sacct = format_sacct(history, 0, fields=["JobID", "State"], parsable=True).splitlines()
    assert sacct[-1] == f"{array}_[{ARRAY_ROWS}-99999]|CANCELLED"
    assert daemon.store.require(array + 90_000).state is JobState.CANCELLED


def test_scancel_me_and_another_users_array(daemon: Daemon) -> None:
    mine = submit(daemon, array=f"0-{TASKS - 1}")[0]
    bobs = submit(daemon, BOB, array="0-99")[0]
    refused = handle(daemon, BOB, {"op": "cancel", "jobs": [str(mine)]})
    assert refused["done"] == 0 and refused["failed"] >= 1
    assert daemon.store.require(mine + 5000).state is JobState.PENDING
    reply = handle(daemon, ALICE, {"op": "cancel", "users": ["alice"]})
    assert reply["done"] == TASKS
    assert daemon.store.pending_counts() == {"bob": 100}
    assert daemon.store.require(bobs + 99).state is JobState.PENDING


def test_hold_and_release_the_whole_array(daemon: Daemon) -> None:
    array = submit(daemon, array=f"0-{TASKS - 1}")[0]
    handle(daemon, ALICE, {"op": "hold", "jobs": [str(array)]})
    assert daemon.store.require(array + 50_000).held
    assert daemon.store.require(array).held
    handle(daemon, ALICE, {"op": "release", "jobs": [str(array)]})
    assert not daemon.store.require(array + 50_000).held


def test_tasks_become_rows_as_the_ones_before_them_start(daemon: Daemon) -> None:
    array = submit(daemon, array="0-99")[0]
    for task in range(ARRAY_ROWS):  # the first ARRAY_ROWS leave PENDING
        daemon.store.cancel_pending([array + task], "test", 0)
    assert daemon.store.refill_arrays(ARRAY_ROWS) == ARRAY_ROWS
    assert rows(daemon) == 2 * ARRAY_ROWS
    made = daemon.store.require(array + ARRAY_ROWS + 3)
    assert made.spec.array_task == ARRAY_ROWS + 3
    assert [e.reason for e in daemon.store.events(made.id)] == ["submitted"]
    # Until the tail runs out: then it is gone and every task is a row.
    for _ in range(3):
        pending = daemon.store.pending_ids(after=0, limit=1000)
        daemon.store.cancel_pending(pending, "test", 0)
        daemon.store.refill_arrays(ARRAY_ROWS)
    assert daemon.store.tails() == [] and rows(daemon) == 100


def test_a_throttled_arrays_tasks_past_its_max_wait_with_slurms_reason(daemon: Daemon) -> None:
    """No node answers in this tier, so none starts: the planner's reason for the tasks
    it looked at, JobArrayTaskLimit for those the %MAX kept from it."""
    array = submit(daemon, array="0-9%1")[0]
    daemon.schedule(daemon.clock())
    reasons = [daemon.store.require(array + k).reason for k in range(10)]
    assert reasons[0] not in ("", THROTTLE_REASON) and reasons[1:] == [THROTTLE_REASON] * 9
    jobs = listed(daemon)
    assert format_squeue(jobs, 0, fmt="%i").splitlines()[1:] == [f"{array}_[0-9%1]"]
    update = {"op": "update", "id": array, "changes": {"ArrayTaskThrottle": "2"}}
    assert handle(daemon, ALICE, update)["changes"] == ["ArrayTaskThrottle 1 -> 2"]
    daemon.schedule(daemon.clock())
    reasons = [daemon.store.require(array + k).reason for k in range(10)]
    assert THROTTLE_REASON not in reasons[:2] and reasons[2:] == [THROTTLE_REASON] * 8
    update["changes"] = {"ArrayTaskThrottle": "0"}  # no limit
    handle(daemon, ALICE, update)
    daemon.schedule(daemon.clock())
    assert THROTTLE_REASON not in {daemon.store.require(array + k).reason for k in range(10)}


def test_array_task_throttle_is_refused_for_a_plain_job(daemon: Daemon) -> None:
    (job,) = submit(daemon)
    update = {"op": "update", "id": job, "changes": {"ArrayTaskThrottle": "2"}}
    reply = handle(daemon, ALICE, update)
    assert not reply["ok"] and "not an array task" in reply["error"]


def test_max_pending_jobs_counts_the_tail(daemon: Daemon) -> None:
    submit(daemon, array=f"0-{TASKS - 1}")
    assert daemon.store.pending_counts(["alice"]) == {"alice": TASKS}


@pytest.mark.parametrize(
    ("positions", "gone", "left"),
    [
        (((0, 9),), [0], ((1, 9),)),
        (((0, 9),), [5, 6], ((0, 4), (7, 9))),
        (((0, 9), (20, 29)), [9, 20, 25], ((0, 8), (21, 24), (26, 29))),
        (((0, 9),), [42], ((0, 9),)),
    ],
)
def test_positions_without(positions: arrays.Spans, gone: list[int], left: arrays.Spans) -> None:
    assert arrays.without(positions, gone) == left
    assert arrays.count(left) == arrays.count(positions) - len(
        [p for p in gone if arrays.contains(positions, p)]
    )


def test_take_and_index_spans_follow_the_array_expression() -> None:
    taken, rest = arrays.take(((0, 2), (5, 9)), 4)
    assert (taken, rest) == ([0, 1, 2, 5], ((6, 9),))
    stepped = JobSpec(name="j", command=("x",), array="0-30:10")
    assert arrays.index_spans(stepped, ((1, 3),)) == ((10, 10), (20, 20), (30, 30))
    assert arrays.pos_of(stepped, 20) == 2 and arrays.pos_of(stepped, 21) is None
    plain = JobSpec(name="j", command=("x",), array="1-100000")
    assert arrays.index_spans(plain, ((10, 99_999),)) == ((11, 100_000),)


def test_scontrol_show_job_of_the_array_shows_its_tail_as_one_record(daemon: Daemon) -> None:
    array = submit(daemon, array=f"0-{TASKS - 1}%4")[0]
    reply = handle(daemon, ALICE, {"op": "job", "id": array, "with_tasks": True})
    tail = wire.job_from_wire(reply["tasks"][-1])
    text = format_job_details(tail, [], 0)
    assert f"JobId={array + ARRAY_ROWS} ArrayJobId={array} ArrayTaskId={ARRAY_ROWS}-99999" in text
    assert "ArrayTaskThrottle=4" in text


def test_the_tuis_job_table_labels_a_tail_record_with_its_tasks(daemon: Daemon) -> None:
    array = submit(daemon, array="0-99")[0]
    table = handle(daemon, ALICE, {"op": "jobs", "table": True})["table"]
    labels = wire.table_labels(table)
    assert labels[array] == f"{array}_0"
    assert labels[array + ARRAY_ROWS] == f"{array}_[{ARRAY_ROWS}-99]"
    last = table["rows"][-1]
    decoded = wire.job_from_row(last, JobSpec.from_dict(table["specs"][last[0]]))
    assert (decoded.id, decoded.array_more) == (array + ARRAY_ROWS, ((ARRAY_ROWS + 1, 99),))


def test_update_of_an_arrays_id_changes_every_waiting_task_and_n_k_one(daemon: Daemon) -> None:
    array = submit(daemon, array="0-99")[0]
    reply = handle(daemon, ALICE, {"op": "update", "id": array, "changes": {"Priority": "-5"}})
    assert reply["changes"] == ["Priority 0 -> -5"]
    assert {daemon.store.require(array + k).spec.priority for k in (0, 31, 32, 99)} == {-5}
    one = {"op": "update", "id": array, "task": 77, "changes": {"JobName": "odd"}}
    assert handle(daemon, ALICE, one)["changes"] == ["JobName j -> odd"]
    assert daemon.store.require(array + 77).spec.name == "odd"
    assert daemon.store.require(array + 78).spec.name == "j"
    # The tail's tasks keep the array-wide change as they become rows.
    daemon.store.cancel_pending(list(range(array, array + ARRAY_ROWS)), "test", 0)
    daemon.store.refill_arrays(ARRAY_ROWS)
    made = daemon.store.require(array + ARRAY_ROWS + 1)
    assert (made.spec.priority, made.spec.array_task) == (-5, ARRAY_ROWS + 1)


def test_sacct_array_expands_the_pending_tasks(daemon: Daemon) -> None:
    array = submit(daemon, array="0-39")[0]
    jobs = listed(daemon, history=True)
    folded = format_sacct(jobs, 0, fields=["JobID"], parsable=True, header=False)
    assert folded.splitlines() == [f"{array}_[0-39]"]
    expanded = format_sacct(
        jobs, 0, fields=["JobID"], parsable=True, header=False, expand_arrays=True
    )
    assert expanded.splitlines() == [f"{array}_{k}" for k in range(40)]


@pytest.mark.parametrize(
    "fields",
    [{}, {"states": ["PD"]}, {"users": ["bob"]}, {"states": ["PD", "R"], "users": ["alice"]}],
    ids=["queue", "pending", "bob", "alice-pd-r"],
)
def test_squeues_columns_print_as_the_job_table_did(daemon: Daemon, fields: Any) -> None:
    # The narrow listing (Store.listing_rows, no Job per row) against the job table
    # built from Jobs: the same rows, the tail's record and its throttle included.
    submit(daemon, array="0-99%4")
    submit(daemon, hold=True)
    submit(daemon, BOB, spec={**SPEC, "name": "other.name"})
    submit(daemon, count=3)
    handle(daemon, ALICE, {"op": "hold", "ids": [submit(daemon)[0]]})

    def listed_as(kind: str) -> list[wire.Job]:
        reply = handle(daemon, ALICE, {"op": "jobs", "brief": True, kind: True, **fields})
        assert kind in reply, reply
        if kind == "columns":
            return wire.jobs_from_columns(reply["columns"])
        return wire.jobs_from_table(reply["table"])

    old, new = listed_as("table"), listed_as("columns")
    assert [job.id for job in new] == [job.id for job in old]
    now = 1_700_000_000.0
    for expand in (False, True):
        every = "%i %A %F %K %P %j %u %U %t %T %M %l %L %D %R %N %b %V %Q %p %r %Y"
        for fmt in (None, every):
            assert format_squeue(new, now, fmt=fmt, expand_arrays=expand) == format_squeue(
                old, now, fmt=fmt, expand_arrays=expand
            )


@pytest.mark.parametrize("size", [1, 3, ARRAY_ROWS + 1])
def test_pages_of_the_queue_hold_every_record_once_the_tail_in_its_place(
    daemon: Daemon, size: int
) -> None:
    # A page is cut in the store's query (one row past it); the tail's one record is
    # merged in by id, so it must land on the page its id belongs to, once.
    submit(daemon)
    submit(daemon, array="0-99")
    submit(daemon, BOB)
    submit(daemon, array="0-49")
    submit(daemon)
    whole = [job.id for job in listed(daemon)]
    assert len(whole) == 3 + 2 * (ARRAY_ROWS + 1)  # each array: its rows and its tail
    for brief in (False, True):
        seen: list[int] = []
        after: int | None = None
        while True:
            page = handle(
                daemon, BOB, {"op": "jobs", "limit": size, "after": after, "brief": brief}
            )
            assert len(page["jobs"]) <= size
            seen += [job["id"] for job in page["jobs"]]
            if page["next"] is None:
                break
            assert page["next"] == seen[-1]
            after = page["next"]
        assert seen == whole


@pytest.mark.parametrize("limit", [1, 2, 7, 40, 500])
def test_the_narrow_listing_in_pages_is_the_whole_listing_tail_record_included(
    daemon: Daemon, limit: int
) -> None:
    # Store.listing_rows reads a page from SQLite and merges the tails' records into
    # it: page after page (ListJobs after/limit) must give every row of the whole
    # listing once, in id order, and say when nothing is left.
    submit(daemon, array="0-99%4")  # ARRAY_ROWS rows, then one tail record
    submit(daemon, BOB, count=3)
    submit(daemon, hold=True)
    whole = handle(daemon, ALICE, {"op": "jobs", "columns": True})["columns"]["id"]
    paged: list[int] = []
    after = None
    while True:
        request = {"op": "jobs", "columns": True, "limit": limit, "after": after}
        reply = handle(daemon, ALICE, request)
        ids = reply["columns"]["id"]
        assert len(ids) <= limit
        paged.extend(ids)
        if reply["next"] is None:
            break
        assert reply["next"] == ids[-1]
        after = reply["next"]
    assert paged == whole
    assert len(whole) == ARRAY_ROWS + 1 + 3 + 1


def test_a_page_of_the_narrow_listing_is_read_from_the_store_not_cut_from_it(
    daemon: Daemon,
) -> None:
    first = submit(daemon, array="0-99")[0]  # ARRAY_ROWS rows, then one tail record
    rows = daemon.store.listing_rows(limit=5)
    assert [row[0] for row in rows] == list(range(first, first + 5))
    later = daemon.store.listing_rows(after=first + 4, limit=5)
    assert [row[0] for row in later] == list(range(first + 5, first + 10))
    # The tail's record comes after the rows, within the limit and not past it.
    page = daemon.store.listing_rows(after=first + ARRAY_ROWS - 2, limit=1)
    assert [row[0] for row in page] == [first + ARRAY_ROWS - 1]
    (tail,) = daemon.store.listing_rows(after=first + ARRAY_ROWS - 1, limit=3)
    assert tail[0] == first + ARRAY_ROWS and tail[-1]


def test_tasks_made_rows_and_materialised_reach_the_loops_window(daemon: Daemon) -> None:
    """Rows a tail becomes are writes of the change feed: the window read since sees them."""
    store = daemon.store
    array = submit(daemon, array="0-99")[0]
    window = RunnableWindow(per_user=1000)
    assert store.read_window(window) == [
        planning_job(j) for j in store.runnable_jobs(per_user=1000)
    ]
    store.cancel_pending([array + task for task in range(ARRAY_ROWS)], "test", 0)
    assert store.refill_arrays(ARRAY_ROWS) == ARRAY_ROWS
    store.materialise([array + 90])
    read = store.read_window(window)
    assert array + ARRAY_ROWS in {job.id for job in read} and array + 90 in {j.id for j in read}
    assert read == [planning_job(j) for j in store.runnable_jobs(per_user=1000)]


def test_a_task_the_throttle_holds_back_again_leaves_the_planners_queue(daemon: Daemon) -> None:
    """A task let through one pass and held back by its %MAX the next, its row unchanged
    since the window read it: the planner no longer holds it (it could start it)."""
    array = submit(daemon, array="0-9%1")[0]
    daemon.schedule(daemon.clock())
    daemon.schedule(daemon.clock())  # reads the reasons the first wrote; writes none
    assert array in daemon._planned and array + 1 not in daemon._planned
    # Another task starts outside the plan (a requeue race, an admin): the %1 is used.
    daemon.store.set_state(array + 5, JobState.CONFIGURING, "", 0, node="local", gpus=(0,))
    daemon.schedule(daemon.clock())
    assert array not in daemon._planned
    assert daemon.store.require(array).reason == THROTTLE_REASON
