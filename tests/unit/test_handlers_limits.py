"""Limits at submit (a real store and group commit, the daemon's loop not started) and
`gbatch sshare`'s request: refusals are one line naming the limit and the count, and
nothing is queued; concurrent submits cannot race past max_pending_jobs."""

from __future__ import annotations

import grp
import os
import pwd
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from gbatch.core.limits import Limits, PendingLimitReached, UserLimits
from gbatch.core.model import JobSpec, JobState
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.store import Store, Submission
from gbatch.protocol import requests
from gbatch.site.config import Config, Paths

ROOT = Caller(uid=0, user="root", pid=1)
# Never root nor the daemon's own user (both exempt from submit limits).
ALICE = Caller(uid=4242, user="alice", pid=2)
BOB = Caller(uid=4243, user="bob", pid=3)
SPEC = JobSpec(name="j", command=("true",)).to_dict()
GPU_SPEC = JobSpec(name="g", command=("true",), gpus=2).to_dict()


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Callable[[Limits], Daemon]]:
    made: list[Daemon] = []

    def make(limits: Limits) -> Daemon:
        paths = Paths(tmp_path / str(len(made)))
        daemon = Daemon(paths, Config(simulate_gpus=4, limits=limits), Store(paths.store))
        made.append(daemon)
        return daemon

    yield make
    for daemon in made:
        daemon.committer.close()
        daemon.store.close()


def limits(**settings: int | None) -> Limits:
    return Limits(replace(UserLimits(), **settings))


def submit(daemon: Daemon, caller: Caller, **fields: Any) -> dict[str, Any]:
    return handle(daemon, caller, {"op": "submit", "spec": SPEC, **fields})


def pending(daemon: Daemon, user: str) -> int:
    return len(daemon.store.jobs(users=[user], states=[JobState.PENDING]))


def test_a_submit_past_max_pending_jobs_is_refused_naming_the_limit_and_the_count(
    make_daemon: Callable[[Limits], Daemon],
) -> None:
    daemon = make_daemon(limits(max_pending_jobs=3))
    assert submit(daemon, ALICE, count=2)["ok"]
    assert submit(daemon, ALICE, held=True)["ok"]  # held jobs count too
    reply = submit(daemon, ALICE)
    assert reply == {
        "ok": False,
        "kind": "permission",
        "error": "limits: you have 3 pending jobs, the limit (max_pending_jobs) is 3. Wait for "
        "some to start or cancel some",
    }
    assert pending(daemon, "alice") == 3
    assert submit(daemon, BOB, count=3)["ok"], "the limit is per user"


def test_an_array_that_would_pass_max_pending_jobs_queues_none_of_its_tasks(
    make_daemon: Callable[[Limits], Daemon],
) -> None:
    daemon = make_daemon(limits(max_pending_jobs=10))
    assert submit(daemon, ALICE, count=7)["ok"]
    reply = submit(daemon, ALICE, count=5)
    assert reply["error"] == (
        "limits: you have 7 pending jobs and this array adds 5, over the limit "
        "(max_pending_jobs) of 10. Submit at most 3 tasks, or wait for some to start or "
        "cancel some"
    )
    assert daemon.store.count() == 7
    assert submit(daemon, ALICE, count=3)["ok"]
    assert pending(daemon, "alice") == 10


def test_jobs_that_left_pending_make_room_again(make_daemon: Callable[[Limits], Daemon]) -> None:
    daemon = make_daemon(limits(max_pending_jobs=2))
    ids = submit(daemon, ALICE, count=2)["ids"]
    assert not submit(daemon, ALICE)["ok"]
    assert handle(daemon, ALICE, {"op": "cancel", "ids": ids[:1]})["done"] == 1
    assert submit(daemon, ALICE)["ok"]


