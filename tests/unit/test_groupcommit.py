"""Group commit: concurrent submits share transactions, each caller gets its own ids."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gbatch.head.groupcommit import GroupCommitter
from gbatch.head.store import Store, StoreError, Submission
from gbatch.model import JobSpec

SPEC = JobSpec(name="j", command=("true",))


def test_concurrent_callers_each_get_their_own_durable_ids(tmp_path: Path) -> None:
    store = Store(tmp_path / "g.db")
    committer = GroupCommitter(store, time.time)
    results: dict[int, list[int]] = {}

    def submit(caller: int) -> None:
        for n in range(50):
            ids = committer.submit(Submission((SPEC,) * (1 + n % 3), caller, f"u{caller}"))
            results.setdefault(caller, []).extend(ids)

    threads = [threading.Thread(target=submit, args=(c,)) for c in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    committer.close()
    every_id = [i for ids in results.values() for i in ids]
    assert len(every_id) == len(set(every_id)) == 8 * sum(1 + n % 3 for n in range(50))
    reopened = Store(tmp_path / "g.db")
    assert reopened.count() == len(every_id)
    for caller, ids in results.items():
        assert {j.user for j in reopened.jobs(ids=ids)} == {f"u{caller}"}


def test_a_failed_commit_is_reported_to_every_caller_in_the_batch(tmp_path: Path) -> None:
    store = Store(tmp_path / "g.db")

    def broken(submissions: object, now: float) -> list[list[int]]:
        raise StoreError("disk full")

    store.submit_many = broken  # type: ignore[method-assign]
    committer = GroupCommitter(store, time.time)
    with pytest.raises(StoreError, match="disk full"):
        committer.submit(Submission((SPEC,), 0, "root"))
    committer.close()


def test_held_submission_is_stored_held_with_its_reason(tmp_path: Path) -> None:
    store = Store(tmp_path / "g.db")
    committer = GroupCommitter(store, time.time)
    (job_id,) = committer.submit(Submission((SPEC,), 0, "root", held=True))
    committer.close()
    job = store.require(job_id)
    assert job.held and job.reason == "JobHeldUser"
    assert store.runnable_jobs() == []


def test_a_lone_submit_is_committed_in_the_callers_own_thread(tmp_path: Path) -> None:
    store = Store(tmp_path / "g.db")
    real = store.submit_many
    threads: list[threading.Thread] = []

    def recording(submissions: Sequence[Submission], now: float) -> list[Any]:
        threads.append(threading.current_thread())
        return real(submissions, now)

    store.submit_many = recording  # type: ignore[method-assign]
    committer = GroupCommitter(store, time.time)
    (job_id,) = committer.submit(Submission((SPEC,), 0, "root"))
    assert threads == [threading.current_thread()]
    assert store.require(job_id).user == "root"


def test_callers_arriving_during_a_commit_share_the_next_one(tmp_path: Path) -> None:
    store = Store(tmp_path / "g.db")
    real = store.submit_many
    batches: list[list[str]] = []
    first_started, let_first_finish = threading.Event(), threading.Event()

    def slow_first(submissions: Sequence[Submission], now: float) -> list[Any]:
        batches.append([s.user for s in submissions])
        if len(batches) == 1:
            first_started.set()
            let_first_finish.wait()
        return real(submissions, now)

    store.submit_many = slow_first  # type: ignore[method-assign]
    committer = GroupCommitter(store, time.time)
    ids: dict[str, list[int]] = {}

    def submit(user: str) -> None:
        ids[user] = committer.submit(Submission((SPEC,) * 2, 0, user))

    leader = threading.Thread(target=submit, args=("first",))
    leader.start()
    first_started.wait()
    later = [threading.Thread(target=submit, args=(f"later{n}",)) for n in range(3)]
    for thread in later:
        thread.start()
    while True:  # all three are queued behind the commit under way
        with committer._lock:
            if len(committer._waiting) == 3:
                break
        time.sleep(0.001)
    let_first_finish.set()
    for thread in [leader, *later]:
        thread.join()
    assert batches[0] == ["first"]
    assert sorted(batches[1]) == ["later0", "later1", "later2"] and len(batches) == 2
    for user, got in ids.items():
        assert len(got) == 2 and {store.require(i).user for i in got} == {user}
    # The committer stood down: the next lone caller leads at once.
    assert committer.submit(Submission((SPEC,), 0, "next"))
