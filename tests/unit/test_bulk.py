"""The planner's window over a flooded queue: each user's first jobs, so that one user's
500,000 waiting jobs cost a pass what 1,000 do and hide nobody else's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gbatch.config import Config, Paths
from gbatch.head import daemon as daemon_module
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.store import Store
from gbatch.model import JobSpec

ALICE = Caller(uid=5001, user="alice", pid=11)
BOB = Caller(uid=5002, user="bob", pid=22)
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


def submit(daemon: Daemon, caller: Caller, count: int) -> list[int]:
    reply = handle(daemon, caller, {"op": "submit", "spec": SPEC, "count": count})
    return list(reply["ids"])


def test_the_planner_looks_at_each_users_first_jobs_so_a_flood_hides_no_one(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs the loop planned get a pending reason (no node answers here, so none
    starts); jobs beyond a user's window keep the empty reason they were submitted with."""
    monkeypatch.setattr(daemon_module, "PLAN_JOBS_PER_USER", 3)
    flood = submit(daemon, ALICE, 6)
    bob = submit(daemon, BOB, 2)
    daemon.schedule(daemon.clock())
    planned = [daemon.store.require(i).reason != "" for i in [*flood, *bob]]
    assert planned == [True] * 3 + [False] * 3 + [True] * 2
    for job_id in flood[:2]:
        handle(daemon, ALICE, {"op": "cancel", "ids": [job_id]})
    daemon.schedule(daemon.clock())
    assert [daemon.store.require(i).reason != "" for i in flood[2:]] == [True, True, True, False]
