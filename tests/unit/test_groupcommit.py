"""Group commit: concurrent submits share transactions, each caller gets its own ids."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from oracles import waiting

from gbatch.core.model import JobSpec
from gbatch.head.groupcommit import CommitterClosed, GroupCommitter
from gbatch.head.store import PendingLimitReached, Store, StoreError, Submission

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


class _Recording:
    """A store whose submit_many records each batch (its size, the committing thread)
    and, while `gate` is clear, blocks the first commit until the test opens it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.batches: list[tuple[int, int]] = []
        self.gate = threading.Event()
        self.inside = threading.Event()

    def submit_many(
        self, submissions: list[Submission], now: float
    ) -> list[list[int] | PendingLimitReached]:
        self.batches.append((len(submissions), threading.get_ident()))
        self.inside.set()
        self.gate.wait()
        return self.store.submit_many(submissions, now)


def test_a_lone_caller_commits_in_its_own_thread(tmp_path: Path) -> None:
    recording = _Recording(Store(tmp_path / "g.db"))
    recording.gate.set()
    committer = GroupCommitter(recording, time.time)  # type: ignore[arg-type]
    (job_id,) = committer.submit(Submission((SPEC,), 0, "root"))
    assert recording.batches == [(1, threading.get_ident())]
    assert recording.store.require(job_id).user == "root"


def test_callers_that_come_during_a_commit_share_the_next_one(tmp_path: Path) -> None:
    recording = _Recording(Store(tmp_path / "g.db"))
    committer = GroupCommitter(recording, time.time)  # type: ignore[arg-type]
    results: dict[int, list[int]] = {}

    def submit(caller: int) -> None:
        results[caller] = committer.submit(Submission((SPEC,), caller, f"u{caller}"))

    first = threading.Thread(target=submit, args=(0,))
    first.start()
    recording.inside.wait()  # the first caller's commit is under way, held open
    followers = [threading.Thread(target=submit, args=(c,)) for c in range(1, 6)]
    for thread in followers:
        thread.start()
    while waiting(committer) < 5:
        time.sleep(0.001)
    recording.gate.set()
    for thread in [first, *followers]:
        thread.join()
    assert [size for size, _ in recording.batches] == [1, 5]  # two commits for six callers
    every_id = [i for ids in results.values() for i in ids]
    assert len(set(every_id)) == 6
    for caller, ids in results.items():
        assert [j.user for j in recording.store.jobs(ids=ids)] == [f"u{caller}"]


def test_a_failed_shared_commit_reaches_each_caller_and_the_next_commit_goes_on(
    tmp_path: Path,
) -> None:
    recording = _Recording(Store(tmp_path / "g.db"))
    committer = GroupCommitter(recording, time.time)  # type: ignore[arg-type]
    calls = 0

    def failing_then_working(submissions: list[Submission], now: float) -> object:
        nonlocal calls
        calls += 1
        recording.inside.set()
        recording.gate.wait()
        if calls == 2:  # the followers' shared commit
            raise StoreError("disk full")
        return recording.store.submit_many(submissions, now)

    recording.submit_many = failing_then_working  # type: ignore[assignment, method-assign]
    outcomes: dict[int, object] = {}

    def submit(caller: int) -> None:
        try:
            outcomes[caller] = committer.submit(Submission((SPEC,), caller, f"u{caller}"))
        except StoreError as err:
            outcomes[caller] = str(err)

    first = threading.Thread(target=submit, args=(0,))
    first.start()
    recording.inside.wait()
    followers = [threading.Thread(target=submit, args=(c,)) for c in (1, 2)]
    for thread in followers:
        thread.start()
    while waiting(committer) < 2:
        time.sleep(0.001)
    recording.gate.set()
    for thread in [first, *followers]:
        thread.join()
    assert outcomes[1] == outcomes[2] == "disk full"
    assert isinstance(outcomes[0], list)
    # The lead was handed on, and let go: a later caller commits at once.
    assert committer.submit(Submission((SPEC,), 3, "u3"))
    assert recording.store.count() == 2


def test_a_submit_after_close_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "g.db")
    committer = GroupCommitter(store, time.time)
    committer.submit(Submission((SPEC,), 0, "root"))
    committer.close()
    with pytest.raises(CommitterClosed, match="stopping"):
        committer.submit(Submission((SPEC,), 0, "root"))
    assert store.count() == 1
