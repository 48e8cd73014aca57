"""Request handlers against a real store, without starting the daemon's loop."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fullstore import integrity_ok, pack_store

from gbatch.config import Config, Paths
from gbatch.daemon import Daemon
from gbatch.handlers import Caller, handle
from gbatch.model import JobSpec
from gbatch.store import Store

ROOT = Caller(uid=0, user="root", pid=1)
SPEC = JobSpec(name="j", command=("true",)).to_dict()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    paths = Paths(tmp_path)
    store = Store(paths.store)
    made = Daemon(paths, Config(simulate_gpus=2), store)
    yield made
    made.committer.close()
    store.close()


def test_a_full_disk_refuses_the_submit_clearly_and_queues_nothing(daemon: Daemon) -> None:
    assert handle(daemon, ROOT, {"op": "submit", "spec": SPEC})["ok"]
    db = daemon.store._db
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own "disk is full"
    reply = handle(daemon, ROOT, {"op": "submit", "spec": SPEC, "count": 2000})
    assert reply == {
        "ok": False,
        "kind": "unavailable",
        "error": f"the job store cannot write: disk full ({daemon.paths.home}); nothing was "
        "queued. Free space there and resubmit",
    }
    db.execute("PRAGMA max_page_count = 1073741823")
    assert daemon.store.count() == 1
    assert integrity_ok(daemon.store)


def fill_store(daemon: Daemon, pad_job: int) -> None:
    pack_store(daemon.store, pad_job)


@pytest.mark.parametrize("op", ["cancel", "hold"])
def test_a_full_disk_fails_each_cancel_or_hold_clearly_and_changes_nothing(
    daemon: Daemon, op: str
) -> None:
    ids = handle(daemon, ROOT, {"op": "submit", "spec": SPEC, "count": 3})["ids"]
    fill_store(daemon, pad_job=ids[2])
    reply = handle(daemon, ROOT, {"op": op, "ids": ids[:2]})
    message = (
        f"the job store cannot write: disk full ({daemon.paths.home}); nothing was changed. "
        "Free space there and try again"
    )
    assert reply == {
        "ok": True,
        "results": [{"id": i, "ok": False, "error": message} for i in ids[:2]],
    }
    jobs = [daemon.store.require(i) for i in ids[:2]]
    assert [(j.state.value, j.held) for j in jobs] == [("PENDING", False)] * 2
    assert [len(daemon.store.events(i)) for i in ids[:2]] == [1, 1]
    assert integrity_ok(daemon.store)


def test_unknown_request_is_refused_as_invalid(daemon: Daemon) -> None:
    reply = handle(daemon, ROOT, {"op": "format-disk"})
    assert reply == {"ok": False, "kind": "invalid", "error": "unknown request 'format-disk'"}


def test_forged_identity_fields_in_a_request_are_ignored(daemon: Daemon) -> None:
    alice = Caller(uid=1234, user="alice", pid=2)
    reply = handle(daemon, alice, {"op": "submit", "spec": SPEC, "uid": 0, "user": "root"})
    (job_id,) = reply["ids"]
    job = daemon.store.require(job_id)
    assert (job.uid, job.user) == (1234, "alice")


@pytest.mark.parametrize("op", ["cancel", "jobs"])
def test_an_unknown_state_filter_is_bad_input_not_an_internal_error(
    daemon: Daemon, op: str
) -> None:
    reply = handle(daemon, ROOT, {"op": op, "states": ["RUNNIN"]})
    assert reply["ok"] is False and reply["kind"] == "invalid"
    assert "RUNNIN" in reply["error"]
