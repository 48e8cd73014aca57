"""Requests over many jobs (scancel -u, ranges of ids, holds and releases) against a real
store, batch by batch, and the planner's window over a flooded queue: what each job
ends as, what the caller reads, the audit lines, and that other requests and the loop
run between batches."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gbatch.cli.context import parse_ids, print_failures
from gbatch.cli.exits import CliError, Exit
from gbatch.core.model import JobSpec, JobState
from gbatch.head import daemon as daemon_module
from gbatch.head import handlers
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.store import RunnableWindow, Store
from gbatch.site.config import Config, Paths

ALICE = Caller(uid=5001, user="alice", pid=11)
BOB = Caller(uid=5002, user="bob", pid=22)
ROOT = Caller(uid=0, user="root", pid=1)
SPEC = JobSpec(name="j", command=("train.py",), gpus=1).to_dict()


def make_daemon(tmp_path: Path, **config: object) -> Iterator[Daemon]:
    paths = Paths(tmp_path)
    store = Store(paths.store)
    made = Daemon(paths, Config(simulate_gpus=2, **config), store)  # type: ignore[arg-type]
    yield made
    made.committer.close()
    store.close()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    yield from make_daemon(tmp_path)


@pytest.fixture
def private(tmp_path: Path) -> Iterator[Daemon]:
    yield from make_daemon(tmp_path, private_data=True)


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> int:
    """Small batches, so that a handful of jobs takes several."""
    monkeypatch.setattr(handlers, "BULK_BATCH", 3)
    return 3


def submit(daemon: Daemon, caller: Caller, count: int) -> list[int]:
    reply = handle(daemon, caller, {"op": "submit", "spec": SPEC, "count": count})
    return list(reply["ids"])


def run(daemon: Daemon, job_id: int) -> None:
    now = daemon.clock()
    daemon.store.set_state(
        job_id, JobState.CONFIGURING, "", now, node="local", gpus=(0,), attempt=1
    )
    daemon.store.set_state(job_id, JobState.RUNNING, "", now, start_time=now)


def states(daemon: Daemon, ids: list[int]) -> list[str]:
    return [daemon.store.require(i).state.value for i in ids]


def audit_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("audit")]


def count_batches(daemon: Daemon, monkeypatch: pytest.MonkeyPatch, method: str) -> list[int]:
    """The sizes of the batches the store's `method` is called with (it still runs)."""
    sizes: list[int] = []
    real = getattr(daemon.store, method)

    def counted(ids: list[int], *args: Any) -> Any:
        sizes.append(len(ids))
        return real(ids, *args)

    monkeypatch.setattr(daemon.store, method, counted)
    return sizes


