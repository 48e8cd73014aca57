"""Arrays addressed as Slurm does, through the daemon's handlers on a real store: an
array's id names all its tasks, `N_K` one, `N_[K-M]` several; a job id text the grammar
refuses, or an id past SQLite's integers, is an invalid request, never a traceback."""

from __future__ import annotations

from typing import Any

import pytest

from gbatch.core.model import JobSpec
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle

ALICE = Caller(uid=5001, user="alice", pid=11)
SPEC = JobSpec(name="j", command=("train.py",), gpus=1).to_dict()


def submit(daemon: Daemon, **fields: Any) -> list[int]:
    reply = handle(daemon, ALICE, {"op": "submit", "spec": SPEC, **fields})
    return list(reply["ids"])


def states(daemon: Daemon, ids: list[int]) -> list[str]:
    return [daemon.store.require(i).state.value for i in ids]


def test_an_arrays_id_cancels_all_its_tasks_and_no_other_job(daemon: Daemon) -> None:
    before = submit(daemon)
    tasks = submit(daemon, array="1-4")
    after = submit(daemon)
    reply = handle(daemon, ALICE, {"op": "cancel", "jobs": [str(tasks[0])]})
    assert (reply["done"], reply["failed"]) == (4, 0)
    assert states(daemon, before + tasks + after) == ["PENDING"] + ["CANCELLED"] * 4 + ["PENDING"]


def test_n_k_names_task_k_of_array_n_not_job_nk(daemon: Daemon) -> None:
    tasks = submit(daemon, array="0-11")
    array = tasks[0]
    reply = handle(daemon, ALICE, {"op": "cancel", "jobs": [f"{array}_5", f"{array}_[7-8,10]"]})
    assert (reply["done"], reply["failed"]) == (4, 0)
    cancelled = [k for k, job_id in enumerate(tasks) if states(daemon, [job_id]) == ["CANCELLED"]]
    assert cancelled == [5, 7, 8, 10]


def test_a_task_that_does_not_exist_fails_by_its_name(daemon: Daemon) -> None:
    tasks = submit(daemon, array="1,3")
    plain = submit(daemon)[0]
    reply = handle(daemon, ALICE, {"op": "hold", "jobs": [f"{tasks[0]}_2", f"{plain}_0"]})
    assert reply["results"] == [
        {"id": f"{tasks[0]}_2", "ok": False, "error": f"Invalid job id specified: {tasks[0]}_2"},
        {"id": f"{plain}_0", "ok": False, "error": f"Invalid job id specified: {plain}_0"},
    ]
    assert states(daemon, tasks) == ["PENDING", "PENDING"]


def test_listing_an_arrays_id_lists_every_task_and_n_k_one(daemon: Daemon) -> None:
    tasks = submit(daemon, array="0-2")
    submit(daemon)
    whole = handle(daemon, ALICE, {"op": "jobs", "jobs": [str(tasks[0])], "history": True})
    assert [j["id"] for j in whole["jobs"]] == tasks
    one = handle(daemon, ALICE, {"op": "jobs", "jobs": [f"{tasks[0]}_2"]})
    assert [j["id"] for j in one["jobs"]] == [tasks[2]]


def test_show_job_n_k_and_an_arrays_id_shows_its_tasks(daemon: Daemon) -> None:
    tasks = submit(daemon, array="3-5")
    one = handle(daemon, ALICE, {"op": "job", "id": tasks[0], "task": 4})
    assert one["job"]["id"] == tasks[1] and one["tasks"] == []
    whole = handle(daemon, ALICE, {"op": "job", "id": tasks[0], "with_tasks": True})
    assert [j["id"] for j in whole["tasks"]] == tasks[1:]
    assert handle(daemon, ALICE, {"op": "job", "id": tasks[0]})["tasks"] == []
    missing = handle(daemon, ALICE, {"op": "job", "id": tasks[0], "task": 9})
    assert missing["error"] == f"Invalid job id specified: {tasks[0]}_9"


@pytest.mark.parametrize("op", ["cancel", "hold", "release", "requeue", "jobs"])
@pytest.mark.parametrize("bad", ["4__5", "+4", "99999999999999999999", "1_000", ""])
def test_a_job_text_the_grammar_refuses_is_an_invalid_request(
    daemon: Daemon, op: str, bad: str
) -> None:
    reply = handle(daemon, ALICE, {"op": op, "jobs": [bad]})
    assert reply["ok"] is False and reply["kind"] == "invalid"
    assert reply["error"].startswith(f"jobs: {bad!r}")


@pytest.mark.parametrize(
    "request_",
    [
        {"op": "cancel", "ids": [10**20]},
        {"op": "jobs", "ids": [2**63]},
        {"op": "job", "id": 10**19},
        {"op": "logs", "id": 1, "task": 2**64},
    ],
)
def test_ids_past_sqlites_integers_are_invalid_not_a_crash(
    daemon: Daemon, request_: dict[str, Any]
) -> None:
    reply = handle(daemon, ALICE, request_)
    assert reply["ok"] is False and reply["kind"] == "invalid"
