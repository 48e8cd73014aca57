"""Group commit: concurrent submits share transactions, each caller gets its own ids."""

from __future__ import annotations

import threading
import time
from pathlib import Path

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