def test_a_sweep_cancels_pending_jobs_by_batch_and_leaves_running_ones_to_the_loop(
    daemon: Daemon, batches: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = submit(daemon, ALICE, 8)
    bob = submit(daemon, BOB, 2)
    run(daemon, alice[0])
    sizes = count_batches(daemon, monkeypatch, "cancel_pending")

    reply = handle(daemon, ALICE, {"op": "cancel", "users": ["alice"]})

    assert reply == {"ok": True, "results": [], "done": 8, "failed": 0}
    assert sizes == [3, 3, 1]
    stopping = daemon.store.require(alice[0])
    assert (stopping.state, stopping.stop_state, stopping.reason) == (
        JobState.COMPLETING,  # the loop signals the run, then records CANCELLED
        JobState.CANCELLED,
        "cancel requested by alice",
    )
    for job_id in alice[1:]:
        job = daemon.store.require(job_id)
        assert (job.state, job.reason) == (JobState.CANCELLED, "cancelled by alice")
        assert daemon.store.events(job_id)[-1].reason == "cancelled by alice"
    assert states(daemon, bob) == ["PENDING", "PENDING"]
    assert daemon.store.usage(daemon.clock(), 3600.0) == {}


def test_a_sweep_of_another_users_jobs_touches_nothing_and_says_nothing(
    daemon: Daemon, batches: int, caplog: pytest.LogCaptureFixture
) -> None:
    alice = submit(daemon, ALICE, 4)
    caplog.set_level(logging.INFO, logger="gbatchd")
    reply = handle(daemon, BOB, {"op": "cancel", "users": ["alice"], "states": ["PD"]})
    assert reply == {"ok": True, "results": [], "done": 0, "failed": 0}
    assert states(daemon, alice) == ["PENDING"] * 4
    assert audit_lines(caplog) == []
    # An admin's sweep takes them, as Slurm's scancel -u does for root.
    assert handle(daemon, ROOT, {"op": "cancel", "users": ["alice"]})["done"] == 4
    assert states(daemon, alice) == ["CANCELLED"] * 4


def test_named_ids_and_ranges_fail_each_job_not_yours_with_one_audit_line(
    daemon: Daemon, batches: int, caplog: pytest.LogCaptureFixture
) -> None:
    alice = submit(daemon, ALICE, 7)
    bob = submit(daemon, BOB, 3)
    caplog.set_level(logging.INFO, logger="gbatchd")
    request = {"op": "cancel", "ids": [9999], "ranges": [f"{alice[0]}-{bob[-1]}", "900-910"]}

    reply = handle(daemon, BOB, request)

    denied = [
        {"id": i, "ok": False, "error": f"Access/permission denied for job {i}"} for i in alice
    ]
    assert reply == {
        "ok": True,
        "results": [
            {"id": 9999, "ok": False, "error": "Invalid job id specified: 9999"},
            *denied,
            {"id": "900-910", "ok": False, "error": "Invalid job id specified: 900-910"},
        ],
        "done": 3,
        "failed": 9,
    }
    assert states(daemon, alice) == ["PENDING"] * 7
    assert states(daemon, bob) == ["CANCELLED"] * 3
    shown = ",".join(map(str, alice[:5]))
    assert audit_lines(caplog) == [
        f"audit: user=bob uid=5002 pid=22 op=cancel jobs=7 ids={shown}... owners=alice "
        "-> refused: not the owner"
    ]


def test_filters_narrow_named_jobs_before_their_owner_is_checked(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    alice = submit(daemon, ALICE, 2)
    bob = submit(daemon, BOB, 2)
    run(daemon, bob[0])
    caplog.set_level(logging.INFO, logger="gbatchd")
    ids = [*alice, *bob]
    reply = handle(daemon, BOB, {"op": "cancel", "ids": ids, "users": ["bob"], "states": ["PD"]})
    assert reply == {"ok": True, "results": [], "done": 1, "failed": 0}
    assert states(daemon, ids) == ["PENDING", "PENDING", "RUNNING", "CANCELLED"]
    assert audit_lines(caplog) == []


def test_cancelling_a_job_that_has_ended_fails_and_one_stopping_succeeds(
    daemon: Daemon,
) -> None:
    ended, stopping = submit(daemon, ALICE, 2)
    handle(daemon, ALICE, {"op": "cancel", "ids": [ended]})
    run(daemon, stopping)
    handle(daemon, ALICE, {"op": "cancel", "ids": [stopping]})
    reply = handle(daemon, ALICE, {"op": "cancel", "ranges": [f"{ended}-{stopping}"]})
    error = f"Job/step already completing or completed: job {ended} is CANCELLED"
    assert reply == {
        "ok": True,
        "results": [{"id": ended, "ok": False, "error": error}],
        "done": 1,
        "failed": 1,
    }


def test_private_data_leaves_other_users_jobs_out_of_a_range_as_if_missing(
    private: Daemon, batches: int, caplog: pytest.LogCaptureFixture
) -> None:
    alice = submit(private, ALICE, 4)
    bob = submit(private, BOB, 2)
    caplog.set_level(logging.INFO, logger="gbatchd")
    theirs = f"{alice[0]}-{alice[-1]}"

    only_theirs = handle(private, BOB, {"op": "hold", "ranges": [theirs]})
    both = handle(private, BOB, {"op": "cancel", "ranges": [f"{alice[0]}-{bob[-1]}"]})
    named = handle(private, BOB, {"op": "release", "ids": [alice[0]]})

    missing = {"ok": False, "error": f"Invalid job id specified: {theirs}"}
    assert only_theirs == {
        "ok": True,
        "results": [{"id": theirs, **missing}],
        "done": 0,
        "failed": 1,
    }
    assert both == {"ok": True, "results": [], "done": 2, "failed": 0}
    assert named["results"] == [
        {"id": alice[0], "ok": False, "error": f"Invalid job id specified: {alice[0]}"}
    ]
    assert [private.store.require(i).held for i in alice] == [False] * 4
    assert states(private, [*alice, *bob]) == ["PENDING"] * 4 + ["CANCELLED"] * 2
    why = "refused: not the owner (private_data: not found)"
    ids = ",".join(map(str, alice))
    assert audit_lines(caplog) == [
        f"audit: user=bob uid=5002 pid=22 op=hold jobs=4 ids={ids} owners=alice -> {why}",
        f"audit: user=bob uid=5002 pid=22 op=cancel jobs=4 ids={ids} owners=alice -> {why}",
        f"audit: user=bob uid=5002 pid=22 op=release job={alice[0]} owner=alice -> {why}",
    ]


def test_hold_and_release_a_range_by_batch_and_fail_jobs_no_longer_pending(
    daemon: Daemon, batches: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = submit(daemon, ALICE, 7)
    run(daemon, ids[2])
    sizes = count_batches(daemon, monkeypatch, "set_held_many")
    span = f"{ids[0]}-{ids[-1]}"
    not_pending = {
        "id": ids[2],
        "ok": False,
        "error": f"Job is no longer pending execution: job {ids[2]} is RUNNING",
    }

    held = handle(daemon, ALICE, {"op": "hold", "ranges": [span]})

    assert held == {"ok": True, "results": [not_pending], "done": 6, "failed": 1}
    assert sizes == [2, 3, 1]
    assert [daemon.store.require(i).held for i in ids] == [True] * 2 + [False] + [True] * 4
    assert daemon.store.runnable_jobs() == []
    assert daemon.store.events(ids[0])[-1].reason == "held by user"
    released = handle(daemon, ALICE, {"op": "release", "ids": ids[:2], "ranges": [span]})
    assert released == {"ok": True, "results": [not_pending], "done": 8, "failed": 1}
    assert [daemon.store.require(i).held for i in ids] == [False] * 7


def test_requeue_takes_a_range(daemon: Daemon) -> None:
    ids = submit(daemon, ALICE, 3)
    handle(daemon, ALICE, {"op": "cancel", "ids": ids[:2]})
    reply = handle(daemon, ALICE, {"op": "requeue", "ranges": [f"{ids[0]}-{ids[-1]}"]})
    error = f"Job is pending execution: job {ids[2]} has not run yet"
    assert reply == {
        "ok": True,
        "results": [{"id": ids[2], "ok": False, "error": error}],
        "done": 2,
        "failed": 1,
    }
    assert states(daemon, ids) == ["PENDING"] * 3


def test_a_reply_lists_the_first_failures_and_counts_them_all(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handlers, "LISTED_FAILURES", 2)
    reply = handle(daemon, ALICE, {"op": "cancel", "ids": [901, 902, 903, 904, 905]})
    assert reply["results"] == [
        {"id": 901, "ok": False, "error": "Invalid job id specified: 901"},
        {"id": 902, "ok": False, "error": "Invalid job id specified: 902"},
    ]
    assert (reply["done"], reply["failed"]) == (0, 5)


@pytest.mark.parametrize("bad", ["9-3", "0-4", "12", "a-b", "-3", "3-"])
def test_a_bad_range_is_refused_naming_the_field_and_the_form(daemon: Daemon, bad: str) -> None:
    for op in ("cancel", "hold", "release", "requeue"):
        assert handle(daemon, ALICE, {"op": op, "ranges": [bad]}) == {
            "ok": False,
            "kind": "invalid",
            "error": f"ranges: {bad!r} is not a range of job ids. Use FIRST-LAST, e.g. 12-511",
        }


def test_squeue_and_the_loop_are_served_between_the_batches_of_a_cancel(
    daemon: Daemon, batches: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel stops after its first batch until bob's squeue and a loop step (which
    writes pending reasons) have been served: were the store's lock held across
    batches, they would wait for the whole cancel and see none of alice's jobs left."""
    alice = submit(daemon, ALICE, 8)
    first_batch = threading.Event()
    served = threading.Event()
    real = daemon.store.cancel_pending

    def pausing(ids: list[int], reason: str, now: float) -> list[int]:
        done = real(ids, reason, now)
        if not first_batch.is_set():
            first_batch.set()
            served.wait(timeout=60)
        return done

    monkeypatch.setattr(daemon.store, "cancel_pending", pausing)
    replies: list[dict[str, Any]] = []
    cancel = threading.Thread(
        target=lambda: replies.append(handle(daemon, ALICE, {"op": "cancel", "users": ["alice"]}))
    )
    cancel.start()
    try:
        assert first_batch.wait(timeout=60)
        queue = handle(daemon, BOB, {"op": "jobs"})
        daemon.step()
        reasons = {daemon.store.require(i).reason for i in alice[3:]}
    finally:
        served.set()
        cancel.join(timeout=60)
    assert [job["id"] for job in queue["jobs"]] == alice[3:]
    assert "" not in reasons  # the loop planned the jobs the cancel had not reached yet
    assert replies == [{"ok": True, "results": [], "done": 8, "failed": 0}]
    assert states(daemon, alice) == ["CANCELLED"] * 8


def test_the_planner_looks_at_each_users_first_jobs_so_a_flood_hides_no_one(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs the loop planned get a pending reason (no node answers here, so none
    starts); jobs beyond a user's window keep the empty reason they were submitted with."""
    monkeypatch.setattr(daemon_module, "PLAN_JOBS_PER_USER", 3)
    monkeypatch.setattr(daemon, "_window", RunnableWindow(3))
    flood = submit(daemon, ALICE, 6)
    bob = submit(daemon, BOB, 2)
    daemon.schedule(daemon.clock())
    planned = [daemon.store.require(i).reason != "" for i in [*flood, *bob]]
    assert planned == [True] * 3 + [False] * 3 + [True] * 2
    handle(daemon, ALICE, {"op": "cancel", "ids": flood[:2]})
    daemon.schedule(daemon.clock())
    assert [daemon.store.require(i).reason != "" for i in flood[2:]] == [True, True, True, False]


def test_the_cli_reads_ids_and_ranges_and_refuses_anything_else() -> None:
    assert parse_ids(["12", "13,20-511", "7-7", "4_5"], "JOBID") == [
        "12",
        "13",
        "20-511",
        "7-7",
        "4_5",
    ]
    assert parse_ids(None, "JOBID") is None
    for bad in ("0-3", "x", "12_", "-4", "4 5"):
        with pytest.raises(CliError) as caught:
            parse_ids([bad], "JOBID")
        assert caught.value.status is Exit.USAGE
        assert caught.value.message.startswith(f"JOBID: {bad!r} is not a job id")


def test_the_cli_prints_each_listed_failure_then_how_many_more(
    capsys: pytest.CaptureFixture[str],
) -> None:
    reply = {
        "results": [{"id": 9, "ok": False, "error": "Invalid job id specified: 9"}],
        "done": 3,
        "failed": 1_001,
    }
    assert print_failures("scancel", reply, lambda f: f"job {f['id']}: {f['error']}")
    assert capsys.readouterr().err == (
        "gbatch scancel: error: job 9: Invalid job id specified: 9\n"
        "gbatch scancel: error: and 1,000 more jobs failed\n"
    )
    quiet = {"results": [], "done": 500_000, "failed": 0}
    assert not print_failures("scancel", quiet, lambda f: "")
    assert capsys.readouterr() == ("", "")