def test_concurrent_submits_cannot_race_past_max_pending_jobs(
    make_daemon: Callable[[Limits], Daemon],
) -> None:
    daemon = make_daemon(limits(max_pending_jobs=10))
    replies: list[dict[str, Any]] = []
    start = threading.Barrier(40)

    def one() -> None:
        start.wait()
        replies.append(submit(daemon, ALICE, held=True))

    threads = [threading.Thread(target=one) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(reply["ok"] for reply in replies) == 10
    refused = [reply for reply in replies if not reply["ok"]]
    assert {reply["kind"] for reply in refused} == {"permission"}
    assert all("the limit (max_pending_jobs) is 10" in reply["error"] for reply in refused)
    assert pending(daemon, "alice") == daemon.store.count() == 10


def test_one_batch_refuses_only_the_submissions_past_their_users_limit(tmp_path: Path) -> None:
    store = Store(tmp_path / "gbatch.db")
    spec = JobSpec(name="j", command=("true",))
    results = store.submit_many(
        [
            Submission((spec,) * 2, 1, "alice", max_pending=3),
            Submission((spec,) * 2, 1, "alice", max_pending=3),  # 4 > 3
            Submission((spec,), 2, "bob", max_pending=1),
            Submission((spec,), 1, "alice", max_pending=3),  # 3: fits
            Submission((spec,) * 5, 0, "root"),  # no limit
        ],
        now=1.0,
    )
    refused = results[1]
    assert isinstance(refused, PendingLimitReached)
    assert (refused.pending, refused.adding, refused.limit) == (2, 2, 3)
    assert [len(r) for r in results if isinstance(r, list)] == [2, 1, 1, 5]
    assert store.pending_counts() == {"alice": 3, "bob": 1, "root": 5}
    assert store.pending_counts(["bob", "nobody"]) == {"bob": 1}
    (again,) = store.submit_many([Submission((spec,), 1, "alice", max_pending=3)], 2.0)
    assert isinstance(again, PendingLimitReached)
    assert [e.reason for e in store.events(1)] == ["submitted"]
    store.close()


def test_an_array_past_max_array_size_is_bad_input(
    make_daemon: Callable[[Limits], Daemon],
) -> None:
    daemon = make_daemon(limits(max_array_size=100))
    reply = submit(daemon, ALICE, count=101)
    assert reply == {
        "ok": False,
        "kind": "invalid",
        "error": "limits: --array asks for 101 tasks, the limit (max_array_size) is 100. "
        "Submit arrays of at most 100 tasks",
    }
    assert daemon.store.count() == 0
    assert len(submit(daemon, ALICE, count=100)["ids"]) == 100


def test_a_job_asking_more_gpus_than_max_gpus_is_refused_as_it_could_never_start(
    make_daemon: Callable[[Limits], Daemon],
) -> None:
    daemon = make_daemon(limits(max_gpus=1))
    reply = handle(daemon, ALICE, {"op": "submit", "spec": GPU_SPEC})
    assert reply == {
        "ok": False,
        "kind": "invalid",
        "error": "limits: the job asks for 2 GPUs, your limit (max_gpus) is 1, so it could never "
        "start. Ask for at most 1, or ask an admin to raise the limit",
    }
    assert daemon.store.count() == 0


def test_root_and_the_daemons_user_are_never_refused_at_submit(
    make_daemon: Callable[[Limits], Daemon],
) -> None:
    daemon = make_daemon(limits(max_pending_jobs=1, max_array_size=2, max_gpus=0))
    me = Caller(uid=os.getuid(), user=pwd.getpwuid(os.getuid()).pw_name, pid=4)
    for caller in (ROOT, me):
        assert submit(daemon, caller, count=3)["ok"]
        assert handle(daemon, caller, {"op": "submit", "spec": GPU_SPEC})["ok"]


def test_a_users_own_entry_overrides_the_default(make_daemon: Callable[[Limits], Daemon]) -> None:
    daemon = make_daemon(
        Limits(
            UserLimits(max_pending_jobs=1),
            users=MappingProxyType({"alice": {"max_pending_jobs": None}}),
        )
    )
    assert submit(daemon, ALICE, count=5)["ok"]
    assert submit(daemon, BOB)["ok"]
    assert not submit(daemon, BOB)["ok"]


def test_a_group_entry_applies_to_the_members_of_a_real_group(
    make_daemon: Callable[[Limits], Daemon],
) -> None:
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("this system has no user nobody")
    group = grp.getgrgid(nobody.pw_gid).gr_name  # nobody's primary group
    daemon = make_daemon(
        Limits(groups=MappingProxyType({group: MappingProxyType({"max_pending_jobs": 1})}))
    )
    caller = Caller(uid=nobody.pw_uid, user="nobody", pid=5)
    assert daemon.limits_for("nobody").max_pending_jobs == 1
    assert submit(daemon, caller)["ok"]
    assert "the limit (max_pending_jobs) is 1" in submit(daemon, caller)["error"]
    assert submit(daemon, ALICE, count=2)["ok"], "alice is not in the group"


# -- sshare -----------------------------------------------------------------------------


def shares(daemon: Daemon, caller: Caller, **fields: Any) -> dict[str, Any]:
    return handle(daemon, caller, requests.encode_request(requests.ShowShares(**fields)))


def test_a_user_sees_their_own_limits_and_what_their_jobs_hold(
    make_daemon: Callable[[Limits], Daemon],
) -> None:
    daemon = make_daemon(limits(max_running_jobs=4, max_gpus=2))
    submit(daemon, ALICE, count=3)
    submit(daemon, BOB)
    reply = shares(daemon, ALICE)
    assert reply["ok"]
    (row,) = reply["users"]
    assert row == {
        "user": "alice",
        "usage": 0.0,
        "effective_usage": 0.0,
        "fairshare": 1.0,
        "pending": 3,
        "running": 0,
        "gpus": 0,
        "limits": {
            "max_pending_jobs": 10_000,
            "max_running_jobs": 4,
            "max_gpus": 2,
            "max_array_size": 10_001,
        },
    }
    assert shares(daemon, ALICE, users=("alice",))["users"] == reply["users"]


@pytest.mark.parametrize("fields", [{"all_users": True}, {"users": ("bob",)}])
def test_only_admins_see_other_users_rows(
    make_daemon: Callable[[Limits], Daemon], fields: dict[str, Any]
) -> None:
    daemon = make_daemon(Limits())
    reply = shares(daemon, ALICE, **fields)
    assert reply["ok"] is False and reply["kind"] == "permission"
    assert reply["error"].startswith("only root, the daemon's user or an admin may see other")


def test_an_admin_sees_every_user_with_jobs_or_a_limits_entry(
    make_daemon: Callable[[Limits], Daemon],
) -> None:
    daemon = make_daemon(Limits(users=MappingProxyType({"carol": {"max_gpus": 8}})))
    submit(daemon, ALICE, count=2)
    submit(daemon, BOB, held=True)
    rows = {row["user"]: row for row in shares(daemon, ROOT, all_users=True)["users"]}
    assert list(rows) == ["alice", "bob", "carol"]
    assert (rows["alice"]["pending"], rows["bob"]["pending"], rows["carol"]["pending"]) == (2, 1, 0)
    assert rows["carol"]["limits"]["max_gpus"] == 8
    (root,) = shares(daemon, ROOT)["users"]
    # Root is never refused at submit: its row says so.
    assert root["limits"]["max_pending_jobs"] is None
    assert root["limits"]["max_array_size"] is None


def test_the_pending_count_at_submit_reads_the_index_of_pending_jobs_alone(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "gbatch.db")
    spec = JobSpec(name="j", command=("true",))
    store.submit_many([Submission((spec,) * 3, 1, "alice")], 1.0)
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    store.submit_many([Submission((spec,), 1, "alice", max_pending=5)], 2.0)
    store.pending_counts()
    store.pending_counts(["alice"])
    store._db.set_trace_callback(None)
    counts = [s for s in statements if "count(*)" in s]
    assert len(counts) == 3
    for statement in counts:
        steps = store._db.execute(f"EXPLAIN QUERY PLAN {statement}").fetchall()
        assert [step[3] for step in steps if "jobs" in step[3]] in (
            ["SEARCH jobs USING INDEX jobs_pending_user (user=?)"],
            ["SCAN jobs USING INDEX jobs_pending_user"],
        ), statement
    store.close()


def _counted(store: Store, submit: Callable[[], object]) -> int:
    """How many times `submit` counted pending jobs in SQL."""
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    try:
        submit()
    finally:
        store._db.set_trace_callback(None)
    return sum("count(*)" in statement for statement in statements)


def test_a_burst_of_submits_counts_the_users_pending_jobs_once_and_stops_at_the_limit(
    tmp_path: Path,
) -> None:
    # Counting is ~0.5 ms at 10,000 pending: a submit that follows the user's own last
    # commit, with nothing written since, goes on from that commit's count.
    store = Store(tmp_path / "gbatch.db")
    spec = JobSpec(name="j", command=("true",))
    store.submit_many([Submission((spec,) * 3, 1, "alice")], 1.0)
    one = [Submission((spec,), 1, "alice", held=True, max_pending=6)]
    assert _counted(store, lambda: store.submit_many(one, 2.0)) == 1
    for _ in range(2):
        assert _counted(store, lambda: store.submit_many(one, 2.0)) == 0
    results: list[object] = []
    assert _counted(store, lambda: results.extend(store.submit_many(one, 2.0))) == 0
    (refused,) = results
    assert isinstance(refused, PendingLimitReached)
    assert (refused.pending, refused.limit) == (6, 6)
    assert store.pending_counts() == {"alice": 6}
    store.close()


def test_after_any_other_write_the_next_submit_counts_again(
    make_daemon: Callable[[Limits], Daemon],
) -> None:
    daemon = make_daemon(limits(max_pending_jobs=3))
    ids = submit(daemon, ALICE, count=3)["ids"]
    assert not submit(daemon, ALICE)["ok"]
    daemon.store.cancel_pending(ids[:2], "cancelled by alice", 5.0)  # not a submit
    counts: list[dict[str, Any]] = []
    assert _counted(daemon.store, lambda: counts.append(submit(daemon, ALICE, count=2))) == 1
    assert counts[0]["ok"]
    assert not submit(daemon, ALICE)["ok"]
    assert pending(daemon, "alice") == 3


def test_a_known_count_takes_in_the_users_unlimited_submissions_of_the_same_batch(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "gbatch.db")
    spec = JobSpec(name="j", command=("true",))
    store.submit_many([Submission((spec,), 1, "alice", max_pending=3)], 1.0)  # known: 1
    results = store.submit_many(
        [
            Submission((spec,) * 2, 1, "alice"),  # no limit (say, limits were reloaded)
            Submission((spec,), 1, "alice", max_pending=3),  # 1 + 2 + 1 > 3
        ],
        2.0,
    )
    assert isinstance(results[1], PendingLimitReached)
    assert results[1].pending == 3
    assert store.pending_counts() == {"alice": 3}
    store.close()


# -- requeue counts as a submit ----------------------------------------------------------

FULL_LINE = (
    "limits: you have 2 pending jobs, the limit (max_pending_jobs) is 2. Wait for some to "
    "start or cancel some"
)


def requeue(daemon: Daemon, caller: Caller, ids: list[int]) -> dict[str, Any]:
    return handle(daemon, caller, {"op": "requeue", "ids": ids})


def start(daemon: Daemon, job_id: int) -> None:
    """Put a pending job on the local node, as the loop's dispatch would."""
    daemon.store.set_state(job_id, JobState.CONFIGURING, "", 2.0, node="local", attempt=1)
    daemon.store.set_state(job_id, JobState.RUNNING, "", 3.0)


def test_a_users_requeue_past_max_pending_jobs_is_refused_with_the_submits_line(
    make_daemon: Callable[[Limits], Daemon],
) -> None:
    daemon = make_daemon(limits(max_pending_jobs=2))
    ended = submit(daemon, ALICE, count=2)["ids"]
    assert handle(daemon, ALICE, {"op": "cancel", "ids": ended})["done"] == 2
    assert submit(daemon, ALICE, count=2)["ok"]
    reply = requeue(daemon, ALICE, ended)
    assert reply["results"] == [{"id": job_id, "ok": False, "error": FULL_LINE} for job_id in ended]
    assert (reply["done"], reply["failed"]) == (0, 2)
    assert [daemon.store.get(i).state for i in ended] == [JobState.CANCELLED] * 2  # type: ignore[union-attr]
    assert pending(daemon, "alice") == 2
    # An admin's requeue restores a queue past anyone's limit.
    assert requeue(daemon, ROOT, ended)["done"] == 2
    assert pending(daemon, "alice") == 4


def test_a_requeue_fills_only_the_room_left_under_the_limit(
    make_daemon: Callable[[Limits], Daemon],
) -> None:
    daemon = make_daemon(limits(max_pending_jobs=2))
    ended = submit(daemon, ALICE, count=2)["ids"]
    handle(daemon, ALICE, {"op": "cancel", "ids": ended})
    assert submit(daemon, ALICE)["ok"]
    reply = requeue(daemon, ALICE, ended)
    assert (reply["done"], reply["failed"]) == (1, 1)
    assert reply["results"] == [{"id": ended[1], "ok": False, "error": FULL_LINE}]
    assert pending(daemon, "alice") == 2


def test_a_running_job_being_requeued_counts_as_pending_already(
    make_daemon: Callable[[Limits], Daemon],
) -> None:
    daemon = make_daemon(limits(max_pending_jobs=2))
    running = submit(daemon, ALICE, count=2)["ids"]
    for job_id in running:
        start(daemon, job_id)
    assert submit(daemon, ALICE)["ok"]
    # One pending and one on its way back to pending: the second requeue would be a third.
    first = requeue(daemon, ALICE, running[:1])
    assert first["done"] == 1
    assert daemon.store.get(running[0]).state is JobState.COMPLETING  # type: ignore[union-attr]
    assert requeue(daemon, ALICE, running[1:])["results"] == [
        {"id": running[1], "ok": False, "error": FULL_LINE}
    ]
    assert daemon.store.get(running[1]).state is JobState.RUNNING  # type: ignore[union-attr]
